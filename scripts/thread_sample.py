"""Runs a command and samples its threads from /proc while it runs: CPU time, the
CPU each last ran on, and context switches. Prints the command's own output, then
one JSON line {"bench": "threads", ...}: per thread, its share of one core, the
CPUs it was seen on, and its voluntary and involuntary context switches; and how
often the busiest thread shared a CPU with another busy thread of the process.
Used on the H200 (gpu-run.sh threads) to find why some Dawn processes run their
host work 1.6-1.9x slower for their whole life.

    python3 thread_sample.py [--every 0.02] -- COMMAND ...
"""
import argparse
import json
import os
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def threads(pid):
    """{tid: (comm, cpu ticks, last cpu, voluntary, involuntary)} of a live process."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                status = f.read()
        except (FileNotFoundError, ProcessLookupError):
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        # fields[0] is the state (stat field 3): utime and stime are fields 14 and 15,
        # the last CPU field 39.
        ticks = int(fields[11]) + int(fields[12])
        cpu = int(fields[36])
        vol = invol = 0
        for line in status.splitlines():
            if line.startswith("voluntary_ctxt_switches"):
                vol = int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches"):
                invol = int(line.split()[1])
        out[int(tid)] = (comm, ticks, cpu, vol, invol)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--every", type=float, default=0.02)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    first, last, cpus = {}, {}, {}
    shared = samples = 0
    prev = {}
    while proc.poll() is None:
        now = threads(proc.pid)
        busy = {}
        for tid, (comm, ticks, cpu, vol, invol) in now.items():
            first.setdefault(tid, (comm, ticks, vol, invol))
            last[tid] = (comm, ticks, vol, invol)
            cpus.setdefault(tid, set()).add(cpu)
            if tid in prev and ticks > prev[tid][1]:
                busy[tid] = cpu
        main_cpu = now.get(proc.pid, (None, 0, None))[2]
        if proc.pid in busy:
            samples += 1
            if any(t != proc.pid and c == main_cpu for t, c in busy.items()):
                shared += 1
        prev = now
        time.sleep(args.every)
    sys.stdout.write(proc.stdout.read())
    rows = []
    for tid, (comm, ticks, vol, invol) in last.items():
        c0, t0, v0, i0 = first[tid]
        rows.append(
            {
                "tid": tid,
                "main": tid == proc.pid,
                "comm": comm,
                "cpu_s": (ticks - t0) / TICK,
                "cpus": sorted(cpus[tid]),
                "voluntary": vol - v0,
                "involuntary": invol - i0,
            }
        )
    rows.sort(key=lambda r: -r["cpu_s"])
    print(
        json.dumps(
            {
                "bench": "threads",
                "main_busy_samples": samples,
                "main_shared_cpu_samples": shared,
                "threads": [r for r in rows if r["cpu_s"] > 0 or r["main"]][:12],
            }
        )
    )
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env bash
# Candidates of one change against this build, in one call on the GPU machine: the
# builds scripts/gpu-pack.sh packed (this one in .gpu/, each `--candidate NAME=COMMIT[:TESTS]`
# in .gpu/candidates/NAME/) take turns at the step, f32 and f16, ROUNDS times, so that
# the GPU's drift over the call falls on all of them alike; then each candidate's GPU
# tests where it brought them (the f16 GEMMs, whose tensor-core cores run only there, and
# the ops against their references), then this build's GEMM loop probes
# (benches/gemm_ceiling.rs, where packed), then each build's kernels (`bench kernels`).
# Parts that would start past BUDGET_SECONDS (540) are skipped and named in ab.md;
# TEST_FILTER runs only the candidates' tests whose names hold it (`layernorm`: the
# layernorm tests of `ops`, in seconds, for a change to layernorm alone).
#
#   bash scripts/gpu-ab.sh [--local]
#
# --local: here, on lavapipe, with the tiny preset and GPU_DIR's builds (a dry run of the
# script). Writes $OUT (default target/bench/ab): ab.jsonl (every JSON line of the runs,
# each led by "build" and "round"), ab.md (the step's median ms a build and round and
# their means; each build's loss after the last step, flagged where a candidate's differs
# from this build's; the tests' results; the probes; the kernels side by side; what was
# skipped), tests-NAME-TEST.txt, ab.log.
set -uo pipefail
cd "$(dirname "$0")/.."

local_run=0
while [ $# -gt 0 ]; do
  case "$1" in
    --local) local_run=1 ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-ab: unknown argument $1 (--local)" >&2; exit 2 ;;
  esac
  shift
done

G=${GPU_DIR:-.gpu}
out=${OUT:-target/bench/ab}
mkdir -p "$out"
log=$out/ab.log
jsonl=$out/ab.jsonl
: > "$log"
: > "$jsonl"

# Binaries travel xz-packed (the machine has no xz; python's lzma unpacks them). Here
# (--local) they go again at the end: unpacked, .gpu outgrows the 64 MiB a call carries.
packed=()
for f in "$G"/tidepool.bin.xz "$G"/gemm_ceiling.bin.xz "$G"/candidates/*/*.bin.xz; do
  [ -f "$f" ] || continue
  python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" "$f" "${f%.bin.xz}"
  chmod +x "${f%.bin.xz}"
  packed+=("${f%.bin.xz}")
done
[ "$local_run" = 1 ] && trap 'rm -f "${packed[@]}"' EXIT

if [ "$local_run" = 1 ]; then
  export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp/tidepool-xdg}
  mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"
  preset=tiny warmup=1 steps=2 kernel_steps=1 rounds=${ROUNDS:-1}
else
  # shellcheck disable=SC1091
  source "$G/prelude.sh" >> "$log" 2>&1
  preset=shakespeare warmup=3 steps=20 kernel_steps=10 rounds=${ROUNDS:-3}
fi
corpus=data/tinyshakespeare.txt

names=(this) dirs=("$G")
for d in "$G"/candidates/*/; do
  [ -x "$d/tidepool" ] || continue
  names+=("$(basename "$d")") dirs+=("${d%/}")
done
[ ${#names[@]} -gt 1 ] || echo "gpu-ab: no candidates in $G/candidates (gpu-pack.sh --candidate NAME=COMMIT)" >&2

# tagged BUILD ROUND COMMAND...: the command's JSON lines, each led by build and round.
tagged() {
  local build=$1 round=$2
  shift 2
  echo "== $build, round $round: $*" >> "$log"
  timeout "${RUN_SECONDS:-120}" "$@" 2>> "$log" \
    | sed -n "s/^{/{\"build\":\"$build\",\"round\":$round,/p" >> "$jsonl"
}

# Past BUDGET_SECONDS a part is skipped (and named in ab.md), so that a call with many
# candidates still ends, with ab.md written, inside its time limit.
budget=${BUDGET_SECONDS:-540}
# within PART: whether there is time left for PART, and a note of it where there is not.
within() {
  [ "$SECONDS" -lt "$budget" ] && return 0
  echo "gpu-ab: past BUDGET_SECONDS=$budget, skipping $1" >&2
  echo "{\"skipped\":\"$1\",\"budget_seconds\":$budget}" >> "$jsonl"
  return 1
}

for ((r = 1; r <= rounds; r++)); do
  within "round $r" || break
  for i in "${!names[@]}"; do
    echo "gpu-ab: round $r of $rounds, ${names[$i]}" >&2
    tagged "${names[$i]}" "$r" "${dirs[$i]}/tidepool" bench step --presets "$preset" --precision f32,f16 \
      --at-once 1 --warmup "$warmup" --steps "$steps" --corpus "$corpus" --json
  done
done
# The candidates' tests before the kernels: a candidate that fails them is not a
# candidate, whatever its kernels take.
for i in "${!names[@]}"; do
  [ "${names[$i]}" != this ] || continue
  for test in matmul_f16 ops; do
    t=${dirs[$i]}/$test
    [ -x "$t" ] || continue
    within "${names[$i]}'s $test tests" || continue
    echo "gpu-ab: $test tests, ${names[$i]}" >&2
    # The emulated cooperative matrices stand in for tensor cores where there are none
    # (--local runs them); on the GPU the real ones run, in the other tests.
    skip=()
    [ "$test" = matmul_f16 ] && [ "$local_run" = 0 ] && skip=(--skip emulated)
    timeout "${RUN_SECONDS:-120}" "$t" --test-threads 1 "${skip[@]}" ${TEST_FILTER:+"$TEST_FILTER"} \
      > "$out/tests-${names[$i]}-$test.txt" 2>&1
    echo "{\"build\":\"${names[$i]}\",\"tests\":\"$test\",\"exit\":$?}" >> "$jsonl"
  done
done
# The GEMM loops with parts taken away (a few seconds, before the
# kernels' minutes; on a CPU adapter it only validates them).
if [ -x "$G/gemm_ceiling" ] && within "the GEMM loop probes"; then
  echo "gpu-ab: GEMM loop probes" >&2
  tagged this 0 "$G/gemm_ceiling" --json
fi
for i in "${!names[@]}"; do
  within "${names[$i]}'s kernels" || continue
  echo "gpu-ab: kernels, ${names[$i]}" >&2
  tagged "${names[$i]}" 0 "${dirs[$i]}/tidepool" bench kernels --presets "$preset" --precision f32,f16 \
    --warmup "$warmup" --steps "$kernel_steps" --corpus "$corpus" --json
done

python3 - "$jsonl" "${names[@]}" > "$out/ab.md" <<'EOF'
import collections, json, sys
path, names = sys.argv[1], sys.argv[2:]
steps = collections.defaultdict(dict)   # preset -> (build, round) -> ms
losses = collections.defaultdict(lambda: collections.defaultdict(set))  # preset -> build -> losses
kernels = collections.defaultdict(dict)  # (preset, kernel) -> build -> ms
tests = {}
probes = []
skipped = []
for line in open(path):
    d = json.loads(line)
    if "skipped" in d:
        skipped.append(d["skipped"])
    elif "tests" in d:
        tests[(d["build"], d["tests"])] = "passed" if d["exit"] == 0 else f"FAILED (exit {d['exit']})"
    elif "median_ms" in d:
        steps[d["preset"]][(d["build"], d["round"])] = d["median_ms"]
        if "final_loss" in d:
            losses[d["preset"]][d["build"]].add(d["final_loss"])
    elif "kernel" in d and "ms_per_step" in d:
        kernels[(d["preset"], d["kernel"])][d["build"]] = d["ms_per_step"]
    elif "probe" in d and "tflops" in d:
        probes.append(d)
out = ["Median ms a step, each round, and the mean:\n",
       "| preset | " + " | ".join(names) + " |", "| --- |" + " ---: |" * len(names)]
for preset, runs in steps.items():
    cells = []
    for b in names:
        ms = [v for (bb, _), v in sorted(runs.items()) if bb == b]
        cells.append(", ".join(f"{v:.2f}" for v in ms) + (f" (mean {sum(ms) / len(ms):.2f})" if ms else ""))
    out.append(f"| {preset} | " + " | ".join(cells) + " |")
# The same seed every run: a change that keeps every sum in its order keeps the loss
# bit for bit, so a candidate's loss that differs from this build's says its numbers
# moved (expected where it reorders sums; a defect where it should not).
out += ["", "Loss after the last step, every round (the same seed in each):\n",
        "| preset | " + " | ".join(names) + " |", "| --- |" + " ---: |" * len(names)]
for preset, by in losses.items():
    base = by.get(names[0], set())
    cells = []
    for b in names:
        vals = ", ".join(f"{v:.7g}" for v in sorted(by.get(b, ())))
        cells.append(vals + (" (differs from this)" if b != names[0] and by.get(b) != base else ""))
    out.append(f"| {preset} | " + " | ".join(cells) + " |")
if kernels:
    out += ["", "GPU ms a step by kernel (`bench kernels`; `all` is the sum):\n",
            "| preset | kernel | " + " | ".join(names) + " |", "| --- | --- |" + " ---: |" * len(names)]
for (preset, kernel), by in sorted(kernels.items(), key=lambda kv: (kv[0][0], -max(kv[1].values()))):
    out.append(f"| {preset} | {kernel} | " + " | ".join(f"{by[b]:.3f}" if b in by else "" for b in names) + " |")
if tests:
    out += ["", "GPU tests: " + ", ".join(f"{b} {t} {r}" for (b, t), r in tests.items())]
if probes:
    out += ["", "This build's GEMM loop probes (benches/gemm_ceiling.rs):\n",
            "| family | probe | threads | ms | TFLOP/s |", "| --- | --- | ---: | ---: | ---: |"]
    out += [f"| {d['family']} | {d['probe']} | {d['threads']} | {d['ms']:.3f} | {d['tflops']:.1f} |" for d in probes]
if skipped:
    out += ["", "Skipped past BUDGET_SECONDS: " + ", ".join(skipped)]
print("\n".join(out))
EOF
echo "gpu-ab: $out (ab.md, ab.jsonl, ab.log)" >&2
cat "$out/ab.md"

#!/usr/bin/env bash
# Runs on the H200 machine (BENCHMARKS.md says how it is called): tidepool's native
# benchmarks, the wasm build through Dawn, and the PyTorch anchor, side by side in one
# call so ratios share one machine state. Every run's output lands in
# $OUT/results.jsonl after a {"run": NAME, "command": ...} line; stderr in $OUT/stderr.log.
#   scripts/gpu-run.sh bench    matmul, step, pool, policies, Dawn, PyTorch (~5 min)
#   scripts/gpu-run.sh round2   soak, PyTorch memory, step, trace replay, presets in Dawn (~7 min)
#   scripts/gpu-run.sh f16      --precision f16 (README, Precision): F16_PARTS picks, in order,
#                               parity: tests/matmul_f16.rs with the tensor-core core forced
#                               (TIDEPOOL_F16_CORE=coop), bench: the matmul variants on the
#                               GPT shapes, f32 and f16, step: bench step on shakespeare in
#                               f32 and f16, train: shakespeare 2000 steps in f32 and f16 at
#                               once (same seed), eval every 250 steps, every 50th step line
#                               kept; F16_TRAIN_SECONDS caps it (default 300). All four fit one
#                               10-minute call only just: better two calls,
#                               F16_PARTS="parity bench step" (~4 min) and
#                               F16_PARTS=train F16_TRAIN_SECONDS=540 (~6 min).
#   scripts/gpu-run.sh round3   this round's figures (~5 min): PyTorch fp32/tf32/bf16 with
#                               memory, shakespeare f32 and f16 steps beside the previous
#                               build's (tidepool-prev, when carried), memory and replay,
#                               the presets natively and through Dawn, tensor-core variants
#   scripts/gpu-run.sh round4   per-shape cuBLAS (torch_matmul.py) beside matmul_bench,
#                               submit_every swept natively and through Dawn on every
#                               preset, PyTorch eager, op parity on the GPU (~6 min)
#   scripts/gpu-run.sh ratio    the browser build (Dawn) against native, three rounds (~3 min)
#   scripts/gpu-run.sh round5   op parity on the GPU, PyTorch, the shakespeare step and its
#                               kernels with and without subgroups, the GEMMs beside
#                               per-shape cuBLAS, and Dawn against native on the page's
#                               presets with Dawn's defaults and without its robustness
#                               checks (~7 min)
#   scripts/gpu-run.sh round6   op parity, per-kernel GPU time natively and through Dawn,
#                               the page's presets beside the previous build (five
#                               rounds), Dawn with --no-liftoff and a longer warm-up,
#                               the shakespeare step (~6 min)
#   scripts/gpu-run.sh round7   op parity on the GPU, the page's presets beside the
#                               previous build and a middle one (five rounds), Dawn's
#                               calls by submit, the shakespeare step (~7 min)
#   scripts/gpu-run.sh round8   round7 with seven rounds and every build's Dawn calls
#   scripts/gpu-run.sh round9   the same with nine rounds
#   scripts/gpu-run.sh round10  op parity and each kernel's GPU time (tiny, natively and
#                               through Dawn), then the page's presets one step a call and 16 a call (what the
#                               page's worker now does), this build against the previous
#                               one, natively and through Dawn, seven rounds; then every
#                               WebGPU call of tiny 16 a call timed, each build (~6 min)
#   scripts/gpu-run.sh round11  op parity, each kernel's GPU time (tiny and small natively,
#                               tiny through Dawn, both builds), then tiny and small 16
#                               steps a call beside the previous build, natively and
#                               through Dawn, five rounds; Dawn's calls timed (~6 min)
#   scripts/gpu-run.sh round12  op parity, then tiny and small 16 steps a call beside the
#                               previous build, natively and through Dawn (both builds'
#                               trainers in one process), three rounds; submit_every
#                               16-128 through Dawn; Dawn's null backend (~7 min)
#   scripts/gpu-run.sh round13  op parity and tests/gpu.rs, then tiny and small 16 steps a
#                               call beside the previous build, natively and through Dawn
#                               (three rounds), two rounds of 2000-step processes of each,
#                               and Dawn's null backend (~4 min)
#   scripts/gpu-run.sh perf17   where a tiny step's host time goes through Dawn, by
#                               library: perf (gpu-pack.sh PERF=1) on bench-dawn.mjs with
#                               the Vulkan backend and the null one, beside tiny 16 a call
#                               natively and through Dawn, three rounds (~4 min)
#   scripts/gpu-run.sh browser18  the wasm build in a Chromium page on the GPU, beside Dawn
#                               in Node and native: tiny and small 16 a call (~5 min)
#   scripts/gpu-run.sh browser19  browser18 with the previous build beside this one on
#                               tiny, and the shakespeare step's memory (~8 min)
#   scripts/gpu-run.sh readback19  a readback's round trip on the idle GPU, in a page
#                               and in Node with Dawn (~1 min)
#   scripts/gpu-run.sh browser20  tiny and small one call at a time and two in flight,
#                               natively, in a Chromium page and in Node with Dawn (~8 min)
#   scripts/gpu-run.sh page20   the page's own training loop (its worker) on tiny and
#                               small, one call in flight and two, beside native (~4 min)
#   scripts/gpu-run.sh page20b  page20's two in flight, drawn and hidden, with calls of
#                               16 ms and 40 ms, beside native (~4 min)
#   scripts/gpu-run.sh attention1  op parity, each kernel's GPU time with each build, then
#                               tiny and small 16 a call and the shakespeare step beside
#                               the previous build, natively and through Dawn (~6 min)
#   scripts/gpu-run.sh minsplit  three builds of one setting (this, prev, mid): small's
#                               kernels, tiny and small 16 a call natively and through
#                               Dawn, three rounds (~5 min)
#   scripts/gpu-run.sh shakespeare3  the shakespeare step, both builds, natively and
#                               through Dawn, three rounds (~1 min)
#   scripts/gpu-run.sh steady16 tiny and small 16 steps a call at their steady speed (2000
#                               steps a process, both builds, natively and through Dawn,
#                               three rounds), `tidepool train` on tiny (2000 steps) with
#                               each build's binary, and shakespeare one and 4 a call (~5 min)
#   scripts/gpu-run.sh calls    Dawn's host time on tiny and small: every WebGPU call
#                               timed, and a V8 profile (pkg-prof/, when carried)
#   scripts/gpu-run.sh bound    whether Dawn's step waits on its host or on the GPU:
#                               one and eight steps at once, checks off, each submit
#                               timed, parts of 8-64 dispatches (~4 min)
#   scripts/gpu-run.sh dawngpu  a tiny step through Dawn, bound by its GPU or its host:
#                               kernels timed alone; one and eight steps at once,
#                               with and without Dawn's robustness checks (~4 min)
#   scripts/gpu-run.sh tiering  Dawn's slow processes against V8's wasm tiers: node's
#                               defaults, --no-liftoff, 300 warm-up steps (~2 min)
#   scripts/gpu-run.sh threads  Dawn's slow processes: each thread sampled from /proc,
#                               node's defaults and --single-threaded (~2 min)
#   scripts/gpu-run.sh steady   tiny and small at their steady speed: 2000 steps a
#                               process, natively and through Dawn, this build and
#                               the previous one, five rounds (~4 min)
#   scripts/gpu-run.sh spinner  Dawn's slow phases against the host's idle CPUs: alone,
#                               sampled, beside a busy shell loop (~3 min)
#   scripts/gpu-run.sh irq      Dawn pinned to the CPU taking the GPU's interrupts and to
#                               one taking none (~2 min)
#   scripts/gpu-run.sh pipe     Dawn writing to a file, into a pipe, and sampled (~1 min)
#   scripts/gpu-run.sh gap      Dawn's GPU time against native's: per kernel, and steps
#                               eight at once with each of Dawn's checks off in turn
#   scripts/gpu-run.sh previous this build against an earlier one (gpu-pack.sh's PREV_TIDEPOOL,
#                               PREV_PKG) natively and through Dawn on tiny and small
#   scripts/gpu-run.sh final    PyTorch, the shakespeare step and its kernels, then ratio
#   scripts/gpu-run.sh f16      parity, matmul variants, f32/f16 steps and 2000-step curves
#   scripts/gpu-run.sh train    shakespeare on tinyshakespeare with eval every 250 steps
#   scripts/gpu-run.sh curves   that training and its PyTorch twin (scripts/torch_twin.py)
#                               at once on the one GPU, each evaluating 200 fixed held-out
#                               batches every 250 steps: $OUT/curve-tidepool.jsonl,
#                               $OUT/curve-torch.jsonl and the table $OUT/curves.md.
#                               CURVE_SECONDS (540) caps both; TRAIN_FLAGS and TWIN_FLAGS
#                               pass extra flags to each.
# Expects .gpu/ filled by ../shared/gpu/pack.sh --dawn plus tidepool, matmul_bench,
# pkg/ and dawn/bench-dawn.mjs (scripts/gpu-pack.sh does that).
set -u
source .gpu/prelude.sh
cd .gpu
# Binaries packed as NAME.bin.xz (the carry limit is 64 MiB; the machine has no xz).
for f in $(find . -name '*.bin.xz'); do
  python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" "$f" "${f%.bin.xz}"
  chmod +x "${f%.bin.xz}"
done
out=${OUT:-out}
mkdir -p "$out"
run() {
  local name=$1
  shift
  echo "== $name: $*" >&2
  echo "{\"run\": \"$name\", \"command\": \"$*\"}" >> "$out/results.jsonl"
  local t0=$SECONDS
  "$@" > "$out/$name.tmp" 2>> "$out/stderr.log"
  echo "   exit $? after $((SECONDS - t0)) s" >&2
  cat "$out/$name.tmp" >> "$out/results.jsonl"
  tail -n 4 "$out/$name.tmp" >&2
  rm -f "$out/$name.tmp"
}
# The page's presets, this build against the previous one (tidepool-prev, pkg-prev,
# when carried) and a build between them (tidepool-mid, pkg-mid), natively and
# through Dawn, taking turns, one trainer a process, for $1 rounds.
against_previous() {
  for round in $(seq 1 "$1"); do
    for b in tidepool-prev tidepool-mid tidepool; do
      [ -x ./$b ] && run "${b}_$round" ./$b bench step --presets tiny,small --submit-every 32 --warmup 5 --steps 30 --corpus tinyshakespeare.txt --json
    done
    for p in tiny small; do
      for pkg in pkg-prev pkg-mid pkg; do
        [ -d ./$pkg ] && run "dawn_${pkg}_${p}_$round" /tmp/node dawn/bench-dawn.mjs --pkg ./$pkg --preset $p --corpus tinyshakespeare.txt --warmup 5 --steps 30
      done
    done
  done
}
# The page's presets 16 steps a call, this build beside the previous one, for $1
# rounds: natively one process a build, through Dawn both trainers in one process.
beside_previous_16() {
  for round in $(seq 1 "$1"); do
    for b in tidepool-prev tidepool; do
      [ -x ./$b ] && run "${b}_$round" ./$b bench step --presets tiny,small --at-once 16 --warmup 5 --steps 30 --corpus tinyshakespeare.txt --json
    done
    for p in tiny small; do
      run "dawn_${p}_at16_$round" /tmp/node dawn/bench-dawn.mjs --pkg ./pkg-prev,./pkg --preset $p --corpus tinyshakespeare.txt --warmup 5 --steps 30 --at-once 16
    done
  done
}
# Chromium from the parts earlier calls left in /tmp/chr-parts (gpu-pack.sh
# PACK_CHROMIUM=1), and the flags that put its WebGPU on the GPU: each set in turn
# until the page's adapter is NVIDIA's (chrome://gpu of each set tried in gpu-N.txt);
# they end in $CHROMIUM_ARGS.
chromium_on_gpu() {
  if [ ! -x /tmp/chr/chrpkg/chromium/chromium ]; then
    mkdir -p /tmp/chr
    cat /tmp/chr-parts/part-* | python3 -c "import lzma,sys,tarfile; tarfile.open(fileobj=lzma.open(sys.stdin.buffer), mode='r|').extractall('/tmp/chr')"
  fi
  printf '#!/bin/sh\nLD_LIBRARY_PATH=/tmp/chr/chrpkg/lib exec /tmp/chr/chrpkg/chromium/chromium "$@"\n' > /tmp/chr/chrome.sh
  chmod +x /tmp/chr/chrome.sh
  export CHROMIUM=/tmp/chr/chrome.sh VK_ICD_FILENAMES=$VK_DRIVER_FILES
  python3 -c "import tarfile; tarfile.open('playwright-core.tar.xz').extractall('..')"
  rm -rf ../pkg && cp -r pkg ../pkg
  ./tidepool info | tee "$out/info.txt"
  found="" i=0
  v="--use-angle=vulkan --enable-features=Vulkan --disable-vulkan-surface"
  for flags in \
    "$v" \
    "$v --ignore-gpu-blocklist --enable-webgpu-developer-features" \
    "--use-angle=vulkan --enable-features=Vulkan,VulkanFromANGLE,DefaultANGLEVulkan --disable-vulkan-surface --ignore-gpu-blocklist --use-webgpu-adapter=default" \
    "$v --ignore-gpu-blocklist --disable-gpu-sandbox --use-vulkan=native" \
    "$v --ignore-gpu-blocklist --enable-dawn-features=allow_unsafe_apis --disable-dawn-features=disallow_unsafe_apis"; do
    i=$((i + 1))
    echo "== probe $i: $flags" >&2
    # DEBUG=pw:browser: the browser's own stderr (its GPU process's complaints) too.
    adapter=$(CHROMIUM_ARGS="$flags" DEBUG=pw:browser timeout 120 /tmp/node ../scripts/probe-webgpu.mjs "$out/gpu-$i.txt" 2>> "$out/stderr.log")
    adapter=${adapter:-null}
    echo "   $adapter" >&2
    echo "{\"probe\": \"$flags\", \"adapter\": $adapter}" >> "$out/results.jsonl"
    case "$adapter" in *'"vendor":"nvidia"'*) found=$flags; break ;; esac
  done
  [ -n "$found" ] || { echo "no flags put Chromium's WebGPU on the GPU" >&2; exit 3; }
  export CHROMIUM_ARGS="$found"
}
# What the whole page needs beyond the wasm (bench-browser.mjs page): its chart
# library, and a font (the GPU machine has none; Chromium aborts laying out text).
page_deps() {
  mkdir -p ../node_modules/uplot && rm -rf ../node_modules/uplot/dist && cp -r uplot-dist ../node_modules/uplot/dist
  printf '<?xml version="1.0"?>\n<fontconfig><dir>%s</dir><cachedir>/tmp/fc-cache</cachedir></fontconfig>\n' "$PWD/fonts" > /tmp/fonts.conf
  export FONTCONFIG_FILE=/tmp/fonts.conf
}
case "${1:-bench}" in
  bench)
    ./tidepool info | tee "$out/info.txt"
    run torch python3 torch_gpt.py fp32_manual fp32_sdpa tf32_sdpa
    run matmul ./matmul_bench --json
    run step ./tidepool bench step --presets shakespeare --warmup 3 --steps 10 --corpus tinyshakespeare.txt --json
    run dawn /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset shakespeare --corpus tinyshakespeare.txt --warmup 3 --steps 10 --pool
    run pool ./tidepool bench pool --json
    run policies ./tidepool bench policies --presets tiny,shakespeare --warmup 2 --steps 3 --corpus tinyshakespeare.txt --json
    ;;
  round2)
    # The second round's figures in one call: the soak (flat memory), the PyTorch
    # anchor with its peak memory, the step with and without the pool, the trace's
    # replay and cost, and the page's presets natively and through Dawn.
    ./tidepool info | tee "$out/info.txt"
    run soak ./tidepool bench soak --preset small --steps 20000 --every 1000 --json
    run torch python3 torch_gpt.py fp32_manual fp32_sdpa tf32_sdpa
    run step ./tidepool bench step --presets shakespeare --warmup 3 --steps 10 --corpus tinyshakespeare.txt --json
    run trace_train ./tidepool train --preset shakespeare --steps 3 --corpus tinyshakespeare.txt --trace trace.json --json
    run replay ./tidepool trace replay trace.json --json
    run trace_bench ./tidepool trace bench --preset shakespeare --steps 5 --warmup 2
    run step_small ./tidepool bench step --presets tiny,small --warmup 5 --steps 30 --corpus tinyshakespeare.txt --json
    for p in tiny small shakespeare; do
      run "dawn_$p" /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset $p --corpus tinyshakespeare.txt --warmup 5 --steps 20 --pool
    done
    ;;
  f16)
    ./tidepool info | tee "$out/info.txt"
    for part in ${F16_PARTS:-parity bench step train}; do
      case $part in
        parity)
          run f16_parity env TIDEPOOL_F16_CORE=coop ./matmul_f16 --test-threads 1 ;;
        bench)
          run f16_matmul ./matmul_bench --json --no-squares --only matmul \
            --variant tiled,splitk,f16,f16-splitk,coop,coop-splitk ;;
        step)
          run f16_step ./tidepool bench step --presets shakespeare --precision f32,f16 \
            --warmup 3 --steps 10 --corpus tinyshakespeare.txt --json ;;
        train)
          secs=${F16_TRAIN_SECONDS:-300}
          echo "== f16 train: f32 and f16 at once, at most $secs s" >&2
          t0=$SECONDS
          for p in f32 f16; do
            echo "{\"run\": \"f16_train_$p\"}" > "$out/train-$p.tmp"
            timeout "$secs" ./tidepool train --preset shakespeare --corpus tinyshakespeare.txt \
              --steps 2000 --eval-every 250 --precision $p --json 2>> "$out/stderr.log" \
              | awk -F'"step":' '{ split($2, a, ","); if (/"final"/ || a[1] % 50 == 0) print }' \
              >> "$out/train-$p.tmp" &
          done
          wait; echo "   exit after $((SECONDS - t0)) s" >&2
          cat "$out/train-f32.tmp" "$out/train-f16.tmp" >> "$out/results.jsonl"
          tail -n 2 "$out/train-f32.tmp" "$out/train-f16.tmp" >&2
          rm -f "$out"/train-*.tmp ;;
        *) echo "unknown F16_PARTS entry $part" >&2 ;;
      esac
    done
    ;;
  round3)
    ./tidepool info | tee "$out/info.txt"
    run torch python3 torch_gpt.py fp32_manual fp32_sdpa tf32_sdpa bf16_sdpa
    run step ./tidepool bench step --presets shakespeare --precision f32,f16 --warmup 3 --steps 10 --corpus tinyshakespeare.txt --json
    if [ -x ./tidepool-prev ]; then
      run step_prev ./tidepool-prev bench step --presets shakespeare --warmup 3 --steps 10 --corpus tinyshakespeare.txt --json
    fi
    run memory ./tidepool train --preset shakespeare --steps 3 --corpus tinyshakespeare.txt --trace trace.json --json
    run replay ./tidepool trace replay trace.json --json
    run step_small ./tidepool bench step --presets tiny,small --warmup 5 --steps 30 --corpus tinyshakespeare.txt --json
    if [ -x ./tidepool-prev ]; then
      run step_small_prev ./tidepool-prev bench step --presets tiny,small --warmup 5 --steps 30 --corpus tinyshakespeare.txt --json
    fi
    for p in tiny small shakespeare; do
      run "dawn_$p" /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset $p --corpus tinyshakespeare.txt --warmup 5 --steps 20 --pool
    done
    # An earlier build's bench beside this one's, when carried (MATMUL_PREV_VARIANTS).
    [ -x ./matmul_bench_prev ] && run matmul_prev ./matmul_bench_prev --json --no-squares --only matmul --variant ${MATMUL_PREV_VARIANTS:-tiled,splitk}
    [ -x ./matmul_bench ] && run matmul ./matmul_bench --json --no-squares --only matmul --variant ${MATMUL_VARIANTS:-tiled,splitk,coop,coop-splitk}
    if [ -x ./matmul_f16 ]; then
      for core in ${F16_CORES:-coop}; do
        run "f16_parity_$core" env TIDEPOOL_F16_CORE=$core ./matmul_f16 --test-threads 1
      done
    fi
    ;;
  round4)
    # Round four (~6 min): per-shape cuBLAS beside matmul_bench, submit_every swept
    # natively and through Dawn on every preset, GPU time per kernel, PyTorch eager
    # for the step ratio, op parity on the GPU (subgroups where the adapter has them).
    ./tidepool info | tee "$out/info.txt"
    run torch python3 torch_gpt.py fp32_manual fp32_sdpa tf32_sdpa bf16_sdpa
    run torch_matmul python3 torch_matmul.py --dtypes fp32,tf32,fp16
    [ -x ./matmul_bench ] && run matmul ./matmul_bench --json --no-squares --only matmul --variant ${MATMUL_VARIANTS:-tiled,splitk,coop2,coop2-splitk}
    sweep=${SUBMIT_SWEEP:-0,8,16,32,64,128}
    big=${SUBMIT_SWEEP_BIG:-0,32,64}
    run step_small ./tidepool bench step --presets tiny,small --submit-every $sweep --warmup 5 --steps 30 --corpus tinyshakespeare.txt --json
    run step ./tidepool bench step --presets shakespeare --precision f32,f16 --submit-every $big --warmup 3 --steps 10 --corpus tinyshakespeare.txt --json
    run kernels ./tidepool bench kernels --presets shakespeare --precision f32,f16 --warmup 3 --steps 5 --corpus tinyshakespeare.txt --json
    run kernels_nosub ./tidepool bench kernels --no-subgroups --presets shakespeare --warmup 3 --steps 5 --corpus tinyshakespeare.txt --json
    # Block reductions by subgroups (default) or shared memory, taking turns.
    for round in 1 2; do
      for v in 0 1; do
        nosub=; if [ $v = 1 ]; then nosub=--no-subgroups; fi
        run "step_nosub$v" ./tidepool bench step $nosub --presets tiny,small,shakespeare --submit-every 32 --warmup 3 --steps 20 --corpus tinyshakespeare.txt --json
      done
    done
    run kernels_small ./tidepool bench kernels --presets tiny,small --warmup 5 --steps 10 --corpus tinyshakespeare.txt --json
    # Through Dawn one trainer a process: every live device of a process is ticked
    # while a step's loss is awaited, so trainers side by side slow each other.
    # Two rounds, values taking turns.
    for round in 1 2; do
      for p in tiny small; do
        for v in ${sweep//,/ }; do
          run "dawn_${p}_$v" /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset $p --corpus tinyshakespeare.txt --warmup 5 --steps 30 --submit-every $v
        done
      done
    done
    for v in ${big//,/ }; do
      run "dawn_shakespeare_$v" /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset shakespeare --corpus tinyshakespeare.txt --warmup 3 --steps 10 --submit-every $v
    done
    # Where Dawn's host time goes: V8's profile of a small run (JS shims, GC, wasm).
    mkdir -p "$out/prof"
    run dawn_profile /tmp/node --cpu-prof --cpu-prof-dir="$out/prof" dawn/bench-dawn.mjs --pkg ./pkg --preset small --corpus tinyshakespeare.txt --warmup 5 --steps 60
    for t in ${GPU_TESTS:-op_parity matmul_f16}; do
      [ -x ./$t ] && run "test_$t" ./$t --test-threads 1
    done
    ;;
  round5)
    ./tidepool info | tee "$out/info.txt"
    for t in ${GPU_TESTS:-op_parity}; do
      [ -x ./$t ] && run "test_$t" ./$t --test-threads 1
    done
    run torch python3 torch_gpt.py fp32_manual fp32_sdpa tf32_sdpa bf16_sdpa
    run step ./tidepool bench step --presets shakespeare --precision f32,f16 --submit-every 32 --warmup 3 --steps 20 --corpus tinyshakespeare.txt --json
    run kernels ./tidepool bench kernels --presets shakespeare --warmup 3 --steps 5 --corpus tinyshakespeare.txt --json
    run kernels_nosub ./tidepool bench kernels --no-subgroups --presets shakespeare --warmup 3 --steps 5 --corpus tinyshakespeare.txt --json
    run torch_matmul python3 torch_matmul.py --dtypes fp32
    [ -x ./matmul_bench ] && run matmul ./matmul_bench --json --no-squares --only matmul --variant ${MATMUL_VARIANTS:-tiled,narrow,splitk,tiled,narrow,splitk}
    # Dawn against native, one trainer a process, two rounds; then Dawn without its
    # robustness checks and validation (toggles Chrome does not set): how much of
    # the gap they are.
    for round in 1 2; do
      run "native_$round" ./tidepool bench step --presets tiny,small --submit-every 32 --warmup 5 --steps 30 --corpus tinyshakespeare.txt --json
      for p in tiny small; do
        run "dawn_${p}_$round" /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset $p --corpus tinyshakespeare.txt --warmup 5 --steps 30
        run "dawn_${p}_unchecked_$round" /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset $p --corpus tinyshakespeare.txt --warmup 5 --steps 30 --dawn-toggles disable_robustness,skip_validation
      done
    done
    ;;
  round6)
    # This round's figures (~6 min): op parity on the GPU; each kernel's GPU time
    # natively and through Dawn; then the page's presets natively and through Dawn,
    # this build beside the previous one (PREV_TIDEPOOL, PREV_PKG), five rounds, one
    # trainer a process; Dawn again with V8's optimizing wasm compiler from the start
    # (--no-liftoff) and after a longer warm-up; the shakespeare step.
    ./tidepool info | tee "$out/info.txt"
    for t in ${GPU_TESTS:-op_parity}; do
      [ -x ./$t ] && run "test_$t" ./$t --test-threads 1
    done
    # The GPU idles at a low clock: a few seconds of work first.
    ./tidepool bench step --presets small --warmup 5 --steps 200 --corpus tinyshakespeare.txt --json > /dev/null 2>&1
    run kernels ./tidepool bench kernels --presets tiny,small --warmup 5 --steps 5 --corpus tinyshakespeare.txt --json
    for p in tiny small; do
      run "dawn_kernels_$p" /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset $p --corpus tinyshakespeare.txt --warmup 5 --steps 5 --kernels --dawn-disable timestamp_quantization
    done
    against_previous 5
    for round in 1 2 3; do
      for p in tiny small; do
        run "dawn_noliftoff_${p}_$round" /tmp/node --no-liftoff dawn/bench-dawn.mjs --pkg ./pkg --preset $p --corpus tinyshakespeare.txt --warmup 5 --steps 30
        run "dawn_warm50_${p}_$round" /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset $p --corpus tinyshakespeare.txt --warmup 50 --steps 30
      done
    done
    run step ./tidepool bench step --presets shakespeare --submit-every 32 --warmup 3 --steps 20 --corpus tinyshakespeare.txt --json
    [ -x ./tidepool-prev ] && run step_prev ./tidepool-prev bench step --presets shakespeare --submit-every 32 --warmup 3 --steps 20 --corpus tinyshakespeare.txt --json
    run dawn_shakespeare /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset shakespeare --corpus tinyshakespeare.txt --warmup 3 --steps 20
    ;;
  calls)
    # Where the browser build's host time goes on the page's presets (~3 min): native
    # and Dawn steps, then Dawn with every WebGPU call timed (bench-dawn.mjs
    # --time-calls), then a V8 profile of Dawn on tiny (pkg-prof/, when carried: a
    # build that keeps function names) under $OUT/prof.
    for round in 1 2; do
      run "native_$round" ./tidepool bench step --presets tiny,small --submit-every 32 --warmup 5 --steps 30 --corpus tinyshakespeare.txt --json
      for p in tiny small; do
        run "dawn_${p}_$round" /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset $p --corpus tinyshakespeare.txt --warmup 5 --steps 30
        run "dawn_${p}_calls_$round" /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset $p --corpus tinyshakespeare.txt --warmup 5 --steps 30 --time-calls
      done
    done
    if [ -d ./pkg-prof ]; then
      for p in tiny small; do
        run "dawn_${p}_prof" /tmp/node --cpu-prof --cpu-prof-dir "$out/prof" --cpu-prof-name "$p.cpuprofile" dawn/bench-dawn.mjs --pkg ./pkg-prof --preset $p --corpus tinyshakespeare.txt --warmup 20 --steps 300
      done
    fi
    ;;
  bound)
    # Is Dawn's step bound by its host or by the GPU (~4 min)? Two rounds of: native
    # steps one and eight at once; through Dawn the same, eight at once also without
    # its robustness checks, and one at a time with every call timed (each submit's
    # time by part); then Dawn's tiny step with parts of 8, 16, 32, 64 and one submit.
    # Also the GPU's clocks before and after.
    nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$out/clocks-before.csv" 2>&1
    run warm ./tidepool bench step --presets shakespeare --warmup 3 --steps 5 --corpus tinyshakespeare.txt --json
    for round in 1 2; do
      run "native_$round" ./tidepool bench step --presets tiny,small --at-once 1,8 --submit-every 32 --warmup 5 --steps 30 --corpus tinyshakespeare.txt --json
      for p in tiny small; do
        run "dawn_${p}_$round" /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset $p --corpus tinyshakespeare.txt --warmup 5 --steps 30
        run "dawn_${p}_eight_$round" /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset $p --corpus tinyshakespeare.txt --warmup 2 --steps 10 --at-once 8
        run "dawn_${p}_eight_unchecked_$round" /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset $p --corpus tinyshakespeare.txt --warmup 2 --steps 10 --at-once 8 --dawn-toggles disable_robustness
        run "dawn_${p}_calls_$round" /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset $p --corpus tinyshakespeare.txt --warmup 5 --steps 30 --time-calls
      done
    done
    run dawn_tiny_parts /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset tiny --corpus tinyshakespeare.txt --warmup 5 --steps 30 --submit-every 8,16,32,64,0
    run native_tiny_parts ./tidepool bench step --presets tiny --submit-every 8,16,32,64,0 --warmup 5 --steps 30 --corpus tinyshakespeare.txt --json
    nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$out/clocks-after.csv" 2>&1
    ;;
  round7|round8|round9)
    # These rounds' figures (~7 min): op parity on the GPU; the page's presets
    # natively and through Dawn, this build beside the previous one and a middle one
    # (PREV_*, MID_* in gpu-pack.sh), five rounds (round8: seven, round9: nine), one trainer a
    # process; Dawn's calls and submits of each build; the shakespeare step natively
    # and through Dawn.
    ./tidepool info | tee "$out/info.txt"
    for t in ${GPU_TESTS:-op_parity}; do
      [ -x ./$t ] && run "test_$t" ./$t --test-threads 1
    done
    # The GPU idles at a low clock: a few seconds of work first.
    ./tidepool bench step --presets small --warmup 5 --steps 200 --corpus tinyshakespeare.txt --json > /dev/null 2>&1
    case $1 in round7) against_previous 5 ;; round8) against_previous 7 ;; *) against_previous 9 ;; esac
    for p in tiny small; do
      for pkg in pkg-prev pkg-mid pkg; do
        [ -d ./$pkg ] && run "dawn_${pkg}_${p}_calls" /tmp/node dawn/bench-dawn.mjs --pkg ./$pkg --preset $p --corpus tinyshakespeare.txt --warmup 5 --steps 30 --time-calls
      done
    done
    run step_shakespeare ./tidepool bench step --presets shakespeare --submit-every 32 --warmup 3 --steps 10 --corpus tinyshakespeare.txt --json
    run dawn_shakespeare /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset shakespeare --corpus tinyshakespeare.txt --warmup 3 --steps 10
    ;;
  round10)
    ./tidepool info | tee "$out/info.txt"
    for t in ${GPU_TESTS:-op_parity}; do
      [ -x ./$t ] && run "test_$t" ./$t --test-threads 1
    done
    ./tidepool bench step --presets small --warmup 5 --steps 200 --corpus tinyshakespeare.txt --json > /dev/null 2>&1
    run kernels ./tidepool bench kernels --presets tiny --warmup 5 --steps 5 --corpus tinyshakespeare.txt --json
    run dawn_kernels_tiny /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset tiny --corpus tinyshakespeare.txt --warmup 5 --steps 5 --kernels --dawn-disable timestamp_quantization
    for round in $(seq 1 7); do
      for b in tidepool-prev tidepool; do
        [ -x ./$b ] && run "${b}_$round" ./$b bench step --presets tiny,small --at-once 1,16 --warmup 5 --steps 30 --corpus tinyshakespeare.txt --json
      done
      for p in tiny small; do
        for n in 1 16; do
          for pkg in pkg-prev pkg; do
            [ -d ./$pkg ] && run "dawn_${pkg}_${p}_at${n}_$round" /tmp/node dawn/bench-dawn.mjs --pkg ./$pkg --preset $p --corpus tinyshakespeare.txt --warmup 5 --steps 30 --at-once $n
          done
        done
      done
    done
    for pkg in pkg-prev pkg; do
      [ -d ./$pkg ] && run "dawn_${pkg}_tiny_at16_calls" /tmp/node dawn/bench-dawn.mjs --pkg ./$pkg --preset tiny --corpus tinyshakespeare.txt --warmup 5 --steps 30 --at-once 16 --time-calls
    done
    ;;
  round11)
    # Round eleven (~8 min): op parity, per-kernel GPU time natively and through Dawn
    # (the dispatch count a step), then five rounds of the page's presets 16 steps a
    # call beside the previous build, natively and through Dawn, and Dawn's calls timed.
    ./tidepool info | tee "$out/info.txt"
    for t in ${GPU_TESTS:-op_parity}; do
      [ -x ./$t ] && run "test_$t" ./$t --test-threads 1
    done
    ./tidepool bench step --presets small --warmup 5 --steps 200 --corpus tinyshakespeare.txt --json > /dev/null 2>&1
    run kernels ./tidepool bench kernels --presets tiny,small --warmup 5 --steps 5 --corpus tinyshakespeare.txt --json
    for pkg in pkg-prev pkg; do
      [ -d ./$pkg ] && run "dawn_${pkg}_kernels_tiny" /tmp/node dawn/bench-dawn.mjs --pkg ./$pkg --preset tiny --corpus tinyshakespeare.txt --warmup 5 --steps 5 --kernels --dawn-disable timestamp_quantization
    done
    for round in $(seq 1 5); do
      for b in tidepool-prev tidepool; do
        [ -x ./$b ] && run "${b}_$round" ./$b bench step --presets tiny,small --at-once 16 --warmup 5 --steps 30 --corpus tinyshakespeare.txt --json
      done
      for p in tiny small; do
        for pkg in pkg-prev pkg; do
          [ -d ./$pkg ] && run "dawn_${pkg}_${p}_at16_$round" /tmp/node dawn/bench-dawn.mjs --pkg ./$pkg --preset $p --corpus tinyshakespeare.txt --warmup 5 --steps 30 --at-once 16
        done
      done
    done
    for pkg in pkg-prev pkg; do
      [ -d ./$pkg ] && run "dawn_${pkg}_tiny_at16_calls" /tmp/node dawn/bench-dawn.mjs --pkg ./$pkg --preset tiny --corpus tinyshakespeare.txt --warmup 5 --steps 30 --at-once 16 --time-calls
    done
    ;;
  round12)
    # Round twelve (~7 min): op parity, then three rounds of the page's presets 16
    # steps a call beside the previous build: natively (one process a build) and
    # through Dawn (both builds' trainers in one process, taking turns); then
    # submit_every 16-128 through Dawn, and the host's side alone on Dawn's null
    # backend, both builds side by side.
    ./tidepool info | tee "$out/info.txt"
    for t in ${GPU_TESTS:-op_parity}; do
      [ -x ./$t ] && run "test_$t" ./$t --test-threads 1
    done
    ./tidepool bench step --presets small --warmup 5 --steps 200 --corpus tinyshakespeare.txt --json > /dev/null 2>&1
    beside_previous_16 3
    run dawn_tiny_submit_every /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset tiny --corpus tinyshakespeare.txt --warmup 5 --steps 30 --at-once 16 --submit-every 16,32,64,128
    for p in tiny small; do
      run "dawn_null_$p" /tmp/node dawn/bench-dawn.mjs --dawn-backend null --pkg ./pkg-prev,./pkg --preset $p --corpus tinyshakespeare.txt --warmup 3 --steps 60 --at-once 16
    done
    ;;
  round13)
    # Round thirteen (~4 min): op parity and tests/gpu.rs on the H200, then three
    # rounds of tiny and small 16 steps a call beside the previous build (natively one
    # process a build, through Dawn both trainers in one process), then two rounds of
    # 2000-step processes of each (the host's slow phases show there), both builds.
    ./tidepool info | tee "$out/info.txt"
    for t in ${GPU_TESTS:-op_parity gpu}; do
      [ -x ./$t ] && run "test_$t" ./$t --test-threads 1
    done
    ./tidepool bench step --presets small --warmup 5 --steps 200 --corpus tinyshakespeare.txt --json > /dev/null 2>&1
    beside_previous_16 3
    for round in 1 2; do
      for b in tidepool-prev tidepool; do
        [ -x ./$b ] && run "steady_${b}_$round" ./$b bench step --presets tiny,small --at-once 16 --warmup 5 --steps 125 --corpus tinyshakespeare.txt --json
      done
      for p in tiny small; do
        for pkg in pkg-prev pkg; do
          [ -d ./$pkg ] && run "steady_dawn_${pkg}_${p}_$round" /tmp/node dawn/bench-dawn.mjs --pkg ./$pkg --preset $p --corpus tinyshakespeare.txt --warmup 5 --steps 125 --at-once 16 --windows 10
        done
      done
    done
    for p in tiny small; do
      run "dawn_null_$p" /tmp/node dawn/bench-dawn.mjs --dawn-backend null --pkg ./pkg-prev,./pkg --preset $p --corpus tinyshakespeare.txt --warmup 3 --steps 60 --at-once 16
    done
    ;;
  perf17)
    # Round seventeen (~4 min): tiny 16 steps a call natively and through Dawn (with the
    # medians of each 10 calls: the host's phase), then perf sampling bench-dawn.mjs
    # after its set-up (-D), with Dawn's Vulkan backend and with its null one (the
    # host's work alone). perf-BACKEND-ROUND-dso.txt: self time by library;
    # -sym.txt: by library and symbol. perf's libraries stay out of node's environment.
    ./tidepool info | tee "$out/info.txt"
    for round in 1 2 3; do
      run "native_$round" ./tidepool bench step --presets tiny --at-once 16 --warmup 5 --steps 30 --corpus tinyshakespeare.txt --json
      run "dawn_$round" /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset tiny --corpus tinyshakespeare.txt --warmup 5 --steps 60 --at-once 16 --windows 10
      for backend in vulkan null; do
        flags=""
        [ "$backend" = null ] && flags="--dawn-backend null"
        echo "== perf $backend $round" >&2
        LD_LIBRARY_PATH=$PWD/perf/lib ./perf/perf record -q -D 4000 -F 1999 -g -o "perf-$backend.data" -- \
          env -u LD_LIBRARY_PATH /tmp/node --perf-basic-prof dawn/bench-dawn.mjs --pkg ./pkg --preset tiny \
          --corpus tinyshakespeare.txt --warmup 20 --steps 1500 --at-once 16 $flags \
          > "$out/perf-$backend-$round-bench.txt" 2>> "$out/stderr.log"
        LD_LIBRARY_PATH=$PWD/perf/lib ./perf/perf report -i "perf-$backend.data" --no-children -g none --sort dso \
          > "$out/perf-$backend-$round-dso.txt" 2>> "$out/stderr.log"
        LD_LIBRARY_PATH=$PWD/perf/lib ./perf/perf report -i "perf-$backend.data" --no-children -g none --sort dso,sym 2>> "$out/stderr.log" \
          | head -400 > "$out/perf-$backend-$round-sym.txt"
        grep -v '^#' "$out/perf-$backend-$round-dso.txt" | grep . | head -6 >&2
      done
    done
    ;;
  browser18)
    # Round eighteen (~5 min): the wasm build in a page of Debian's Chromium on the
    # H200, beside the same build through Dawn in Node and natively: tiny and small 16
    # steps a call, three rounds. Chromium comes in parts (gpu-pack.sh PACK_CHROMIUM=1)
    # that earlier calls leave in /tmp/chr-parts while the machine stays warm, one
    # part a call (each carries one, a call carrying at most 64 MiB): `mkdir -p
    # /tmp/chr-parts && cp .chr/part-* /tmp/chr-parts/`. First the flags that put
    # WebGPU on the GPU: each set in turn until the page's adapter is NVIDIA's
    # (chrome://gpu of each set tried in gpu-N.txt).
    chromium_on_gpu
    for round in 1 2 3; do
      run "native_$round" ./tidepool bench step --presets tiny,small --at-once 16 --warmup 5 --steps 30 --corpus tinyshakespeare.txt --json
      for p in tiny small; do
        run "chromium_${p}_$round" /tmp/node ../scripts/bench-browser.mjs record --preset $p --at-once 16 --warmup 5 --steps 30 --json
        run "dawn_${p}_$round" /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset $p --corpus tinyshakespeare.txt --warmup 5 --steps 30 --at-once 16
      done
    done
    ;;
  browser19)
    # Round nineteen (~8 min): the parameters, gradients and AdamW's moments in
    # arenas. As browser18, with the previous build (PREV_TIDEPOOL, PREV_PKG) beside
    # this one on tiny (natively, in the page and through Dawn in Node), $ROUNDS
    # rounds (3); then the shakespeare step's memory with each build (MEMORY=0: not).
    chromium_on_gpu
    for round in $(seq 1 "${ROUNDS:-3}"); do
      for b in tidepool tidepool-prev; do
        run "native_${b}_$round" ./$b bench step --presets tiny,small --at-once 16 --warmup 5 --steps 30 --corpus tinyshakespeare.txt --json
      done
      for p in tiny small; do
        for pk in pkg pkg-prev; do
          [ $p = small ] && [ $pk = pkg-prev ] && continue
          rm -rf ../pkg && cp -r $pk ../pkg
          run "chromium_${p}_${pk}_$round" /tmp/node ../scripts/bench-browser.mjs record --preset $p --at-once 16 --warmup 5 --steps 30 --json
        done
        run "dawn_${p}_$round" /tmp/node dawn/bench-dawn.mjs --pkg ./pkg,./pkg-prev --preset $p --corpus tinyshakespeare.txt --warmup 5 --steps 30 --at-once 16
      done
    done
    rm -rf ../pkg && cp -r pkg ../pkg
    for b in tidepool tidepool-prev; do
      [ "${MEMORY:-1}" = 0 ] && break
      run "memory_$b" ./$b train --preset shakespeare --steps 3 --corpus tinyshakespeare.txt --json
    done
    ;;
  browser20)
    # Round twenty (~8 min): two calls in flight, as the page's worker now trains
    # (Trainer::start_steps; steps(n) while the one before is unresolved). tiny and
    # small, 16 steps a call, one call at a time and two in flight: natively, in a
    # Chromium page and through Dawn in Node, $ROUNDS rounds (4).
    chromium_on_gpu
    for round in $(seq 1 "${ROUNDS:-4}"); do
      run "native_$round" ./tidepool bench step --presets tiny,small --at-once 16 --in-flight 1,2 --warmup 5 --steps 30 --corpus tinyshakespeare.txt --json
      for p in tiny small; do
        for k in 1 2; do
          run "chromium_${p}_in${k}_$round" /tmp/node ../scripts/bench-browser.mjs record --preset $p --at-once 16 --in-flight $k --warmup 5 --steps 30 --json
          run "dawn_${p}_in${k}_$round" /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset $p --corpus tinyshakespeare.txt --warmup 5 --steps 30 --at-once 16 --in-flight $k
        done
      done
    done
    ;;
  page20)
    # The page's own training loop (~4 min): www/worker.mjs in a Chromium page, tiny and
    # small, 16 steps a call at most, one call in flight and two (its schedule.overlap),
    # beside native one and two in flight, $ROUNDS rounds (3).
    chromium_on_gpu
    page_deps
    for round in $(seq 1 "${ROUNDS:-3}"); do
      run "native_$round" ./tidepool bench step --presets tiny,small --at-once 16 --in-flight 1,2 --warmup 5 --steps 30 --corpus tinyshakespeare.txt --json
      for p in tiny small; do
        for k in 1 2; do
          run "page_${p}_in${k}_$round" /tmp/node ../scripts/bench-browser.mjs page --preset $p --at-once 16 --in-flight $k --warmup 5 --steps 30 --json
        done
      done
    done
    ;;
  page20b)
    # Where the page's own loop loses to its calls' median on small (~4 min): as
    # page20 with two in flight, drawn and not (--hidden), and with calls of up to 40
    # ms (--batch-ms 40: small takes 16 steps a call, not 6), $ROUNDS rounds (3).
    chromium_on_gpu
    page_deps
    for round in $(seq 1 "${ROUNDS:-3}"); do
      run "native_$round" ./tidepool bench step --presets tiny,small --at-once 16 --in-flight 1,2 --warmup 5 --steps 30 --corpus tinyshakespeare.txt --json
      for p in tiny small; do
        for extra in "" "--hidden" "--batch-ms 40" "--hidden --batch-ms 40"; do
          name=$(echo "$extra" | tr -d ' -')
          run "page_${p}_in2${name:+_$name}_$round" /tmp/node ../scripts/bench-browser.mjs page --preset $p --at-once 16 --in-flight 2 --warmup 5 --steps 30 $extra --json
        done
      done
    done
    ;;
  readback19)
    # A readback's round trip on the idle GPU (~1 min), the cost a call of several
    # steps pays once at its end: in a Chromium page and in Node.js with Dawn, three
    # rounds of 200 after 20 (scripts/readback.mjs).
    chromium_on_gpu
    for round in 1 2 3; do
      run "readback_chromium_$round" /tmp/node ../scripts/bench-browser.mjs readback --warmup 20 --steps 200 --json
      run "readback_dawn_$round" /tmp/node dawn/bench-dawn.mjs --readback --warmup 20 --steps 200
    done
    ;;
  attention1)
    # The attention backward in one dispatch (~6 min): op parity, each kernel's GPU
    # time (tiny, small, shakespeare) with each build, three rounds of tiny and small
    # 16 steps a call beside the previous build (natively one process a build,
    # through Dawn both in one process), and the shakespeare step, three rounds.
    ./tidepool info | tee "$out/info.txt"
    for t in ${GPU_TESTS:-op_parity}; do
      [ -x ./$t ] && run "test_$t" ./$t --test-threads 1
    done
    for b in tidepool-prev tidepool; do
      [ -x ./$b ] && run "kernels_$b" ./$b bench kernels --presets tiny,small,shakespeare --warmup 3 --steps 3 --corpus tinyshakespeare.txt --json
    done
    for round in 1 2 3; do
      for b in tidepool-prev tidepool; do
        [ -x ./$b ] && run "${b}_$round" ./$b bench step --presets tiny,small --at-once 16 --warmup 5 --steps 30 --corpus tinyshakespeare.txt --json
      done
      for p in tiny small; do
        run "dawn_${p}_at16_$round" /tmp/node dawn/bench-dawn.mjs --pkg ./pkg-prev,./pkg --preset $p --corpus tinyshakespeare.txt --warmup 5 --steps 30 --at-once 16
      done
      for b in tidepool-prev tidepool; do
        [ -x ./$b ] && run "shakespeare_${b}_$round" ./$b bench step --presets shakespeare --at-once 1 --warmup 3 --steps 8 --corpus tinyshakespeare.txt --json
      done
      run "dawn_shakespeare_$round" /tmp/node dawn/bench-dawn.mjs --pkg ./pkg-prev,./pkg --preset shakespeare --corpus tinyshakespeare.txt --warmup 3 --steps 8
    done
    ;;
  minsplit)
    # A sweep of one setting built three ways (~5 min): this build as it is, and the
    # two carried as tidepool-prev/pkg-prev and tidepool-mid/pkg-mid (round twelve:
    # MIN_SPLIT 64, 128, 256; round fifteen: split-K of few tiles). Each kernel's GPU
    # time on tiny and small, then three rounds of tiny and small 16 a call natively
    # (one process a build) and through Dawn (the three builds' trainers in one
    # process).
    ./tidepool info | tee "$out/info.txt"
    for b in tidepool tidepool-prev tidepool-mid; do
      [ -x ./$b ] && run "kernels_$b" ./$b bench kernels --presets tiny,small --warmup 3 --steps 3 --corpus tinyshakespeare.txt --json
    done
    for round in 1 2 3; do
      for b in tidepool tidepool-prev tidepool-mid; do
        [ -x ./$b ] && run "${b}_$round" ./$b bench step --presets tiny,small --at-once 16 --warmup 5 --steps 30 --corpus tinyshakespeare.txt --json
      done
      for p in tiny small; do
        run "dawn_${p}_at16_$round" /tmp/node dawn/bench-dawn.mjs --pkg ./pkg,./pkg-prev,./pkg-mid --preset $p --corpus tinyshakespeare.txt --warmup 5 --steps 30 --at-once 16
      done
    done
    ;;
  shakespeare3)
    # The shakespeare step one a call, three rounds, this build and the previous one,
    # natively and through Dawn (~1 min).
    for round in 1 2 3; do
      for b in tidepool-prev tidepool; do
        [ -x ./$b ] && run "${b}_$round" ./$b bench step --presets shakespeare --at-once 1 --warmup 3 --steps 8 --corpus tinyshakespeare.txt --json
      done
      for pkg in pkg-prev pkg; do
        [ -d ./$pkg ] && run "dawn_${pkg}_$round" /tmp/node dawn/bench-dawn.mjs --pkg ./$pkg --preset shakespeare --corpus tinyshakespeare.txt --warmup 3 --steps 8
      done
    done
    ;;
  steady16)
    ./tidepool info | tee "$out/info.txt"
    ./tidepool bench step --presets small --warmup 5 --steps 200 --corpus tinyshakespeare.txt --json > /dev/null 2>&1
    for round in 1 2 3; do
      for b in tidepool-prev tidepool; do
        [ -x ./$b ] && run "${b}_$round" ./$b bench step --presets tiny,small --at-once 16 --warmup 5 --steps 125 --corpus tinyshakespeare.txt --json
      done
      for p in tiny small; do
        for pkg in pkg-prev pkg; do
          [ -d ./$pkg ] && run "dawn_${pkg}_${p}_$round" /tmp/node dawn/bench-dawn.mjs --pkg ./$pkg --preset $p --corpus tinyshakespeare.txt --warmup 5 --steps 125 --at-once 16 --windows 10
        done
      done
      for b in tidepool-prev tidepool; do
        # its last line only: the run's time and tokens a second
        [ -x ./$b ] && run "train_${b}_$round" bash -c "./$b train --preset tiny --steps 2000 --corpus tinyshakespeare.txt --json --eval-every 0 | tail -n 1"
      done
    done
    run shakespeare ./tidepool bench step --presets shakespeare --at-once 1,4 --warmup 3 --steps 8 --corpus tinyshakespeare.txt --json
    run dawn_shakespeare_at1 /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset shakespeare --corpus tinyshakespeare.txt --warmup 3 --steps 8
    run dawn_shakespeare_at4 /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset shakespeare --corpus tinyshakespeare.txt --warmup 2 --steps 2 --at-once 4
    ;;
  dawngpu)
    # What bounds a tiny step through Dawn where the host is fast (~4 min): each
    # kernel timed on its own natively and through Dawn, then four rounds of steps
    # one and eight at once natively, and through Dawn with its defaults and without
    # its robustness checks, one trainer a process.
    run kernels ./tidepool bench kernels --presets tiny --warmup 5 --steps 5 --corpus tinyshakespeare.txt --json
    run dawn_kernels_tiny /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset tiny --corpus tinyshakespeare.txt --warmup 5 --steps 5 --kernels --dawn-disable timestamp_quantization
    for round in 1 2 3 4; do
      run "native_$round" ./tidepool bench step --presets tiny --at-once 1,8 --warmup 5 --steps 40 --corpus tinyshakespeare.txt --json
      for t in none disable_robustness; do
        flags=""; [ $t != none ] && flags="--dawn-toggles $t"
        for n in 1 8; do
          run "dawn_tiny_${t}_at${n}_$round" /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset tiny --corpus tinyshakespeare.txt --warmup 5 --steps 40 --at-once $n $flags
        done
      done
    done
    ;;
  tiering)
    # Whether Dawn's slow processes are V8 still running Liftoff code (~2 min): six
    # rounds of tiny one step at a time through Dawn with node's defaults, with
    # optimized wasm from the start (--no-liftoff), and after 300 warm-up steps;
    # natively beside them.
    ./tidepool bench step --presets small --warmup 5 --steps 200 --corpus tinyshakespeare.txt --json > /dev/null 2>&1
    for round in 1 2 3 4 5 6; do
      run "native_$round" ./tidepool bench step --presets tiny --warmup 5 --steps 40 --corpus tinyshakespeare.txt --json
      run "dawn_default_$round" /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset tiny --corpus tinyshakespeare.txt --warmup 5 --steps 40
      run "dawn_noliftoff_$round" /tmp/node --no-liftoff dawn/bench-dawn.mjs --pkg ./pkg --preset tiny --corpus tinyshakespeare.txt --warmup 5 --steps 40
      run "dawn_warm300_$round" /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset tiny --corpus tinyshakespeare.txt --warmup 300 --steps 40
    done
    ;;
  threads)
    # Why some Dawn processes record 1.6-1.9x slower for their whole life (~2 min):
    # six rounds of 2000 tiny steps through Dawn under scripts/thread_sample.py (each
    # thread's CPU time, CPUs and context switches), with node's defaults and with V8's
    # helper threads off (--single-threaded); natively beside them.
    ./tidepool bench step --presets small --warmup 5 --steps 200 --corpus tinyshakespeare.txt --json > /dev/null 2>&1
    for round in 1 2 3 4 5 6; do
      run "native_$round" ./tidepool bench step --presets tiny --submit-every 32 --warmup 5 --steps 400 --corpus tinyshakespeare.txt --json
      run "dawn_default_$round" python3 ../scripts/thread_sample.py -- /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset tiny --corpus tinyshakespeare.txt --warmup 5 --steps 2000
      run "dawn_single_$round" python3 ../scripts/thread_sample.py -- /tmp/node --single-threaded dawn/bench-dawn.mjs --pkg ./pkg --preset tiny --corpus tinyshakespeare.txt --warmup 5 --steps 2000
    done
    ;;
  steady)
    # The page's presets at their steady speed (~4 min): five rounds of 2000 steps a
    # process, natively and through Dawn, this build and the previous one (PREV_* in
    # gpu-pack.sh) taking turns; Dawn's medians of each 100 steps show its warm-up.
    ./tidepool info | tee "$out/info.txt"
    ./tidepool bench step --presets small --warmup 5 --steps 200 --corpus tinyshakespeare.txt --json > /dev/null 2>&1
    for round in 1 2 3 4 5; do
      for b in tidepool-prev tidepool; do
        [ -x ./$b ] && run "${b}_$round" ./$b bench step --presets tiny,small --submit-every 32 --warmup 5 --steps 2000 --corpus tinyshakespeare.txt --json
      done
      for p in tiny small; do
        for pkg in pkg-prev pkg; do
          [ -d ./$pkg ] && run "dawn_${pkg}_${p}_$round" /tmp/node dawn/bench-dawn.mjs --pkg ./$pkg --preset $p --corpus tinyshakespeare.txt --warmup 5 --steps 2000 --windows 100
        done
      done
    done
    ;;
  spinner)
    # Whether Dawn's slow phases follow the host's idle CPUs (~3 min): four rounds of
    # 2000 tiny steps through Dawn alone, under thread_sample.py, and beside a shell
    # loop that keeps one other CPU busy; natively alone and beside the loop.
    ./tidepool bench step --presets small --warmup 5 --steps 200 --corpus tinyshakespeare.txt --json > /dev/null 2>&1
    dawn_tiny="/tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset tiny --corpus tinyshakespeare.txt --warmup 5 --steps 2000 --windows 200"
    native_tiny="./tidepool bench step --presets tiny --submit-every 32 --warmup 5 --steps 2000 --corpus tinyshakespeare.txt --json"
    for round in 1 2 3 4; do
      run "native_$round" $native_tiny
      run "dawn_alone_$round" $dawn_tiny
      run "dawn_sampled_$round" python3 ../scripts/thread_sample.py -- $dawn_tiny
      (while :; do :; done) & spin=$!
      run "native_spinner_$round" $native_tiny
      run "dawn_spinner_$round" $dawn_tiny
      kill $spin
    done
    ;;
  irq)
    # Whether Dawn's slow phases are its thread sharing a CPU with the GPU's
    # interrupts (~2 min): the interrupt counts per CPU, then 2000 tiny steps through
    # Dawn pinned (taskset) to the CPU that takes most of the GPU's interrupts and to
    # one that takes none, three rounds, natively the same.
    grep -iE "nvidia|CPU0" /proc/interrupts | tee "$out/interrupts-before.txt"
    irq_cpu=$(python3 - <<'PY'
rows = [l.split() for l in open('/proc/interrupts')]
ncpu = len(rows[0])
counts = [0] * ncpu
for r in rows[1:]:
    if any('nvidia' in x.lower() for x in r):
        for i in range(ncpu):
            if i + 1 < len(r) and r[i + 1].isdigit():
                counts[i] += int(r[i + 1])
print(max(range(ncpu), key=lambda i: counts[i]))
PY
)
    quiet_cpu=$(( (irq_cpu + 8) % 16 ))
    echo "irq cpu $irq_cpu, quiet cpu $quiet_cpu" | tee -a "$out/interrupts-before.txt"
    ./tidepool bench step --presets small --warmup 5 --steps 200 --corpus tinyshakespeare.txt --json > /dev/null 2>&1
    for round in 1 2 3; do
      for c in $irq_cpu $quiet_cpu; do
        run "native_cpu${c}_$round" taskset -c $c ./tidepool bench step --presets tiny --submit-every 32 --warmup 5 --steps 2000 --corpus tinyshakespeare.txt --json
        run "dawn_cpu${c}_$round" taskset -c $c /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset tiny --corpus tinyshakespeare.txt --warmup 5 --steps 2000 --windows 200
      done
    done
    grep -iE "nvidia|CPU0" /proc/interrupts > "$out/interrupts-after.txt"
    ;;
  pipe)
    # Whether it is the sampler's /proc reads or its pipe that keeps Dawn fast (~1
    # min): 2000 tiny steps through Dawn writing to a file, writing into a pipe, and
    # under thread_sample.py, four rounds.
    ./tidepool bench step --presets small --warmup 5 --steps 200 --corpus tinyshakespeare.txt --json > /dev/null 2>&1
    dawn_tiny="/tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset tiny --corpus tinyshakespeare.txt --warmup 5 --steps 2000 --windows 200"
    for round in 1 2 3 4; do
      run "dawn_file_$round" $dawn_tiny
      run "dawn_pipe_$round" bash -c "$dawn_tiny | cat"
      run "dawn_sampled_$round" python3 ../scripts/thread_sample.py -- $dawn_tiny
    done
    ;;
  gap)
    # Where Dawn's GPU time goes against native's on tiny and small (~3 min): each
    # kernel timed on its own (bench kernels, bench-dawn.mjs --kernels), then steps
    # eight at once (bound by the GPU) with Dawn's defaults and with each of its
    # checks switched off in turn.
    run kernels ./tidepool bench kernels --presets tiny,small --warmup 5 --steps 5 --corpus tinyshakespeare.txt --json
    for p in tiny small; do
      run "dawn_kernels_$p" /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset $p --corpus tinyshakespeare.txt --warmup 5 --steps 5 --kernels --dawn-disable timestamp_quantization
    done
    for round in 1 2; do
      run "native_$round" ./tidepool bench step --presets tiny,small --at-once 1,8 --submit-every 32 --warmup 5 --steps 30 --corpus tinyshakespeare.txt --json
      for p in tiny small; do
        for t in none disable_robustness disable_workgroup_init skip_validation; do
          flags=""; [ $t != none ] && flags="--dawn-toggles $t"
          run "dawn_${p}_${t}_$round" /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset $p --corpus tinyshakespeare.txt --warmup 5 --steps 20 --at-once 8 $flags
        done
      done
    done
    ;;
  previous)
    # This build against an earlier one (PREV_TIDEPOOL and PREV_PKG given to
    # gpu-pack.sh), natively and through Dawn, taking turns, three rounds (~2 min).
    against_previous 3
    ;;
  final)
    # This round's closing figures (~4 min): PyTorch, the shakespeare step in f32 and
    # f16 and its GPU time per kernel, in one call; then the `ratio` runs.
    run torch python3 torch_gpt.py fp32_manual fp32_sdpa tf32_sdpa bf16_sdpa
    run step ./tidepool bench step --presets shakespeare --precision f32,f16 --submit-every 32 --warmup 3 --steps 20 --corpus tinyshakespeare.txt --json
    run kernels ./tidepool bench kernels --presets shakespeare --warmup 3 --steps 5 --corpus tinyshakespeare.txt --json
    ;&
  ratio)
    # The browser build against native on the page's presets and shakespeare (~3
    # min): three rounds, native then Dawn each round, default settings; then V8's
    # profile of Dawn on small.
    # AT_ONCE (default 8): steps a call records before reading their losses, measured
    # beside one step a call.
    n=${AT_ONCE:-8}
    for round in 1 2 3; do
      run "native_$round" ./tidepool bench step --presets tiny,small,shakespeare --at-once 1,$n --submit-every 32 --warmup 3 --steps 30 --corpus tinyshakespeare.txt --json
      for p in tiny small shakespeare; do
        run "dawn_${p}_$round" /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset $p --corpus tinyshakespeare.txt --warmup 5 --steps 30
        run "dawn_${p}_at_once_$round" /tmp/node dawn/bench-dawn.mjs --pkg ./pkg --preset $p --corpus tinyshakespeare.txt --warmup 3 --steps 30 --at-once $n
      done
    done
    mkdir -p "$out/prof"
    run dawn_profile /tmp/node --cpu-prof --cpu-prof-dir="$out/prof" dawn/bench-dawn.mjs --pkg ./pkg --preset small --corpus tinyshakespeare.txt --warmup 5 --steps 60
    ;;
  train)
    run train timeout "${TRAIN_SECONDS:-500}" ./tidepool train --preset shakespeare --corpus tinyshakespeare.txt --eval-every 250 --json ${TRAIN_FLAGS:-}
    ;;
  curves)
    # Concurrently, so both fit one call: each line is flushed as it comes, so a run
    # cut short by the cap still leaves its curve so far.
    secs=${CURVE_SECONDS:-540}
    echo "== curves: tidepool and torch_twin.py, at most $secs s" >&2
    t0=$SECONDS
    timeout "$secs" ./tidepool train --preset shakespeare --corpus tinyshakespeare.txt \
      --eval-every 250 --eval-batches 200 --json ${TRAIN_FLAGS:-} \
      > "$out/curve-tidepool.jsonl" 2>> "$out/stderr.log" &
    tidepool_pid=$!
    timeout "$secs" python3 torch_twin.py tinyshakespeare.txt --eval-every 250 --eval-batches 200 \
      --max-seconds $((secs - 30)) ${TWIN_FLAGS:-} \
      > "$out/curve-torch.jsonl" 2>> "$out/stderr.log" &
    torch_pid=$!
    wait $tidepool_pid; echo "   tidepool exit $? after $((SECONDS - t0)) s" >&2
    wait $torch_pid; echo "   torch_twin exit $? after $((SECONDS - t0)) s" >&2
    python3 torch_curves.py "$out/curve-tidepool.jsonl" "$out/curve-torch.jsonl" | tee "$out/curves.md" >&2
    ;;
esac

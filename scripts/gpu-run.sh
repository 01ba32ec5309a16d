#!/usr/bin/env bash
# tidepool's benchmark suites, run on the GPU machine from what scripts/gpu-pack.sh
# packed into .gpu/ (or here, on this machine's CPU adapters, with --local):
#
#   parity             every kernel against its CPU reference, the GPU tests, on this GPU
#   step-vs-torch      the shakespeare step (f32, f16), tiny and small, beside PyTorch's modes;
#                      with STEP_QUICK=1 only shakespeare, in a couple of minutes: each
#                      build's default step one a call in turns, and the step's peaks
#                      beside PyTorch's
#   gemm-vs-cublas     every GEMM shape of the shakespeare step beside cuBLAS on that shape
#   gemm-sweep         every GEMM variant on every shape of the shakespeare
#                      step beside cuBLAS fp32 / fp16; attention beside PyTorch's fused
#                      attention; each GEMM core's own loop with parts taken away
#                      (benches/gemm_ceiling.rs); the step f32 and f16 with today's
#                      choices beside PyTorch fp32; sweep.md (scripts/gemm_sweep.py): the
#                      tables and each shape class's winner as a line of
#                      src/kernels/matmul/choice.rs
#   attention-vs-torch attention alone, in a minute or two: PyTorch's fused attention
#                      beside each build's GPU attention kernel sets on the shakespeare
#                      step's heads, and the shakespeare step one step a call (f32, f16),
#                      the builds taking turns REPEATS times (with --against: a change to
#                      attention against the build before it)
#   browser-vs-native  the wasm build through Dawn in Node against native: tiny and small
#                      in calls of 16 steps, one in flight and two; shakespeare one a call
#                      (a Chromium page too, when earlier calls left Chromium in /tmp/chr-parts)
#   memory             peak bytes reserved / in use / requested per size policy beside
#                      PyTorch's max_memory_reserved / allocated; the steady steps'
#                      peaks and ms under pow2/8 and planned, natively and through
#                      Dawn; pow2/8 bound read_write as planned binds, and GPU ms
#                      per kernel under pow2/8, pow2/8 read_write and planned (which
#                      kernels pay, and for which cause), natively and through Dawn;
#                      the trace's replay
#   pool               taking a buffer from the pool against creating one, natively and
#                      through Dawn
#   curves             the held-out loss every 250 steps beside the PyTorch twin
#   f16-curves         the held-out loss every 250 steps to step 2000 (CURVE_STOP) of
#                      three runs at once from one seed: f32, --precision f16 with
#                      attention in f32 (--f16-attention false), and f16 as it runs
#                      by default (attention on tensor cores where the GPU has them)
#   host-profile       where a step's host time goes: native recording, every WebGPU call
#                      through Dawn timed, Dawn's null backend (runs nothing), a readback
#   kernel-stats       what the driver compiled each kernel to (registers a thread, its
#                      other statistics) and the occupancy that allows, in a few seconds
#                      (benches/kernel_stats.rs; the driver must offer
#                      VK_KHR_pipeline_executable_properties: NVIDIA's does, lavapipe not)
#   headline           every figure of the README's headline table, in one call
#   soak               the wasm build through Dawn in Node, `small` for 20,000 steps in
#                      calls of 16, two in flight, evaluating and sampling: every 500
#                      steps the bytes held, buffers and bind groups created, wasm
#                      memory and JS heap (flat after warm-up; SOAK_STEPS changes the
#                      length); the same loop in a Chromium page where earlier calls
#                      left Chromium's parts (gpu-pack.sh --chromium); natively, the
#                      same preset's run must create nothing after step 2 but a path's
#                      first run
#
#   scripts/gpu-run.sh [--local] [--against DIR] SUITE...
#
# On the GPU machine (carry .gpu; the prelude unpacks the Vulkan loader and Node.js):
#   bash scripts/gpu-run.sh headline
# --against DIR: each suite also runs an earlier build (DIR holds its `tidepool`, its
# wasm `pkg/`, and where it has them `matmul_bench`, `bench-dawn.mjs`; gpu-pack.sh
# --against packs one into .gpu/against), side by side with this one, the two taking
# turns. --local: lavapipe natively and SwiftShader through Dawn, the smallest sizes,
# no PyTorch: checks that every suite runs from end to end before a GPU call.
#
# Writes into $OUT (default target/bench/SUITES): results.jsonl (every JSON line each
# command printed, tagged with its suite, run and build, and a line a command with its
# exit status and seconds), table.md (scripts/bench_tables.py), stderr.log and
# info.txt: four files, within what a GPU call brings back. Knobs: REPEATS (turns of
# the browser and pool suites, default 3), RUN_SECONDS (cap on one command, 300),
# BUDGET_SECONDS (headline: stop starting parts past this, 480), HEADLINE_VARIANTS
# (the GEMM variants headline times: tiled,splitk,narrow), SWEEP_VARIANTS and
# SWEEP_BUDGET_MS and SWEEP_SECONDS (gemm-sweep's variants, the ms a batch of launches
# aims at, and the cap on its matmul_bench run: 360), CURVE_STOP and
# CURVE_SECONDS (where a learning curve stops: its schedule's end or, in headline,
# step 2000; and after 540 s at most), PARITY_FILTER (parity: run only the tests
# whose names hold it, in every test binary: the GEMM tests are `matmul::*` in ops
# and `f16_*` / `emulated::*` in matmul_f16, so `matmul` alone skips the tensor-core
# cores), KERNEL_STATS_ARGS (kernel-stats: the kernel names, or parts of them, and
# candidate WGSL files in tests/ops/wgsl.rs's dump form, to measure instead of every
# kernel).
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

local_run=0
against=""
suites=()
while [ $# -gt 0 ]; do
  case "$1" in
    --local) local_run=1 ;;
    --against) against=${2:?--against needs a folder}; shift ;;
    --against=*) against=${1#--against=} ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu-run: unknown option $1 (--local, --against DIR)" >&2; exit 2 ;;
    *) suites+=("$1") ;;
  esac
  shift
done
known="parity step-vs-torch gemm-vs-cublas gemm-sweep attention-vs-torch kernel-stats browser-vs-native memory pool curves f16-curves host-profile headline soak"
[ ${#suites[@]} -gt 0 ] || { echo "gpu-run: name a suite: $known" >&2; exit 2; }
for s in "${suites[@]}"; do
  case " $known " in *" $s "*) ;; *) echo "gpu-run: no suite $s (suites: $known)" >&2; exit 2 ;; esac
done

G=${GPU_DIR:-.gpu}
[ -x "$G/tidepool" ] || [ -f "$G/tidepool.bin.xz" ] || {
  echo "gpu-run: $G/ holds no tidepool build: run scripts/gpu-pack.sh first" >&2
  exit 2
}
# The suites that run the wasm build (through Dawn or a page) need the browser's part,
# which `gpu-pack.sh --no-browser` leaves out.
for s in "${suites[@]}"; do
  case " browser-vs-native memory soak pool host-profile headline " in
    *" $s "*) [ -d "$G/pkg" ] || { echo "gpu-run: $s runs the wasm build, which $G/ lacks: pack without --no-browser" >&2; exit 2; } ;;
  esac
done
out=${OUT:-target/bench/$(IFS=+; echo "${suites[*]}")}
mkdir -p "$out"
out=$(cd "$out" && pwd)
results=$out/results.jsonl
log=$out/stderr.log
: > "$results"
: > "$log"

if [ "$local_run" = 1 ]; then
  export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp/tidepool-xdg}
  mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"
  node_bin=$(command -v node)
  # Dawn refuses lavapipe; Chromium's SwiftShader is a Vulkan driver it takes.
  dawn_env=(env VK_ICD_FILENAMES=/usr/lib/chromium/vk_swiftshader_icd.json)
  machine="$(nproc)-core $(uname -m) here, lavapipe and SwiftShader"
else
  # The Vulkan loader pointed at NVIDIA's driver, and Node.js in /tmp/node.
  source "$G/prelude.sh" >> "$log" 2>&1
  node_bin=/tmp/node
  dawn_env=(env)
  machine=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
fi

# Binaries travel xz-packed (a GPU call carries at most 64 MiB; the machine has no xz).
# The packed files stay, so that the folder can travel again as it was packed.
unpack() {
  local f
  for f in $(find "$@" -name '*.bin.xz' 2>/dev/null); do
    [ "${f%.bin.xz}" -nt "$f" ] && continue
    python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" "$f" "${f%.bin.xz}"
    chmod +x "${f%.bin.xz}"
  done
}
unpack "$G" ${against:+"$against"}

# The builds: this one (`this`) and, with --against, the earlier one (`against`).
builds=(this)
tidepool_this=$G/tidepool
pkg_this=$G/pkg
matmul_this=$G/matmul_bench
dawn_this=$G/dawn/bench-dawn.mjs
if [ -n "$against" ]; then
  [ -x "$against/tidepool" ] || { echo "gpu-run: $against/tidepool is missing" >&2; exit 2; }
  builds+=(against)
  tidepool_against=$against/tidepool
  pkg_against=$against/pkg
  matmul_against=$against/matmul_bench
  # Its own Dawn driver when it brought one (its wasm API may differ from this one's),
  # placed where Node finds the `webgpu` package.
  dawn_against=$dawn_this
  if [ -f "$against/bench-dawn.mjs" ]; then
    mkdir -p "$G/dawn/against"
    cp "$against"/*.mjs "$G/dawn/against/"
    dawn_against=$G/dawn/against/bench-dawn.mjs
  fi
fi
corpus=$repo/data/tinyshakespeare.txt

# Sizes: the GPU's, or the smallest that still run every path on a CPU adapter.
# page: the page's presets (`small` takes minutes a run on a CPU adapter); big: the
# preset that stands for a real model. curve_stop: the step whose evaluation ends a
# learning curve (empty: the schedule's end).
if [ "$local_run" = 1 ]; then
  page=(tiny) big=tiny warmup=1 steps=2 calls=3 at_once=4 repeats=1 kernel_steps=1
  quick=(--quick) pool_batches=(--batches 20)
  # one variant of each core that runs here (every one takes minutes on lavapipe)
  sweep_variants=tiled,narrow
  train_big=(--preset shakespeare --batch 2 --context 32 --layers 2 --width 48 --heads 6)
  curve=(--preset tiny --steps 40 --eval-every 20 --eval-batches 2) curve_stop=20
  soak=(--preset tiny --batch 2 --context 8 --steps "${SOAK_STEPS:-300}" --every 100 --eval-every 50 --sample-every 100)
  soak_native=(--preset tiny --batch 2 --context 8 --steps 100 --eval-every 25 --eval-batches 4)
else
  # kernel_steps: 5 once read the f16 step's kernels 30% above the step they make up; 10 agreed
  page=(tiny small) big=shakespeare warmup=3 steps=20 calls=30 at_once=16 repeats=${REPEATS:-3} kernel_steps=10
  quick=() pool_batches=()
  sweep_variants=tiled,splitk,narrow,coop2,coop2-splitk,coop3,coop3-splitk,coop,coop-splitk
  train_big=(--preset shakespeare)
  curve=(--preset shakespeare --eval-every 250 --eval-batches 200) curve_stop=${CURVE_STOP:-}
  # soak-dawn.mjs's own defaults, spelled out so that the Chromium page soak runs the same
  soak=(--preset small --steps "${SOAK_STEPS:-20000}" --every 500 --eval-every 250 --eval-batches 20
    --sample-every 1000 --sample-length 200)
  soak_native=(--preset small --steps 2000 --eval-every 250 --eval-batches 20)
fi
# the page's presets and the big one, each once
all_presets=("${page[@]}")
[ "$big" = "${page[0]}" ] || all_presets+=("$big")
comma() { local IFS=,; echo "$*"; }

# a command as a JSON string's contents
esc() {
  local s=$*
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\n'/\\n}
  printf '%s' "${s//$'\t'/\\t}"
}

# run SUITE NAME BUILD COMMAND...: its JSON lines (objects, and arrays as `data`) and
# test binaries' summaries, tagged, into results.jsonl; the rest of its output into
# stderr.log; then a line with the command, its exit status and time.
run() {
  local suite=$1 name=$2 build=$3
  shift 3
  echo "== $suite/$name ($build): $*" | tee -a "$log" >&2
  local t0=$SECONDS rc
  timeout "${RUN_SECONDS:-300}" "$@" 2>> "$log" | awk -v pre="{\"suite\":\"$suite\",\"run\":\"$name\",\"build\":\"$build\"," -v logfile="$log" '
    /^\{\}$/ { next }
    /^\{/ { print pre substr($0, 2); fflush(); next }
    /^\[/ { print pre "\"data\":" $0 "}"; fflush(); next }
    /^test result:/ { gsub(/"/, ""); print pre "\"test_result\":\"" $0 "\"}"; fflush() }
    { print >> logfile; fflush(logfile) }' >> "$results"
  rc=${PIPESTATUS[0]}
  printf '{"suite":"%s","run":"%s","build":"%s","command":"%s","exit":%d,"seconds":%d}\n' \
    "$suite" "$name" "$build" "$(esc "$*")" "$rc" "$((SECONDS - t0))" >> "$results"
  echo "   exit $rc after $((SECONDS - t0)) s" >&2
  return 0
}
# A run that needs PyTorch: recorded as skipped where there is none.
have_torch=""
torch_run() {
  if [ -z "$have_torch" ]; then
    python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null && have_torch=yes || have_torch=no
  fi
  if [ "$have_torch" = yes ]; then
    run "$@"
  else
    printf '{"suite":"%s","run":"%s","build":"%s","skipped":"no PyTorch with CUDA here"}\n' "$1" "$2" "$3" >> "$results"
    echo "== $1/$2: skipped (no PyTorch with CUDA here)" >&2
  fi
}
var() { local v="${1}_${2}"; echo "${!v}"; }
# bin BUILD: that build's tidepool binary
bin() { var tidepool "$1"; }
# dawn_for BUILD: the command that runs that build's wasm through Dawn in Node.js, in
# the array `dawn` (`run` takes programs, not shell functions)
dawn_for() {
  dawn=("${dawn_env[@]}" "$node_bin" "$(var dawn "$1")" --pkg "$(var pkg "$1")" --corpus "$corpus")
}

suite_parity() {
  # Each test binary gpu-pack.sh packed, one test at a time (they share the one GPU).
  local t found=0
  for t in "$G"/tests/*; do
    [ -x "$t" ] || continue
    found=1
    run parity "$(basename "$t")" this "$t" --test-threads 1 ${PARITY_FILTER:+"$PARITY_FILTER"}
  done
  [ "$found" = 1 ] || echo "parity: gpu-pack.sh packed no test binaries into $G/tests" >&2
}

suite_step_vs_torch() {
  local b p round
  if [ "${STEP_QUICK:-0}" = 1 ]; then
    # The big preset alone, in a couple of minutes: PyTorch's steps and peaks, each
    # build's default step one a call (the builds taking turns REPEATS times), and each
    # build's peaks over a 3-step run.
    torch_run step-vs-torch "torch_$big" torch python3 scripts/torch_step.py --preset "$big" --steps 20 --warmup 5 \
      --modes "${TORCH_MODES:-fp32,fp32_fused,tf32}"
    for ((round = 1; round <= repeats; round++)); do
      for b in "${builds[@]}"; do
        run step-vs-torch "step_${big}_$round" "$b" "$(bin "$b")" bench step --presets "$big" --precision f32,f16 \
          --at-once 1 --warmup "$warmup" --steps "$steps" --corpus "$corpus" --json
      done
      # The f16 step with attention in f32 (tensor cores are the default), and reading
      # the weights' f16 copy (off by default: it measured slower), in the same turns.
      run step-vs-torch "step_${big}_f32_attention_$round" this "$tidepool_this" bench step --presets "$big" \
        --precision f16 --f16-attention false --at-once 1 --warmup "$warmup" --steps "$steps" --corpus "$corpus" --json
      run step-vs-torch "step_${big}_f16_weights_$round" this "$tidepool_this" bench step --presets "$big" \
        --precision f16 --f16-weights --at-once 1 --warmup "$warmup" --steps "$steps" --corpus "$corpus" --json
    done
    for b in "${builds[@]}"; do
      run step-vs-torch "peaks_$big" "$b" bash -c "\"\$0\" train ${train_big[*]} --steps 3 --corpus \"\$1\" --json | tail -n 1" \
        "$(bin "$b")" "$corpus"
    done
  else
    for p in "${all_presets[@]}"; do
      torch_run step-vs-torch "torch_$p" torch python3 scripts/torch_step.py --preset "$p" --steps 20 --warmup 5 \
        --modes "${TORCH_MODES:-fp32,fp32_fused,tf32,bf16}"
    done
    for b in "${builds[@]}"; do
      # With the pool, without it, and each kernel tuning forced, taking turns.
      run step-vs-torch "step_$big" "$b" "$(bin "$b")" bench step --presets "$big" --precision f32,f16 \
        --warmup "$warmup" --steps "$steps" --corpus "$corpus" --json
      # The page's presets as the page trains them: calls of several steps, two in flight.
      run step-vs-torch page_presets "$b" "$(bin "$b")" bench step --presets "$(comma "${page[@]}")" --at-once "$at_once" \
        --in-flight 1,2 --warmup "$warmup" --steps "$calls" --corpus "$corpus" --json
    done
  fi
  # Where the GPU time goes (needs timestamp queries; a CPU adapter may lack them).
  run step-vs-torch kernels this "$tidepool_this" bench kernels --presets "$big" --precision f32,f16 \
    --warmup "$warmup" --steps "$kernel_steps" --corpus "$corpus" --json
  run step-vs-torch kernels_f32_attention this "$tidepool_this" bench kernels --presets "$big" --precision f16 \
    --f16-attention false --warmup "$warmup" --steps "$kernel_steps" --corpus "$corpus" --json
}

suite_gemm_vs_cublas() {
  local b m
  torch_run gemm-vs-cublas cublas torch python3 scripts/torch_matmul.py --dtypes "${CUBLAS_DTYPES:-fp32,tf32,fp16}"
  for b in "${builds[@]}"; do
    m=$(var matmul "$b")
    if [ -x "$m" ]; then
      # Every variant of every GPT shape; `auto` marks the launchers' choice.
      run gemm-vs-cublas matmul "$b" "$m" --json --no-squares --only matmul "${quick[@]}"
    else
      echo "gemm-vs-cublas: no matmul_bench in the $b build" >&2
    fi
  done
}

# Every variant of every GEMM shape in one matmul_bench run (short batches, so that
# about 150 cases fit in 2-3 minutes), cuBLAS and PyTorch's attention beside them, and
# the step as the launchers choose today.
suite_gemm_sweep() {
  torch_run gemm-sweep cublas torch python3 scripts/torch_matmul.py --dtypes fp32,fp16
  torch_run gemm-sweep torch_attention torch python3 scripts/torch_attention.py
  # Attention with each set of kernels (paired, tiled) on its own, ahead of the long
  # GEMM sweep that a time limit may cut short.
  run gemm-sweep attention this "$matmul_this" --json --no-squares --only attention "${quick[@]}"
  # What each GEMM core's own loop gives here, one cost at a time
  # (benches/gemm_ceiling.rs): the ceilings the cores work under.
  [ -x "$G/gemm_ceiling" ] && run gemm-sweep gemm_ceiling this "$G/gemm_ceiling" --json
  # about 170 cases: more than RUN_SECONDS' default allows a command
  RUN_SECONDS=${SWEEP_SECONDS:-360} run gemm-sweep matmul this "$matmul_this" --json --no-squares "${quick[@]}" \
    --budget-ms "${SWEEP_BUDGET_MS:-150}" \
    --variant "${SWEEP_VARIANTS:-$sweep_variants}"
  run gemm-sweep "step_$big" this "$tidepool_this" bench step --presets "$big" --precision f32,f16 \
    --warmup "$warmup" --steps "$steps" --corpus "$corpus" --json
  torch_run gemm-sweep "torch_$big" torch python3 scripts/torch_step.py --preset "$big" --steps 20 --warmup 5 \
    --modes fp32,fp32_fused
  python3 scripts/gemm_sweep.py "$results" > "$out/sweep.md" 2>> "$log" \
    || echo "gemm_sweep.py could not make the sweep's tables (stderr.log)" >&2
}

suite_kernel_stats() {
  [ -x "$G/kernel_stats" ] || { echo "kernel-stats: gpu-pack.sh packed no kernel_stats into $G" >&2; return 0; }
  # KERNEL_STATS_ARGS: kernel names (a part of one) and candidate .wgsl files
  # (word-split), in place of the whole catalog.
  run kernel-stats kernel_stats this "$G/kernel_stats" --json ${KERNEL_STATS_ARGS:-}
}

suite_attention_vs_torch() {
  local b r m
  torch_run attention-vs-torch torch_attention torch python3 scripts/torch_attention.py
  for r in $(seq "$repeats"); do
    for b in "${builds[@]}"; do
      m=$(var matmul "$b")
      if [ -x "$m" ]; then
        run attention-vs-torch "attention_$r" "$b" "$m" --json --no-squares --only attention "${quick[@]}"
      else
        echo "attention-vs-torch: no matmul_bench in the $b build" >&2
      fi
      run attention-vs-torch "step_$r" "$b" "$(bin "$b")" bench step --presets "$big" --precision f32,f16 \
        --at-once 1 --warmup "$warmup" --steps "$steps" --corpus "$corpus" --json
    done
  done
}

# Chromium on the GPU from the parts earlier calls left in /tmp/chr-parts (gpu-pack.sh
# --chromium packs them; each call carries one), with the first set of flags that puts
# a page's WebGPU on the GPU. Returns 1 where there is no Chromium.
chromium_on_gpu() {
  [ "$local_run" = 1 ] && return 0
  [ -d /tmp/chr-parts ] || return 1
  if [ ! -x /tmp/chr/chrpkg/chromium/chromium ]; then
    mkdir -p /tmp/chr
    cat /tmp/chr-parts/part-* | python3 -c "import lzma,sys,tarfile; tarfile.open(fileobj=lzma.open(sys.stdin.buffer), mode='r|').extractall('/tmp/chr')" || return 1
  fi
  printf '#!/bin/sh\nLD_LIBRARY_PATH=/tmp/chr/chrpkg/lib exec /tmp/chr/chrpkg/chromium/chromium "$@"\n' > /tmp/chr/chrome.sh
  chmod +x /tmp/chr/chrome.sh
  export CHROMIUM=/tmp/chr/chrome.sh VK_ICD_FILENAMES=$VK_DRIVER_FILES
  [ -d node_modules/playwright-core ] || python3 -c "import tarfile; tarfile.open('$G/playwright-core.tar.xz').extractall('.')"
  rm -rf pkg && cp -r "$pkg_this" pkg
  # the whole page (bench-browser.mjs page) also needs its chart library and a font
  mkdir -p node_modules/uplot && rm -rf node_modules/uplot/dist && cp -r "$G/uplot-dist" node_modules/uplot/dist
  printf '<?xml version="1.0"?>\n<fontconfig><dir>%s</dir><cachedir>/tmp/fc-cache</cachedir></fontconfig>\n' \
    "$repo/$G/fonts" > /tmp/fonts.conf
  export FONTCONFIG_FILE=/tmp/fonts.conf
  local v="--use-angle=vulkan --enable-features=Vulkan --disable-vulkan-surface" flags adapter
  for flags in "$v" "$v --ignore-gpu-blocklist --enable-webgpu-developer-features" \
    "$v --ignore-gpu-blocklist --disable-gpu-sandbox --use-vulkan=native"; do
    adapter=$(CHROMIUM_ARGS="$flags" timeout 120 "$node_bin" scripts/probe-webgpu.mjs 2>> "$log")
    echo "{\"suite\":\"browser-vs-native\",\"run\":\"chromium_probe\",\"flags\":\"$flags\",\"adapter\":${adapter:-null}}" >> "$results"
    case "$adapter" in *'"vendor":"nvidia"'*) export CHROMIUM_ARGS="$flags"; return 0 ;; esac
  done
  return 1
}

suite_browser_vs_native() {
  local r b p k chromium=0
  chromium_on_gpu && chromium=1
  for r in $(seq 1 "$repeats"); do
    for b in "${builds[@]}"; do
      # The page's presets as the page trains them: calls of several steps.
      run browser-vs-native "native_$r" "$b" "$(bin "$b")" bench step --presets "$(comma "${page[@]}")" \
        --at-once "$at_once" --in-flight 1,2 --warmup "$warmup" --steps "$calls" --corpus "$corpus" --json
      dawn_for "$b"
      for p in "${page[@]}"; do
        for k in 1 2; do
          run browser-vs-native "dawn_${p}_in${k}_$r" "$b" "${dawn[@]}" --preset "$p" --at-once "$at_once" \
            --in-flight "$k" --warmup "$warmup" --steps "$calls"
        done
      done
      # A real model's step, one a call (the page's calls hold what takes 16 ms).
      if [ "$big" != "${page[0]}" ]; then
        run browser-vs-native "native_${big}_$r" "$b" "$(bin "$b")" bench step --presets "$big" --at-once 1 \
          --warmup "$warmup" --steps 10 --corpus "$corpus" --json
        run browser-vs-native "dawn_${big}_in1_$r" "$b" "${dawn[@]}" --preset "$big" --warmup "$warmup" --steps 10
      fi
    done
    if [ "$chromium" = 1 ]; then
      for p in "${page[@]}"; do
        # the wasm API in a page, and the page's own training loop (its worker)
        run browser-vs-native "page_${p}_$r" this "$node_bin" scripts/bench-browser.mjs record --preset "$p" \
          --at-once "$at_once" --in-flight 2 --warmup "$warmup" --steps "$calls" --json
        run browser-vs-native "loop_${p}_$r" this "$node_bin" scripts/bench-browser.mjs page --preset "$p" \
          --at-once "$at_once" --in-flight 2 --warmup "$warmup" --steps "$calls" --json
      done
    fi
  done
}

suite_memory() {
  local b policy
  # PyTorch's peaks over its timed steps, each mode in a model of its own.
  torch_run memory torch torch python3 scripts/torch_step.py --preset shakespeare --steps 5 --warmup 3 \
    --modes fp32,fp32_fused,bf16
  for b in "${builds[@]}"; do
    for policy in ${POLICIES:-pow2/8 pow2 exact planned}; do
      # the final line holds the peaks: reserved, in use, requested
      run memory "train_${policy//\//_}" "$b" bash -c "\"\$0\" train ${train_big[*]} --steps 3 --policy $policy --corpus \"\$1\" --json | tail -n 1" \
        "$(bin "$b")" "$corpus"
    done
    # planned with the layernorm outputs recomputed in the backward
    run memory train_planned_recompute "$b" bash -c "\"\$0\" train ${train_big[*]} --steps 3 --policy planned --recompute --corpus \"\$1\" --json | tail -n 1" \
      "$(bin "$b")" "$corpus"
  done
  # The steps after warm-up (their own peaks): pow2/8 beside planned, each without and
  # with recompute, natively and through Dawn (which runs every policy).
  for b in "${builds[@]}"; do
    run memory steady "$b" "$(bin "$b")" bench policies --presets "$big" --policies pow2/8,planned \
      --recompute --warmup "$warmup" --steps "$steps" --corpus "$corpus" --json
    dawn_for "$b"
    run memory dawn_steady "$b" "${dawn[@]}" --preset "$big" --warmup "$warmup" --steps "$steps" --policies \
      --recompute
  done
  # The binding rules side by side: pow2/8 and planned with every storage binding
  # read_write (a repeated operand on a stand-in; planned then plans one set of
  # arenas with no regard to bindings), beside the default rows above (as declared;
  # planned keeps the GEMMs' and attention's operands out of the arenas they write).
  # Then every dispatch timed, kernel by kernel, under each policy and rule, so that
  # the table says which kernels pay and for which cause.
  local bindings
  for b in "${builds[@]}"; do
    run memory steady_read_write "$b" "$(bin "$b")" bench policies --presets "$big" --policies pow2/8,planned \
      --bindings read-write --warmup "$warmup" --steps "$steps" --corpus "$corpus" --json
    for policy in pow2/8 planned; do
      for bindings in declared read-write; do
        run memory "kernels_${policy//\//_}_${bindings//-/_}" "$b" "$(bin "$b")" bench kernels \
          --presets "$big" --policy "$policy" --bindings "$bindings" --warmup "$warmup" \
          --steps "$kernel_steps" --corpus "$corpus" --json
      done
    done
    # The same through Dawn, its timestamps unrounded.
    dawn_for "$b"
    run memory dawn_steady_read_write "$b" "${dawn[@]}" --preset "$big" --warmup "$warmup" \
      --steps "$steps" --policies --bindings read-write
    for policy in pow2/8 planned; do
      for bindings in declared read-write; do
        run memory "dawn_kernels_${policy//\//_}_${bindings//-/_}" "$b" "${dawn[@]}" --preset "$big" \
          --warmup "$warmup" --steps "$kernel_steps" --kernels --policy "$policy" --bindings "$bindings" \
          --dawn-disable timestamp_quantization
      done
    done
  done
  # Every allocation of a steady step, replayed through each size policy and a plan.
  run memory trace this "$tidepool_this" train "${train_big[@]}" --steps 3 --corpus "$corpus" \
    --trace "$out/trace.json" --json --eval-every 0
  run memory replay this "$tidepool_this" trace replay "$out/trace.json" --json
  rm -f "$out/trace.json"
  # The same under planned: the replay's "planned (live)" row is what the run reserved.
  run memory trace_planned this "$tidepool_this" train "${train_big[@]}" --steps 3 --policy planned \
    --corpus "$corpus" --trace "$out/trace-planned.json" --json --eval-every 0
  run memory replay_planned this "$tidepool_this" trace replay "$out/trace-planned.json" --json
  rm -f "$out/trace-planned.json"
}

# The soak through Dawn (its JSON report, one line; exit 1 when a figure moved after
# warm-up), and a native run whose steps must create nothing after step 2 but where
# a path first runs (its step lines reduced to those that created something).
suite_soak() {
  RUN_SECONDS=${SOAK_SECONDS:-590} run soak dawn this "${dawn_env[@]}" "$node_bin" --expose-gc \
    "$(dirname "$dawn_this")/soak-dawn.mjs" --pkg "$pkg_this" --corpus "$corpus" "${soak[@]}" --json
  # The same loop in a real Chromium's page, where earlier calls left Chromium's parts.
  if chromium_on_gpu; then
    RUN_SECONDS=${SOAK_SECONDS:-590} run soak chromium this "$node_bin" scripts/soak-browser.mjs \
      "${soak[@]}" --json
  else
    printf '{"suite":"soak","run":"chromium","build":"this","skipped":"no Chromium reached the GPU (gpu-pack.sh --chromium, its parts carried by earlier calls)"}\n' >> "$results"
  fi
  run soak native this bash -c "\"\$0\" train ${soak_native[*]} --corpus \"\$1\" --json | python3 -c '
import json, sys
for line in sys.stdin:
    s = json.loads(line)
    if s.get(\"final\") or s[\"step\"] <= 2:
        continue
    if s[\"buffers_created_step\"] or s[\"bind_groups_created_step\"]:
        print(json.dumps({\"step\": s[\"step\"], \"created\": s[\"created_step_by_path\"]}))
'" "$tidepool_this" "$corpus"
}

suite_pool() {
  local r b
  for r in $(seq 1 "$repeats"); do
    for b in "${builds[@]}"; do
      run pool "native_$r" "$b" "$(bin "$b")" bench pool --json "${pool_batches[@]}"
      # The pool rows come after a short run of steps.
      dawn_for "$b"
      run pool "dawn_$r" "$b" "${dawn[@]}" --preset tiny --warmup 1 --steps 1 --pool
    done
  done
}

# tidepool's curve and the PyTorch twin's, at once on the one GPU, both stopped after
# the evaluation at $curve_stop where one is set (their schedules still run to the
# preset's length), and after CURVE_SECONDS (540) at most; of tidepool's lines only
# the evaluations' and the last are kept. Each line is kept as it comes, so a curve
# cut short is a curve so far.
suite_curves() {
  local suite=${1:-curves} secs=${CURVE_SECONDS:-540} every t0=$SECONDS stop=${curve_stop:-0}
  every=$(sed -n 's/.*--eval-every \([0-9]*\).*/\1/p' <<<"${curve[*]}")
  echo "== curves: tidepool and the PyTorch twin, to step ${curve_stop:-the end}, at most $secs s" | tee -a "$log" >&2
  RUN_SECONDS=$secs run "$suite" tidepool this bash -c "\"\$0\" train ${curve[*]} --corpus \"\$1\" --json | awk -F'\"step\":' '
      { split(\$2, a, /[,}]/); if (/\"final\"/ || a[1] % $every == 0) { print; fflush() } }
      $stop > 0 && a[1] + 0 >= $stop { exit }'" \
    "$tidepool_this" "$corpus" &
  local ours=$!
  RUN_SECONDS=$secs torch_run "$suite" twin torch python3 scripts/torch_twin.py "$corpus" --eval-every "$every" \
    --eval-batches 200 --stop-after "$stop" --max-seconds $((secs - 30))
  wait "$ours"
  echo "   curves done after $((SECONDS - t0)) s" >&2
}

# The same schedule (the preset's, stopped at the evaluation at $curve_stop, 2000 on a
# GPU), seed and batches in f32, f16 with attention in f32 and f16 (attention on tensor
# cores), at once:
# of each run only the evaluations' lines and the last are kept.
suite_f16_curves() {
  local secs=${CURVE_SECONDS:-540} every stop=${curve_stop:-2000} mode t0=$SECONDS
  every=$(sed -n 's/.*--eval-every \([0-9]*\).*/\1/p' <<<"${curve[*]}")
  echo "== f16-curves: f32, f16 with --f16-attention false and f16 to step $stop, at most $secs s" | tee -a "$log" >&2
  for mode in f32 f16 f16_attention; do
    local flags="--precision ${mode%%_*}"
    [ "$mode" = f16 ] && flags+=" --f16-attention false"
    RUN_SECONDS=$secs run f16-curves "$mode" this bash -c "\"\$0\" train ${curve[*]} $flags --corpus \"\$1\" --json | awk -F'\"step\":' '
        { split(\$2, a, /[,}]/); if (/\"final\"/ || a[1] % $every == 0) { print; fflush() } }
        a[1] + 0 >= $stop { exit }'" \
      "$tidepool_this" "$corpus" &
  done
  wait
  echo "   f16-curves done after $((SECONDS - t0)) s" >&2
}

suite_host_profile() {
  local p b
  for p in "${page[@]}"; do
    for b in "${builds[@]}"; do
      run host-profile "native_$p" "$b" "$(bin "$b")" bench step --presets "$p" --at-once "$at_once" \
        --warmup "$warmup" --steps "$calls" --corpus "$corpus" --json
      dawn_for "$b"
      # every WebGPU method a step calls, timed on the caller's side
      run host-profile "dawn_calls_$p" "$b" "${dawn[@]}" --preset "$p" --at-once "$at_once" --warmup "$warmup" \
        --steps "$calls" --time-calls
      # the host's side alone: Dawn validates and records every call and runs nothing
      run host-profile "dawn_null_$p" "$b" "${dawn[@]}" --preset "$p" --at-once "$at_once" --warmup "$warmup" \
        --steps "$calls" --dawn-backend null
    done
  done
  run host-profile readback this "${dawn_env[@]}" "$node_bin" "$dawn_this" --readback --warmup 20 --steps 200
}

# The README's headline figures in one call of at most ten minutes: the timed parts
# first, each on an otherwise idle GPU, then the learning curve in what is left.
suite_headline() {
  local budget=${BUDGET_SECONDS:-480} part
  for part in step gemm browser pool curves; do
    if [ "$SECONDS" -ge "$budget" ]; then
      echo "{\"suite\":\"headline\",\"skipped\":\"$part\",\"why\":\"past BUDGET_SECONDS=$budget\"}" >> "$results"
      continue
    fi
    case $part in
      step)
        torch_run headline torch_$big torch python3 scripts/torch_step.py --preset "$big" --steps 20 --warmup 5 \
          --modes fp32,fp32_fused,tf32
        run headline "step_$big" this "$tidepool_this" bench step --presets "$big" --precision f32,f16 \
          --warmup "$warmup" --steps "$steps" --corpus "$corpus" --json
        run headline memory this bash -c "\"\$0\" train ${train_big[*]} --steps 3 --corpus \"\$1\" --json | tail -n 1" \
          "$tidepool_this" "$corpus" ;;
      gemm)
        torch_run headline cublas torch python3 scripts/torch_matmul.py --dtypes fp32
        # the f32 variants the launchers choose among on a GPU (all of them: 3-4 minutes)
        run headline matmul this "$matmul_this" --json --no-squares --only matmul "${quick[@]}" \
          --variant "${HEADLINE_VARIANTS:-tiled,splitk,narrow}" ;;
      browser)
        run headline native this "$tidepool_this" bench step --presets "$(comma "${page[@]}")" --at-once "$at_once" --in-flight 2 \
          --warmup "$warmup" --steps "$calls" --corpus "$corpus" --json
        dawn_for this
        for p in "${page[@]}"; do
          run headline "dawn_$p" this "${dawn[@]}" --preset "$p" --at-once "$at_once" --in-flight 2 \
            --warmup "$warmup" --steps "$calls"
        done ;;
      pool)
        run headline pool this "$tidepool_this" bench pool --json "${pool_batches[@]}" ;;
      curves)
        # the curve to step 2000 (the README's figure), in what is left of the call
        [ "$local_run" = 1 ] || curve_stop=${CURVE_STOP:-2000}
        CURVE_SECONDS=$((budget + 90 - SECONDS)) suite_curves headline ;;
    esac
  done
}

{
  echo "date: $(date -u +%FT%TZ)"
  echo "machine: $machine"
  echo "suites: ${suites[*]}${against:+ (against $against)}"
  echo "this build: $(cat "$G/BUILD" 2>/dev/null || echo unknown)"
  [ -n "$against" ] && echo "against: $(cat "$against/BUILD" 2>/dev/null || cat "$against/COMMIT" 2>/dev/null || echo unknown)"
  "$tidepool_this" info 2>/dev/null
} > "$out/info.txt"
for s in "${suites[@]}"; do
  "suite_${s//-/_}" "$s"
done
python3 scripts/bench_tables.py "$results" --info "$out/info.txt" > "$out/table.md" 2>> "$log" \
  || echo "bench_tables.py could not make the tables (stderr.log)" >&2
[ -f "$out/sweep.md" ] && cat "$out/sweep.md" >> "$out/table.md"
cat "$out/table.md"
echo "gpu-run: $out (results.jsonl, table.md, stderr.log, info.txt)" >&2

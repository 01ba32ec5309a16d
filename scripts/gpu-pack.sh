#!/usr/bin/env bash
# Fills .gpu/ (ignored by git) with what scripts/gpu-run.sh needs on the GPU machine,
# which has no package registries and no Node.js:
#   - the shared part (../shared/gpu/pack.sh --dawn): the Vulkan loader, prelude.sh,
#     Node.js, and Dawn (the npm package `webgpu`) with bench-dawn.mjs beside it;
#   - this build: the `tidepool` binary, the matmul benchmark, the GPU test binaries
#     (tests/), and the wasm package with the benchmark exports (feature `bench`);
#   - with --against COMMIT|DIR, an earlier build in .gpu/against: built here from a
#     commit, or copied from a folder that holds `tidepool` and `pkg/` (and, where it has
#     them, `matmul_bench` and its own bench-dawn.mjs / readback.mjs);
#   - with --candidate NAME=COMMIT[:TEST,...] (repeatable), that commit's `tidepool` and
#     GPU test binaries (the TESTs named, else CANDIDATE_TESTS, default `matmul_f16 ops`:
#     the f16 GEMMs and every op against its reference; a GEMM-only candidate needs
#     only `matmul_f16`, 2 MiB less) in .gpu/candidates/NAME, for scripts/gpu-ab.sh:
#     candidates of one change taking turns with this build in one call;
#   - with --no-browser, none of the browser's part (Node.js, Dawn, the wasm package):
#     what scripts/gpu-ab.sh and the native suites need, in 25 MiB less, which leaves
#     room for more candidates in one call;
#   - with --chromium, Debian's Chromium in parts of 50 MiB (.chr/part-*) for a page on
#     the GPU (gpu-run.sh browser-vs-native): a call carries at most 64 MiB, so earlier
#     calls each carry one part and leave it in /tmp/chr-parts on the warm machine
#     (`mkdir -p /tmp/chr-parts && cp .chr/part-* /tmp/chr-parts/`), each sent at once
#     after the one before (the machine goes back when idle); the last part fits
#     beside .gpu. Parts of the same Chromium are kept from one pack to the next.
#
#   scripts/gpu-pack.sh [--against COMMIT|DIR] [--candidate NAME=COMMIT[:TEST,...]]...
#                       [--no-browser]
#                       [--chromium]
#
# Binaries travel xz-packed (gpu-run.sh unpacks them); the whole folder must stay under
# the 64 MiB a call carries, with the repository's own files.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
export PATH="$HOME/.cargo/bin:$PWD/node_modules/.bin:$PATH"

against="" chromium=0 browser=1 candidates=()
while [ $# -gt 0 ]; do
  case "$1" in
    --against) against=${2:?--against needs a commit or a folder}; shift ;;
    --against=*) against=${1#--against=} ;;
    --candidate) candidates+=("${2:?--candidate needs NAME=COMMIT}"); shift ;;
    --candidate=*) candidates+=("${1#--candidate=}") ;;
    --chromium) chromium=1 ;;
    --no-browser) browser=0 ;;
    *) echo "gpu-pack: unknown argument $1 (--against COMMIT|DIR, --candidate NAME=COMMIT[:TEST,...], --no-browser, --chromium)" >&2; exit 2 ;;
  esac
  shift
done
[ "$browser" = 1 ] || [ "$chromium" = 0 ] || { echo "gpu-pack: --chromium runs the page: it needs the browser's part (drop --no-browser)" >&2; exit 2; }
# A commit cannot hold ':' (git check-ref-format), so NAME=COMMIT:TESTS splits cleanly.
for c in "${candidates[@]}"; do
  name=${c%%=*} rest=${c#*=}
  [[ "$c" == *=* && "$name" =~ ^[A-Za-z0-9_-]+$ ]] \
    || { echo "gpu-pack: --candidate $c: give NAME=COMMIT[:TEST,...], NAME of letters, digits, - and _" >&2; exit 2; }
  git rev-parse --verify -q "${rest%%:*}^{commit}" > /dev/null \
    || { echo "gpu-pack: --candidate $c: no commit ${rest%%:*}" >&2; exit 2; }
  if [[ "$rest" == *:* ]]; then
    [[ "${rest#*:}" =~ ^[A-Za-z0-9_]+(,[A-Za-z0-9_]+)*$ ]] \
      || { echo "gpu-pack: --candidate $c: name its tests as TEST,TEST (test targets in tests/)" >&2; exit 2; }
  fi
done

# The shared GPU kit sits beside the checkout: ../shared from the main checkout and
# from a worktree beside it alike; SHARED_DIR names another.
shared=""
for d in ${SHARED_DIR:-} "$repo/../shared" "$(dirname "$(git rev-parse --path-format=absolute --git-common-dir)")/../shared"; do
  if [ -f "$d/gpu/pack.sh" ]; then shared=$(cd "$d" && pwd); break; fi
done
[ -n "$shared" ] || { echo "gpu-pack: no shared/gpu/pack.sh beside the checkout (set SHARED_DIR)" >&2; exit 2; }

G=.gpu
mkdir -p "$G"
if [ "$browser" = 1 ]; then
  OUT_DIR=$G bash "$shared/gpu/pack.sh" --dawn
else
  OUT_DIR=$G bash "$shared/gpu/pack.sh"
  rm -rf "$G/node.xz" "$G/dawn" "$G/pkg"
fi

# `--features bench` where the build has that feature (an earlier commit may not).
bench_features() { grep -q '^bench *=' "$1/Cargo.toml" && echo --features=bench || true; }
# executable NAME CARGO-ARGS...: the executable cargo built for the target NAME (a
# bench or test build also builds the binaries, whose paths it reports too)
executable() {
  local name=$1
  shift
  cargo "$@" --message-format=json | grep -F "\"name\":\"$name\"" \
    | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1
}
# build_commit COMMIT: that commit's tree in a folder of its own ($tree) and its tidepool
# built there with this checkout's target/against (the dependencies they share are not
# built again), `--features bench` where it has it ($f).
build_commit() {
  tree=$(mktemp -d)
  # -m: every file dated now. git archive dates them at the commit, so a commit made
  # before the last build in target/against looked older than that build's outputs,
  # and cargo kept them: a candidate packed the binary of the one built before it.
  git archive "$1" | tar x -m -C "$tree"
  f=$(bench_features "$tree")
  (cd "$tree" && CARGO_TARGET_DIR=$repo/target/against cargo build --release --bin tidepool $f)
}
pack_binary() { # pack_binary FILE DEST: stripped and xz-packed as DEST.bin.xz
  local tmp
  tmp=$(mktemp)
  cp "$1" "$tmp" && strip "$tmp"
  xz -6 -T2 -c "$tmp" > "$2.bin.xz"
  rm -f "$tmp" "$2"
}

features=$(bench_features .)
cargo build --release --bin tidepool $features
pack_binary target/release/tidepool "$G/tidepool"
pack_binary "$(executable matmul_bench bench --no-run --bench matmul_bench $features)" "$G/matmul_bench"
[ -f benches/gemm_ceiling.rs ] && pack_binary "$(executable gemm_ceiling bench --no-run --bench gemm_ceiling)" "$G/gemm_ceiling"
[ -f benches/kernel_stats.rs ] && pack_binary "$(executable kernel_stats bench --no-run --bench kernel_stats)" "$G/kernel_stats"
# The GPU test binaries that need no files of the checkout: every kernel against its
# reference, the context and the pool, the f16 GEMMs, the optimizer.
rm -rf "$G/tests" && mkdir -p "$G/tests"
for t in ${GPU_TESTS:-ops op_parity gpu matmul_f16 optimizer}; do
  [ -f "tests/$t.rs" ] || [ -f "tests/$t/main.rs" ] || continue
  pack_binary "$(executable "$t" test --release --no-run --test "$t" $features)" "$G/tests/$t"
done
if [ "$browser" = 1 ]; then
  # Always rebuilt (it is incremental): a stale package would measure an older build.
  rm -rf "$G/pkg"
  wasm-pack build --release --target web --no-pack --out-dir "$G/pkg" -- $features
  cp scripts/bench-dawn.mjs scripts/readback.mjs scripts/soak-dawn.mjs scripts/soak-loop.mjs \
    scripts/soak-options.mjs "$G/dawn/"
  dawn_node=$G/dawn/node_modules/webgpu/dist/linux-x64/dawn.node
  [ -f "$dawn_node" ] && xz -6 -T2 -c "$dawn_node" > "$dawn_node.bin.xz" && rm "$dawn_node"
fi
echo "$(git describe --always --dirty) built $(date -u +%FT%TZ)" > "$G/BUILD"

rm -rf "$G/against"
if [ -n "$against" ]; then
  mkdir -p "$G/against"
  if [ -d "$against" ]; then
    src=$(cd "$against" && pwd)
    [ -x "$src/tidepool" ] && [ -d "$src/pkg" ] || { echo "gpu-pack: $against holds no tidepool and pkg/" >&2; exit 2; }
    pack_binary "$src/tidepool" "$G/against/tidepool"
    [ -x "$src/matmul_bench" ] && pack_binary "$src/matmul_bench" "$G/against/matmul_bench"
    cp -r "$src/pkg" "$G/against/pkg"
    cp "$src"/*.mjs "$G/against/" 2>/dev/null || true
    cat "$src/COMMIT" > "$G/against/BUILD" 2>/dev/null || echo "$src" > "$G/against/BUILD"
  else
    commit=$(git rev-parse --verify "$against^{commit}")
    build_commit "$commit"
    pack_binary "$repo/target/against/release/tidepool" "$G/against/tidepool"
    # the matmul benchmark is a bench target, or an example in older trees
    if [ -f "$tree/benches/matmul_bench.rs" ]; then
      m=$(cd "$tree" && CARGO_TARGET_DIR=$repo/target/against executable matmul_bench bench --no-run --bench matmul_bench $f)
    else
      m=$(cd "$tree" && CARGO_TARGET_DIR=$repo/target/against executable matmul_bench build --release --example matmul_bench $f)
    fi
    [ -n "$m" ] && pack_binary "$m" "$G/against/matmul_bench"
    [ "$browser" = 0 ] || (cd "$tree" && CARGO_TARGET_DIR=$repo/target/against wasm-pack build --release \
      --target web --no-pack --out-dir "$repo/$G/against/pkg" -- $f)
    cp "$tree"/scripts/bench-dawn.mjs "$tree"/scripts/readback.mjs "$G/against/" 2>/dev/null || true
    echo "$commit" > "$G/against/BUILD"
    rm -rf "$tree"
  fi
fi

# Candidates: each commit built as --against's is, its tidepool and GPU tests packed.
rm -rf "$G/candidates"
for c in "${candidates[@]}"; do
  name=${c%%=*} rest=${c#*=}
  commit=$(git rev-parse --verify "${rest%%:*}^{commit}")
  tests=${CANDIDATE_TESTS:-matmul_f16 ops} named=0
  if [[ "$rest" == *:* ]]; then tests=${rest#*:} tests=${tests//,/ } named=1; fi
  mkdir -p "$G/candidates/$name"
  build_commit "$commit"
  pack_binary "$repo/target/against/release/tidepool" "$G/candidates/$name/tidepool"
  for t in $tests; do
    # A default test an older commit lacks is left out; a named one must be there.
    if [ ! -f "$tree/tests/$t.rs" ] && [ ! -f "$tree/tests/$t/main.rs" ]; then
      [ "$named" = 0 ] && continue
      echo "gpu-pack: --candidate $c: $commit has no test target $t" >&2; exit 2
    fi
    x=$(cd "$tree" && CARGO_TARGET_DIR=$repo/target/against executable "$t" test --release --no-run --test "$t" $f)
    [ -n "$x" ] && pack_binary "$x" "$G/candidates/$name/$t"
  done
  echo "$commit $(git log -1 --format=%s "$commit")" > "$G/candidates/$name/BUILD"
  rm -rf "$tree"
done

rm -rf "$G/playwright-core.tar.xz" "$G/uplot-dist" "$G/fonts"
if [ "$chromium" = 1 ]; then
  # Packing Chromium takes about 20 minutes on two cores: parts packed from the same
  # Chromium are kept (.chr/VERSION names it).
  version=$(/usr/lib/chromium/chromium --version)
  if [ -f .chr/VERSION ] && [ "$(cat .chr/VERSION)" = "$version" ] && [ -f .chr/part-aa ]; then
    echo "gpu-pack: keeping .chr's parts of $version"
  else
    rm -rf .chr
    # Debian's Chromium with the libraries it links beyond glibc (the GPU machine has
    # neither), playwright-core, which drives it, and what the whole page needs beyond
    # the wasm: its chart library, and a font (Chromium aborts laying out text without one).
    tmp=$(mktemp -d)
    mkdir -p "$tmp/chrpkg/lib" "$tmp/chrpkg/chromium/locales"
    (cd /usr/lib/chromium && cp -a chrome_100_percent.pak chrome_crashpad_handler chromium icudtl.dat \
      libEGL.so libGLESv2.so libvulkan.so.1 resources.pak snapshot_blob.bin v8_context_snapshot.bin \
      "$tmp/chrpkg/chromium/" && cp locales/en-US.pak "$tmp/chrpkg/chromium/locales/")
    ldd /usr/lib/chromium/chromium | awk '$3 ~ /^\// {print $3}' \
      | grep -Ev '/(libc|libm|libdl|librt|libpthread|libresolv)\.so|/ld-linux' \
      | xargs -I{} cp -L {} "$tmp/chrpkg/lib/"
    # NSS loads these by name at start-up.
    (cd /usr/lib/x86_64-linux-gnu && cp -L libsoftokn3.so libfreebl3.so libfreeblpriv3.so libnssdbm3.so "$tmp/chrpkg/lib/")
    mkdir .chr
    tar cf - -C "$tmp" chrpkg | xz -9 -T2 | split -b 50M - .chr/part-
    echo "$version" > .chr/VERSION
    rm -rf "$tmp"
  fi
  tar cJf "$G/playwright-core.tar.xz" node_modules/playwright-core
  cp -r node_modules/uplot/dist "$G/uplot-dist"
  mkdir -p "$G/fonts" && cp "$(fc-match -f '%{file}' sans)" "$G/fonts/"
  du -sh .chr/part-*
fi

# What a call carries: this folder and the repository's own files, 64 MiB in all.
mib() { echo $(($1 / 1048576)); }
size=$(du -sb "$G" | cut -f1)
tracked=$(git ls-files -z | du -cb --files0-from=- 2>/dev/null | tail -n 1 | cut -f1)
echo "gpu-pack: $G is $(mib "$size") MiB, the repository's files $(mib "$tracked") MiB (a call carries 64 MiB)"
[ $((size + tracked)) -lt $((64 * 1048576)) ] || { echo "gpu-pack: too large for one call" >&2; exit 1; }

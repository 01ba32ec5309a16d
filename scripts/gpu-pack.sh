#!/usr/bin/env bash
# Fills .gpu/ (ignored by git) with what scripts/gpu-run.sh needs on the H200 machine:
# the shared Vulkan loader, Node.js and Dawn, the corpus and the PyTorch anchor
# (../shared/gpu/pack.sh), plus tidepool's release binaries and wasm package, and the
# PyTorch twin with its table script.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PWD/node_modules/.bin:$PATH"
bash ../shared/gpu/pack.sh --dawn
cargo build --release --bin tidepool --example matmul_bench
# Always rebuilt (it is incremental): a stale pkg/ would measure an older build.
wasm-pack build --release --target web --no-pack --out-dir pkg -- --features bench
cp target/release/tidepool target/release/examples/matmul_bench .gpu/
# tests/matmul_f16.rs as a binary (gpu-run.sh f16 runs it with the tensor cores forced)
f16_test=$(cargo test --release --test matmul_f16 --no-run --message-format=json \
  | sed -n 's/.*"executable":"\([^"]*matmul_f16[^"]*\)".*/\1/p' | tail -n 1)
cp "$f16_test" .gpu/matmul_f16
# tests/op_parity.rs too: every kernel against its CPU reference on the real GPU.
parity_test=$(cargo test --release --test op_parity --no-run --message-format=json \
  | sed -n 's/.*"executable":"\([^"]*op_parity[^"]*\)".*/\1/p' | tail -n 1)
cp "$parity_test" .gpu/op_parity
# And tests/gpu.rs: the context, the pool, the bind group cache, slices.
gpu_test=$(cargo test --release --test gpu --no-run --message-format=json \
  | sed -n 's/.*"executable":"\([^"]*deps\/gpu-[^"]*\)".*/\1/p' | tail -n 1)
cp "$gpu_test" .gpu/gpu
strip .gpu/tidepool .gpu/matmul_bench .gpu/matmul_f16 .gpu/op_parity .gpu/gpu
# The previous build for before/after rows (gpu-run.sh round3), when given.
if [ -n "${PREV_TIDEPOOL:-}" ]; then cp "$PREV_TIDEPOOL" .gpu/tidepool-prev && strip .gpu/tidepool-prev; fi
# And a build between the two (gpu-run.sh round7), when given.
if [ -n "${MID_TIDEPOOL:-}" ]; then cp "$MID_TIDEPOOL" .gpu/tidepool-mid && strip .gpu/tidepool-mid; fi
if [ -n "${PREV_MATMUL_BENCH:-}" ]; then cp "$PREV_MATMUL_BENCH" .gpu/matmul_bench_prev && strip .gpu/matmul_bench_prev; fi
# The carry limit is 64 MiB: all but tidepool travel xz-packed (gpu-run.sh unpacks them).
for b in matmul_bench matmul_bench_prev matmul_f16 op_parity gpu tidepool-prev tidepool-mid; do
  if [ -f ".gpu/$b" ]; then xz -9 -T2 -c ".gpu/$b" > ".gpu/$b.bin.xz" && rm ".gpu/$b"; fi
done
dawn=.gpu/dawn/node_modules/webgpu/dist/linux-x64/dawn.node
if [ -f "$dawn" ]; then xz -6 -T2 -c "$dawn" > "$dawn.bin.xz" && rm "$dawn"; fi
rm -rf .gpu/pkg .gpu/pkg-prev .gpu/pkg-mid && cp -r pkg .gpu/pkg
# The previous build's wasm package (gpu-run.sh previous), when given; a middle one.
if [ -n "${PREV_PKG:-}" ]; then cp -r "$PREV_PKG" .gpu/pkg-prev; fi
if [ -n "${MID_PKG:-}" ]; then cp -r "$MID_PKG" .gpu/pkg-mid; fi
# PROF_PKG=1: the same wasm with its function names kept (gpu-run.sh calls profiles it).
rm -rf .gpu/pkg-prof
if [ -n "${PROF_PKG:-}" ]; then
  wasm-bindgen --target web --keep-debug --no-typescript --out-dir .gpu/pkg-prof \
    target/wasm32-unknown-unknown/release/tidepool.wasm
  wasm-opt -O -g --strip-dwarf --enable-bulk-memory --enable-nontrapping-float-to-int \
    --enable-sign-ext --enable-mutable-globals --enable-reference-types --enable-multivalue \
    .gpu/pkg-prof/tidepool_bg.wasm -o .gpu/pkg-prof/tidepool_bg.wasm
fi
# PERF=1: Linux perf and the libraries it needs beyond the H200 machine's own (it has
# none; gpu-run.sh perf17 samples Dawn's process with it).
rm -rf .gpu/perf
if [ -n "${PERF:-}" ]; then
  mkdir -p .gpu/perf/lib
  cp "$(command -v perf)" .gpu/perf/perf
  ldd "$(command -v perf)" | awk '$3 ~ /^\// {print $3}' \
    | grep -Ev '/(libc|libm|libstdc\+\+|libgcc_s|libz|libpthread|libdl|librt)\.so' \
    | xargs -I{} cp -L {} .gpu/perf/lib/
  for f in .gpu/perf/perf .gpu/perf/lib/*; do xz -6 -T2 -c "$f" > "$f.bin.xz" && rm "$f"; done
fi
# PACK_CHROMIUM=1: Debian's Chromium with the libraries it links beyond glibc (the H200
# machine has neither), xz-packed and split into .chr/part-* of 50 MiB, since a call
# carries at most 64 MiB: calls carrying one part each leave them on the warm machine
# for `gpu-run.sh browser18` (which says how). And playwright-core, which drives it.
rm -rf .gpu/playwright-core.tar.xz
if [ -n "${PACK_CHROMIUM:-}" ]; then
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
  rm -rf .chr && mkdir .chr
  tar cf - -C "$tmp" chrpkg | xz -9 -T2 | split -b 50M - .chr/part-
  rm -rf "$tmp"
  tar cJf .gpu/playwright-core.tar.xz node_modules/playwright-core
  du -sh .chr/part-*
fi
cp scripts/bench-dawn.mjs scripts/readback.mjs .gpu/dawn/
# the page's chart library and a font (bench-browser.mjs page mounts the whole page;
# the GPU machine has no fonts, and Chromium aborts laying out text without one)
rm -rf .gpu/uplot-dist && cp -r node_modules/uplot/dist .gpu/uplot-dist
font=$(fc-match -f '%{file}' sans 2>/dev/null || true)
rm -rf .gpu/fonts && mkdir -p .gpu/fonts && { [ -f "$font" ] && cp "$font" .gpu/fonts/ || echo "no font found: bench-browser.mjs page will not run on the GPU machine" >&2; }
cp scripts/torch_twin.py scripts/torch_curves.py scripts/torch_matmul.py .gpu/  # curves, round4
du -sh .gpu

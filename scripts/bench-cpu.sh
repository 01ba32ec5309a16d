#!/usr/bin/env bash
# The `tiny` training step of two builds side by side on CPU adapters: natively on
# the adapter wgpu picks (lavapipe here) and in headless Chromium (WebGPU on
# SwiftShader here). Prints a table and one JSON line with each build's median ms a
# step, the ratio old/new (above 1: the new build is faster) and the spread.
#
#   OLD_BIN=/tmp/tidepool-666498b OLD_PKG=/work/wt-old666/pkg scripts/bench-cpu.sh \
#     [--repeats 5] [--steps 8] [--warmup 3] [--only native|browser] [--json-out FILE]
#
# OLD_BIN / NEW_BIN: native `tidepool` binaries (NEW_BIN defaults to
# target/release/tidepool, built here first). OLD_PKG / NEW_PKG: wasm packages of the
# same builds (`wasm-pack build --release --target web --no-pack --out-dir pkg -- --features bench` in a
# checkout of each; NEW_PKG defaults to pkg/, built here first). Build the old one
# in a throwaway worktree with its own target dir (a commit before the `bench`
# feature exports the benchmarks always: leave out `-- --features bench`), e.g.
#   git worktree add --detach /work/wt-old 666498b && cd /work/wt-old &&
#   wasm-pack build --release --target web --no-pack --out-dir pkg -- --features bench
#
# How it takes turns, so that other load on a shared machine hits both builds alike:
# - natively, each repeat runs `tidepool bench step --presets tiny --json` of one build
#   and then of the other (old first in even repeats, new first in odd), and takes the
#   median of the default step (`pool + belt uploads`) of each;
# - in Chromium, one page a build holds its own trainer (preset tiny, the same corpus
#   for both); after the warm-up steps, each repeat steps them alternately, one step
#   each (who goes first alternates too), and takes each build's median.
# A figure is the median over repeats of each repeat's median; the ranges are the
# lowest and highest of those medians, and of the ratios per repeat.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PWD/node_modules/.bin:$PATH"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp/tidepool-xdg}"
mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"

: "${OLD_BIN:?set OLD_BIN to the old build's tidepool binary}"
: "${OLD_PKG:?set OLD_PKG to the old build's wasm package (a folder with tidepool.js)}"
only=""
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    --only) only="${args[i + 1]:-}" ;;
    --only=*) only="${args[i]#--only=}" ;;
  esac
done

if [ -z "${NEW_BIN:-}" ] && [ "$only" != browser ]; then
  cargo build --release --bin tidepool >&2
  NEW_BIN=target/release/tidepool
fi
if [ -z "${NEW_PKG:-}" ] && [ "$only" != native ]; then
  wasm-pack build --release --target web --no-pack --out-dir pkg -- --features bench >&2
  NEW_PKG=pkg
fi

for f in "${OLD_BIN}" "${NEW_BIN:-}"; do
  [ -z "$f" ] || [ -x "$f" ] || { echo "bench-cpu: $f is not an executable" >&2; exit 2; }
done
for d in "${OLD_PKG}" "${NEW_PKG:-}"; do
  [ -z "$d" ] || [ -f "$d/tidepool.js" ] || { echo "bench-cpu: $d/tidepool.js is missing" >&2; exit 2; }
done

echo "bench-cpu: $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
exec node scripts/bench-cpu.mjs --old-bin "$OLD_BIN" --new-bin "${NEW_BIN:-}" \
  --old-pkg "$OLD_PKG" --new-pkg "${NEW_PKG:-}" "$@"

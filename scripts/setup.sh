#!/usr/bin/env bash
# Installs what `make demo` and `make test` need on a fresh Debian machine, and nothing
# that is already there: run it as often as you like. Quiet when all is present.
#   scripts/setup.sh native   lavapipe (CPU Vulkan) for native wgpu tests; rustfmt
#   scripts/setup.sh web      wasm target, wasm-pack, wasm-bindgen CLI, wasm-opt, npm deps
#   scripts/setup.sh browser  Chromium + ChromeDriver for headless tests
# With no argument: all of them.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PWD/node_modules/.bin:$PATH"

say() { echo "setup: $*" >&2; }
sudo_() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

apt_updated=""
apt_install() { # installs the Debian packages among "$@" that are missing
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  say "installing Debian packages: ${missing[*]}"
  if [ -z "$apt_updated" ]; then sudo_ apt-get update -qq; apt_updated=1; fi
  sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# The wasm-bindgen CLI must match the wasm-bindgen crate exactly; Cargo.toml pins it.
wasm_bindgen_version() {
  sed -n 's/^wasm-bindgen = { version = "=\([0-9.]*\)".*/\1/p' Cargo.toml | head -n1
}

native() {
  apt_install mesa-vulkan-drivers libvulkan1
  # `make test` checks the formatting (a minimal rustup profile leaves rustfmt out).
  rustup component list --installed 2>/dev/null | grep -q '^rustfmt' \
    || { say "adding rust component rustfmt"; rustup component add rustfmt >/dev/null; }
}

browser() {
  apt_install chromium chromium-driver
}

web() {
  rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown \
    || { say "adding rust target wasm32-unknown-unknown"; rustup target add wasm32-unknown-unknown >/dev/null; }
  if ! command -v wasm-pack >/dev/null || ! wasm-pack --version | grep -q "0.15.1"; then
    say "building wasm-pack 0.15.1 (about a minute on 2 cores)"
    # --debug: wasm-pack only drives cargo, wasm-bindgen and wasm-opt, so its own
    # speed does not show, and an optimised build of it takes about 6 minutes here
    # against 1. (The wasm-bindgen CLI below stays optimised: it rewrites every
    # test binary, 4x slower unoptimised, which would cost back what it saves.)
    cargo install wasm-pack --version 0.15.1 --locked --debug --quiet
  fi
  local want; want=$(wasm_bindgen_version)
  if ! command -v wasm-bindgen >/dev/null || ! wasm-bindgen --version | grep -q " $want\$"; then
    say "building wasm-bindgen-cli $want (about 2 minutes)"
    # no --locked: one of its locked dependencies is not on the registry
    cargo install wasm-bindgen-cli --version "$want" --quiet --force
  fi
  # npm deps: wasm-opt (binaryen from npm; Debian's 108 breaks the externref table),
  # playwright-core for page tests, the chart library for the page.
  if [ ! -d node_modules ] || [ package.json -nt node_modules/.package-lock.json ]; then
    say "installing npm packages"
    npm install --no-audit --no-fund --loglevel=error >/dev/null
  fi
}

case "${1:-all}" in
  native) native ;;
  web) web ;;
  browser) browser ;;
  all) native; browser; web ;;
  *) echo "usage: $0 [native|web|browser|all]" >&2; exit 2 ;;
esac

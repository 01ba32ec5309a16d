#!/usr/bin/env bash
# What the two packages would ship, checked before anything is published (`make
# test-package-dry`, part of `make test`):
#   the crate  `cargo package`: its file list, then the packed crate compiled from
#              its own files (so a source file or `include_str!` input left out of
#              Cargo.toml's `include` fails here, not for the first user);
#   npm        `npm pack --dry-run --json` (needs pkg/: `make pkg`).
# Fails loudly on the first violation and prints both packages' sizes.
#   scripts/check-packages.sh [crate|npm]     (default: both)
#
# The compile check is `cargo check` in target/crate-checks, the folder `make
# test-crate` fills with the same dependencies' metadata, so it costs the crate's own
# check (about a minute here) where `cargo package`'s own verification would build
# every dependency again in the debug profile, which nothing else in `make test` uses.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PWD/node_modules/.bin:$PATH"

fail() { echo "check-packages: $*" >&2; exit 1; }
# Reads a list on stdin; fails naming every line that matches the pattern.
refuse() {
  local what=$1 pattern=$2 hits
  hits=$(grep -E "$pattern" || true)
  [ -z "$hits" ] || fail "the $what package would ship files it must not:"$'\n'"$hits"
}
require() {
  local what=$1 list=$2
  shift 2
  for f in "$@"; do
    grep -qxF "$f" <<<"$list" || fail "the $what package lacks $f"
  done
}
human() { numfmt --to=iec-i --suffix=B --format='%.1f' "$1"; }

crate() {
  local list name version crate_file unpacked
  list=$(cargo package --list --allow-dirty --quiet)
  require crate "$list" Cargo.toml LICENSE-MIT LICENSE-APACHE README.md CHANGELOG.md \
    data/tinyshakespeare.txt src/lib.rs src/main.rs
  refuse crate '^(bench-results|benches|tests|scripts|docs|examples|tools|www|pkg|node_modules|target|\.ci|\.cargo)/|^(index\.html|package(-lock)?\.json|BENCHMARKS\.md|Makefile)$' <<<"$list"
  name=$(sed -n 's/^name = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
  version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
  cargo package --no-verify --allow-dirty --quiet
  crate_file="target/package/$name-$version.crate"
  [ -f "$crate_file" ] || fail "cargo package wrote no $crate_file"
  # crates.io refuses crates over 10 MB
  [ "$(stat -c %s "$crate_file")" -lt 10000000 ] || fail "$crate_file is over crates.io's 10 MB"
  unpacked=$(mktemp -d)
  trap 'rm -rf "$unpacked"' RETURN
  tar xzf "$crate_file" -C "$unpacked"
  # The packed files carry one fixed old date: made new, so that cargo checks them
  # again rather than take them for the last check's.
  find "$unpacked" -type f -exec touch {} +
  # The packed crate alone, as a user's build sees it: the library without the CLI,
  # then with it (the binary).
  CARGO_TARGET_DIR=$PWD/target/crate-checks cargo check --quiet --locked \
    --manifest-path "$unpacked/$name-$version/Cargo.toml" --no-default-features --lib
  CARGO_TARGET_DIR=$PWD/target/crate-checks cargo check --quiet --locked \
    --manifest-path "$unpacked/$name-$version/Cargo.toml" --bins
  echo "crate $name $version: $(wc -l <<<"$list") files, $(human "$(stat -c %s "$crate_file")") packed ($crate_file)"
}

npm_package() {
  local report
  [ -f pkg/tidepool_bg.wasm ] || fail "pkg/ has no wasm build: make pkg"
  report=$(npm pack --dry-run --json --ignore-scripts 2>/dev/null) || fail "npm pack --dry-run failed"
  # One line a file, then a last line with the sizes.
  node -e '
    const [p] = JSON.parse(require("fs").readFileSync(0, "utf8"));
    for (const f of p.files) console.log(f.path);
    console.log(`=${p.name} ${p.version} ${p.entryCount} ${p.size} ${p.unpackedSize}`);
  ' <<<"$report" > target/npm-pack.txt
  local list sizes
  list=$(grep -v '^=' target/npm-pack.txt)
  sizes=$(grep '^=' target/npm-pack.txt | cut -c2-)
  require npm "$list" package.json LICENSE-MIT LICENSE-APACHE README.md \
    pkg/tidepool.js pkg/tidepool_bg.wasm pkg/tidepool.d.ts www/tidepool.mjs www/worker.mjs \
    www/tidepool.d.ts www/wasm.d.ts data/tinyshakespeare.txt
  refuse npm '^(bench-results|benches|tests|scripts|docs|examples|tools|src|target|\.ci|\.cargo)/|\.(safetensors|pickle|jsonl)$|^(Cargo\.(toml|lock)|BENCHMARKS\.md|Makefile|index\.html)$' <<<"$list"
  read -r name version entries size unpacked <<<"$sizes"
  echo "npm $name $version: $entries files, $(human "$size") packed, $(human "$unpacked") unpacked"
}

case "${1:-all}" in
  crate) crate ;;
  npm) npm_package ;;
  all) crate; npm_package ;;
  *) echo "usage: $0 [crate|npm]" >&2; exit 2 ;;
esac

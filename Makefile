# The two commands the README gives. Each installs what is missing first
# (scripts/setup.sh is idempotent and quiet when everything is there).
#   make demo   build the wasm package and serve the page on http://127.0.0.1:$(PORT)/
#   make test   native tests on the default adapter (lavapipe here), the same GPU tests
#               in headless Chromium (WebGPU), the page's end-to-end tests, and what the
#               crate and the npm package would ship
SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(CURDIR)/node_modules/.bin:$(PATH)
# lavapipe warns without it; harmless, but noisy
export XDG_RUNTIME_DIR ?= /tmp/tidepool-xdg
export CHROMEDRIVER ?= /usr/bin/chromedriver
PORT ?= 8000

.PHONY: demo test setup setup-web pkg pkg-bench serve test-native test-web test-e2e \
	test-examples test-crate test-types test-package test-package-dry test-web-and-crate

demo: setup-web pkg serve

# The page needs only the wasm toolchain and the npm packages.
setup-web:
	@scripts/setup.sh web

setup:
	@mkdir -p $(XDG_RUNTIME_DIR) && chmod 700 $(XDG_RUNTIME_DIR)
	@scripts/setup.sh all

# The page's wasm package (pkg/), optimised by wasm-opt from npm's binaryen.
pkg:
	wasm-pack build --release --target web --no-pack --out-dir pkg

# The same with the benchmark exports (cargo feature `bench`) that
# scripts/bench-browser.mjs and scripts/bench-dawn.mjs call; the page runs on it too.
# `make pkg` puts the production build back.
pkg-bench:
	wasm-pack build --release --target web --no-pack --out-dir pkg -- --features bench

serve:
	node www/serve.mjs --port $(PORT)

test: setup test-native test-examples test-web-and-crate test-e2e test-types test-package \
	test-package-dry

test-native:
	cargo fmt --check
	cargo test --release
	# The measurement tools the GPU suites pack (nothing else builds them here).
	cargo build --release --bench matmul_bench --bench gemm_ceiling --bench kernel_stats \
		--bench attention_timing --bench dispatch_overhead
	# The GEMM loop probes' WGSL, which only a GPU run would otherwise compile.
	cargo bench --bench gemm_ceiling -- --validate

# SwiftShader (a CPU Vulkan) runs WebGPU here: .cargo/config.toml gives each browser
# test time, so this is the command a user types.
test-web:
	wasm-pack test --headless --chrome --release

# Two test files at a time: a file spends about half its time waiting (page loads,
# timers, the worker's messages), so two keep a 2-core machine busy; every wait in
# them allows for it (measured: 525 s one at a time, 329 s two).
# The crate's checks beside the browser tests: those leave about half of a 2-core
# machine idle (SwiftShader compiles on one thread), and the checks are
# metadata-only builds that share nothing with the test builds, so one core of
# cargo in a target folder of their own (cargo locks a folder a build) takes them
# off the critical path. Their output follows the browser tests'.
test-web-and-crate:
	@mkdir -p target
	@CARGO_BUILD_JOBS=1 CARGO_TARGET_DIR=$(CURDIR)/target/crate-checks \
		$(MAKE) --no-print-directory test-crate > target/test-crate.log 2>&1 & checks=$$!; \
	$(MAKE) --no-print-directory test-web; web=$$?; \
	wait $$checks; checks=$$?; \
	echo "--- make test-crate, run beside test-web (exit $$checks):"; cat target/test-crate.log; \
	test $$web = 0 && test $$checks = 0

test-e2e: pkg
	node --test --test-concurrency=2 tests/e2e/

# The examples a library user starts from, run to the end (their asserts check the
# results); seconds on lavapipe.
test-examples:
	cargo run --release --example pool_in_wgpu
	cargo run --release --example train_custom_corpus

# The library without the CLI's dependencies (feature cli off), and its docs with
# warnings as errors on both targets docs.rs builds (wasm32 has the web module).
# Check and doc share one set of metadata-only dependency builds a target.
test-crate:
	cargo check --no-default-features --lib
	RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --no-default-features --lib
	RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --no-default-features --lib --target wasm32-unknown-unknown

# The package's TypeScript declarations against code that uses them (and against
# the declarations wasm-bindgen generates in pkg/).
test-types: pkg
	tsc -p tests/types

# npm pack, installed into a temporary project, embedded and trained in Chromium.
test-package: pkg
	node --test tests/package/

# What `cargo publish` and `npm publish` would ship: the file lists checked (no
# benchmark data, tests or fixtures; both licenses; the wasm in npm), the packed crate
# compiled from its own files (in test-crate's target folder: only the crate is
# checked again), both sizes printed.
test-package-dry: pkg
	scripts/check-packages.sh

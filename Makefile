# The two commands the README gives. Each installs what is missing first
# (scripts/setup.sh is idempotent and quiet when everything is there).
#   make demo   build the wasm package and serve the page on http://127.0.0.1:$(PORT)/
#   make test   native tests on the default adapter (lavapipe here), the same GPU tests
#               in headless Chromium (WebGPU), and the page's end-to-end tests
SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(CURDIR)/node_modules/.bin:$(PATH)
# lavapipe warns without it; harmless, but noisy
export XDG_RUNTIME_DIR ?= /tmp/tidepool-xdg
export CHROMEDRIVER ?= /usr/bin/chromedriver
PORT ?= 8000

.PHONY: demo test setup setup-web pkg serve test-native test-web test-e2e

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

serve:
	node www/serve.mjs --port $(PORT)

test: setup test-native test-web test-e2e

test-native:
	cargo test --release

# SwiftShader (a CPU Vulkan) runs WebGPU here: .cargo/config.toml gives each browser
# test time, so this is the command a user types.
test-web:
	wasm-pack test --headless --chrome --release

test-e2e: pkg
	node --test tests/e2e/

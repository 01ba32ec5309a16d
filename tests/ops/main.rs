//! Every op: its GPU kernels against its CPU reference (`tidepool::reference`), on
//! outputs drawn from NaN-poisoned pool buffers, natively and in headless Chromium;
//! and natively its reference's backward against finite differences of its
//! forward. One module an op, named as its kernel (`src/kernels/<op>.rs`) and its
//! reference (`src/reference/<op>.rs`); one test binary, to keep link time down.
//!
//! Tolerances are max |got - want| over max |want| (see `common::assert_close`). The
//! references accumulate in f64; the kernels in f32, so sums over k terms carry up
//! to about k * 6e-8 relative error in the worst case and far less on random data.

#[path = "../common/mod.rs"]
mod common;

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

mod support;

mod attention;
mod attention_coop;
mod crossentropy;
mod dropout;
mod embedding;
mod gelu;
mod layernorm;
mod matmul;
mod matmul_fused;
mod optimizer;
mod plan;
mod split_sums;
mod wgsl;

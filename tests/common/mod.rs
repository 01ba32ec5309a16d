//! Shared by the test files: one body runs natively (pollster) and in headless
//! Chromium (wasm-bindgen-test), plus helpers for parity checks.
#![allow(dead_code)]

use tidepool::{PooledBuffer, WgpuContext};

/// `gpu_test!(name, body())` makes `name` a native `#[test]` and a browser
/// `#[wasm_bindgen_test]`, both running the async `body()`.
#[macro_export]
macro_rules! gpu_test {
    ($name:ident, $body:expr) => {
        #[cfg(not(target_arch = "wasm32"))]
        #[test]
        fn $name() {
            pollster::block_on($body)
        }
        #[cfg(target_arch = "wasm32")]
        #[wasm_bindgen_test::wasm_bindgen_test]
        async fn $name() {
            $body.await
        }
    };
}

pub async fn context() -> WgpuContext {
    WgpuContext::new()
        .await
        .expect("a GPU context (lavapipe natively, WebGPU in the browser)")
}

/// Leaves a NaN-filled buffer of `len` floats on top of its pool bucket, so the next
/// `create_pooled` of that size (a kernel's output) gets it and any element the
/// kernel fails to write stays NaN.
pub fn poison_next_output(ctx: &WgpuContext, len: usize) {
    drop(ctx.upload_pooled(&vec![f32::NAN; len.max(1)]));
}

pub async fn read(ctx: &WgpuContext, buffer: &PooledBuffer, len: usize) -> Vec<f32> {
    ctx.download::<f32>(buffer, len).await.expect("download")
}

/// Largest |got - want| over the largest |want| (and 1e-6), with a message naming
/// the first non-finite or worst element.
pub fn max_rel_error(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len(), "length");
    if let Some(i) = got.iter().position(|x| !x.is_finite()) {
        panic!(
            "element {i} is {} (want {}): unwritten or overflowed",
            got[i], want[i]
        );
    }
    let scale = want.iter().fold(1e-6f32, |m, x| m.max(x.abs()));
    let worst = got
        .iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs())
        .fold(0.0f32, f32::max);
    worst / scale
}

#[track_caller]
pub fn assert_close(what: &str, got: &[f32], want: &[f32], tol: f32, seed: u64) {
    let err = max_rel_error(got, want);
    assert!(
        err <= tol,
        "{what}: max relative error {err:e} > {tol:e} (seed {seed}; replay natively with TIDEPOOL_SEED={seed})"
    );
}

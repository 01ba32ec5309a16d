//! Every GPU kernel against its CPU reference (`tidepool::reference`), on outputs
//! drawn from NaN-poisoned pool buffers, natively and in headless Chromium.

mod common;

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

// ---- kernels-b: matmul, attention ----
//
// Tolerances are max |got - want| over max |want| (`common::assert_close`); the
// references sum in f64, the kernels in f32.
// - matmul forward and dinp: 1e-5. Each output is one f32 dot product of k <= 1536
//   terms; on random data its rounding error is about sqrt(k) * 6e-8 of the largest
//   output (about 2e-6), and the bound leaves room for less lucky draws.
// - matmul dweight and dbias: 2e-5. Sums over up to 16384 rows: f32 partial sums
//   over splits of <= 2048 rows, added in f32; about sqrt(rows) * 6e-8 ~ 8e-6.
// - attention forward: 1e-5; backward: 2e-5. Online softmax rescales, the GPU's
//   exp and log (a few ulp), and for the backward a difference dp - D whose terms
//   are larger than the result.

mod kernels_b {
    pub use crate::common::{assert_close, context, read};
    use tidepool::WgpuContext;

    /// Leaves a NaN-filled pooled buffer of each of `lens` floats on its bucket,
    /// runs `launch`, and checks the launcher drew at least that many buffers from
    /// the pool. List the outputs last-created first, so that each pops its own.
    pub fn poisoned<R>(ctx: &WgpuContext, lens: &[usize], launch: impl FnOnce() -> R) -> R {
        // Alive together: two of one size must be two buffers.
        let held: Vec<_> = lens
            .iter()
            .map(|&len| ctx.upload_pooled(&vec![f32::NAN; len.max(1)]))
            .collect();
        drop(held);
        let hits = ctx.pool_stats().hits;
        let out = launch();
        assert!(
            ctx.pool_stats().hits >= hits + lens.len() as u64,
            "outputs drawn from the poisoned pool"
        );
        out
    }
}

use kernels_b::{assert_close, context, poisoned, read};
use tidepool::kernels::{attention_backward, attention_forward, matmul_backward, matmul_forward};
use tidepool::reference;
use tidepool::rng::{fresh_seed, Rng};

const MM_FWD_TOL: f32 = 1e-5;
const MM_DW_TOL: f32 = 2e-5;
const ATT_FWD_TOL: f32 = 1e-5;
const ATT_BWD_TOL: f32 = 2e-5;

/// (rows, k, n): tiny, none dividing the 128x128 tiles or the step of 8, and GPT-2
/// layer shapes natively.
#[cfg(not(target_arch = "wasm32"))]
const MM_SHAPES: &[(usize, usize, usize)] = &[
    (1, 1, 1),
    (7, 13, 5),
    (130, 67, 33),
    (129, 9, 257),
    (256, 384, 1152),
    (300, 1536, 384),
    (512, 384, 65),
];
#[cfg(target_arch = "wasm32")]
const MM_SHAPES: &[(usize, usize, usize)] = &[
    (1, 1, 1),
    (7, 13, 5),
    (130, 67, 33),
    (129, 9, 257),
    (64, 96, 160),
];

gpu_test!(matmul_forward_matches_reference, matmul_forward_body());
async fn matmul_forward_body() {
    let ctx = context().await;
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for &(rows, k, n) in MM_SHAPES {
        let inp = rng.vec(rows * k, -1.0, 1.0);
        let weight = rng.vec(n * k, -1.0, 1.0);
        let bias = rng.vec(n, -1.0, 1.0);
        let (g_inp, g_w, g_b) = (ctx.upload(&inp), ctx.upload(&weight), ctx.upload(&bias));
        for with_bias in [false, true] {
            let out = poisoned(&ctx, &[rows * n], || {
                matmul_forward(&ctx, &g_inp, &g_w, with_bias.then_some(&g_b), rows, k, n)
            });
            let got = read(&ctx, &out, rows * n).await;
            let want = reference::matmul_forward(
                &inp,
                &weight,
                with_bias.then_some(&bias[..]),
                rows,
                k,
                n,
            );
            let what = format!("matmul_forward {rows}x{k}x{n} bias {with_bias}");
            assert_close(&what, &got, &want, MM_FWD_TOL, seed);
        }
    }
}

gpu_test!(matmul_backward_matches_reference, matmul_backward_body());
async fn matmul_backward_body() {
    let ctx = context().await;
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    // Plus shapes whose weight gradients reduce over many rows (split, summed, and
    // checked to give the same bits on a rerun).
    #[cfg(not(target_arch = "wasm32"))]
    let many: &[(usize, usize, usize)] = &[(4099, 20, 12), (16384, 9, 70)];
    #[cfg(target_arch = "wasm32")]
    let many: &[(usize, usize, usize)] = &[(2051, 20, 12)];
    for &(rows, k, n) in MM_SHAPES.iter().chain(many) {
        let dout = rng.vec(rows * n, -1.0, 1.0);
        let inp = rng.vec(rows * k, -1.0, 1.0);
        let weight = rng.vec(n * k, -1.0, 1.0);
        let (g_dout, g_inp, g_w) = (ctx.upload(&dout), ctx.upload(&inp), ctx.upload(&weight));
        let (want_dinp, want_dw, want_db) =
            reference::matmul_backward(&dout, &inp, &weight, rows, k, n, true);
        for with_bias in [false, true] {
            let lens: &[usize] = if with_bias {
                &[n, n * k, rows * k]
            } else {
                &[n * k, rows * k]
            };
            let (dinp, dw, db) = poisoned(&ctx, lens, || {
                matmul_backward(&ctx, &g_dout, &g_inp, &g_w, rows, k, n, with_bias)
            });
            let what = format!("{rows}x{k}x{n} bias {with_bias}");
            let got = read(&ctx, &dinp, rows * k).await;
            assert_close(&format!("dinp {what}"), &got, &want_dinp, MM_FWD_TOL, seed);
            let got_dw = read(&ctx, &dw, n * k).await;
            assert_close(
                &format!("dweight {what}"),
                &got_dw,
                &want_dw,
                MM_DW_TOL,
                seed,
            );
            assert_eq!(db.is_some(), with_bias);
            let got_db = match db {
                Some(db) => read(&ctx, &db, n).await,
                None => Vec::new(),
            };
            if with_bias {
                let want = want_db.as_ref().expect("reference dbias");
                assert_close(&format!("dbias {what}"), &got_db, want, MM_DW_TOL, seed);
            }
            // The split reductions add partials in a fixed order: same bits again.
            if many.contains(&(rows, k, n)) {
                let (_, dw2, db2) =
                    matmul_backward(&ctx, &g_dout, &g_inp, &g_w, rows, k, n, with_bias);
                assert_eq!(
                    read(&ctx, &dw2, n * k).await,
                    got_dw,
                    "dweight {what} rerun"
                );
                if let Some(db2) = db2 {
                    assert_eq!(read(&ctx, &db2, n).await, got_db, "dbias {what} rerun");
                }
            }
        }
    }
}

/// (b, t, c, nh) per compiled head-size variant (hs <= 16, <= 64, <= 128): t not a
/// multiple of any block (1, 5, 33, 67, 70, 100, 129, 130), head sizes 4, 8, 12, 16,
/// 64, 96, 128, and GPT-2's layer natively. The browser (SwiftShader) gets smaller
/// shapes and skips the hs <= 128 variant: the same template as hs <= 64 with a
/// larger HS4, whose pipelines take SwiftShader about ten seconds to compile.
#[cfg(not(target_arch = "wasm32"))]
const ATT_SMALL_HEADS: &[(usize, usize, usize, usize)] =
    &[(1, 1, 4, 1), (2, 5, 16, 2), (1, 33, 32, 2), (2, 70, 36, 3)];
#[cfg(target_arch = "wasm32")]
const ATT_SMALL_HEADS: &[(usize, usize, usize, usize)] =
    &[(1, 1, 4, 1), (2, 5, 16, 2), (1, 33, 32, 2)];
#[cfg(not(target_arch = "wasm32"))]
const ATT_HS64: &[(usize, usize, usize, usize)] =
    &[(2, 100, 128, 2), (1, 130, 64, 1), (2, 256, 384, 6)];
#[cfg(target_arch = "wasm32")]
const ATT_HS64: &[(usize, usize, usize, usize)] = &[(1, 3, 64, 1), (1, 67, 128, 2)];

gpu_test!(
    attention_small_heads_match_reference,
    attention_body(ATT_SMALL_HEADS)
);
gpu_test!(attention_hs64_matches_reference, attention_body(ATT_HS64));
#[cfg(not(target_arch = "wasm32"))]
gpu_test!(
    attention_hs128_matches_reference,
    attention_body(&[(1, 70, 192, 2), (1, 129, 128, 1)])
);

async fn attention_body(shapes: &[(usize, usize, usize, usize)]) {
    let ctx = context().await;
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for &(b, t, c, nh) in shapes {
        // Spread like trained activations: scores of a few units, peaked softmaxes.
        let qkv = rng.vec(b * t * 3 * c, -2.0, 2.0);
        let dout = rng.vec(b * t * c, -1.0, 1.0);
        let (g_qkv, g_dout) = (ctx.upload(&qkv), ctx.upload(&dout));
        let (out, saved) = poisoned(&ctx, &[b * nh * t, b * t * c], || {
            attention_forward(&ctx, &g_qkv, b, t, c, nh)
        });
        let (want_out, att) = reference::attention_forward(&qkv, b, t, c, nh);
        let what = format!("b {b} t {t} c {c} nh {nh}");
        let got = read(&ctx, &out, b * t * c).await;
        assert_close(
            &format!("attention_forward {what}"),
            &got,
            &want_out,
            ATT_FWD_TOL,
            seed,
        );

        let dqkv = poisoned(&ctx, &[b * nh * t, b * t * 3 * c], || {
            attention_backward(&ctx, &g_dout, &g_qkv, &out, &saved, b, t, c, nh)
        });
        let got = read(&ctx, &dqkv, b * t * 3 * c).await;
        let want = reference::attention_backward(&dout, &qkv, &att, b, t, c, nh);
        assert_close(
            &format!("attention_backward {what}"),
            &got,
            &want,
            ATT_BWD_TOL,
            seed,
        );
    }
}

//! The matmuls of a `Linear` layer, every f32 variant, against the reference;
//! the reference's backward against finite differences. Fusions are in
//! `matmul_fused`, sums of split partials in `split_sums`, the f16 variants in
//! tests/matmul_f16.rs.

use crate::common::fresh_seed;
use crate::gpu_test;
use crate::support::*;
use tidepool::kernels::{Fusion, Matmul, MatmulVariant};
use tidepool::reference::{self, MatmulShape};
use tidepool::rng::Rng;

// Tolerances are max |got - want| over max |want| (`common::assert_close`); the
// references sum in f64, the kernels in f32.
// - forward and dinp: 1e-5. Each output is one f32 dot product of k <= 1536
//   terms; on random data its rounding error is about sqrt(k) * 6e-8 of the
//   largest output (about 2e-6), and the bound leaves room for less lucky draws.
// - dweight and dbias: 2e-5. Sums over up to 16384 rows: f32 partial sums over
//   splits of <= 2048 rows, added in f32; about sqrt(rows) * 6e-8 ~ 8e-6.
const MM_FWD_TOL: f32 = 1e-5;
const MM_DW_TOL: f32 = 2e-5;

/// (rows, k, n): tiny, none dividing any variant's tiles (128x128, 8x64) or the
/// step of 8, reductions long enough to split (k >= 256: split-K in 2 or 3),
/// and GPT-2 layer shapes natively.
#[cfg(not(target_arch = "wasm32"))]
const MM_SHAPES: &[(usize, usize, usize)] = &[
    (1, 1, 1),
    (7, 13, 5),
    (130, 67, 33),
    (129, 9, 257),
    (256, 384, 1152),
    (300, 1536, 384),
    (512, 384, 65),
    // Whole tiles (the tiled cores' unguarded vec4 loads) with an odd count of
    // 8-deep steps: in the forward (k = 136) and in dweight's splits (216 rows in
    // chunks of 56, the last shorter).
    (256, 136, 128),
    (216, 128, 256),
    // A reduction past MAX_SPLIT_STEPS (a wide vocabulary's dinp): split whatever
    // the variant, since a driver may cut a loop that long short.
    (9, 70_001, 17),
];
#[cfg(target_arch = "wasm32")]
const MM_SHAPES: &[(usize, usize, usize)] = &[
    (1, 1, 1),
    (7, 13, 5),
    (130, 67, 33),
    (129, 9, 257),
    (64, 96, 160),
    (33, 300, 65),
    // A whole 128x128 tile and whole 8-deep steps inside every product, all
    // multiples of 4.
    (132, 136, 136),
    (9, 70_001, 17),
];

/// A fresh random non-power-of-two shape (rows, k, n) for each test run, on top
/// of the fixed ones.
fn random_shape(rng: &mut Rng) -> (usize, usize, usize) {
    (odd(rng, 300), odd(rng, 600), odd(rng, 600))
}

gpu_test!(matmul_forward_matches_reference, forward_body());
async fn forward_body() {
    let ctx = context().await;
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    let extra = random_shape(&mut rng);
    for &(rows, k, n) in MM_SHAPES.iter().chain([&extra]) {
        let inp = rng.vec(rows * k, -1.0, 1.0);
        let weight = rng.vec(n * k, -1.0, 1.0);
        let bias = rng.vec(n, -1.0, 1.0);
        let (g_inp, g_w, g_b) = (ctx.upload(&inp), ctx.upload(&weight), ctx.upload(&bias));
        let shape = MatmulShape { rows, k, n };
        for variant in MatmulVariant::ALL {
            for with_bias in [false, true] {
                let out = poisoned(&ctx, &[rows * n], || {
                    let x = linear(&g_inp, &g_w, with_bias.then_some(&g_b));
                    by(variant, Fusion::default()).forward(&ctx, x, shape)
                });
                let got = read(&ctx, &out, rows * n).await;
                let want =
                    reference::matmul_forward(&inp, &weight, with_bias.then_some(&bias[..]), shape);
                let what = format!("matmul_forward {variant:?} {rows}x{k}x{n} bias {with_bias}");
                assert_close(&what, &got, &want, MM_FWD_TOL, seed);
            }
        }
    }
}

// Where a dispatch binds every buffer read_write, repeated bindings get stand-ins
// (gpu/recording.rs), the GEMMs' vec4 views among them: a launch whose every tile is
// whole must then take the guarded loads (`fuse::WHOLE_TILES` left off). Whole tiles
// of 128 and 64 in every product of this shape.
gpu_test!(
    matmul_with_read_write_bindings_matches_reference,
    read_write_body()
);
async fn read_write_body() {
    let options = tidepool::ContextOptions {
        read_write_bindings: true,
        ..Default::default()
    };
    let ctx = tidepool::WgpuContext::with_options(options)
        .await
        .expect("a context");
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    let (rows, k, n) = (256, 136, 128);
    let inp = rng.vec(rows * k, -1.0, 1.0);
    let weight = rng.vec(n * k, -1.0, 1.0);
    let (g_inp, g_w) = (ctx.upload(&inp), ctx.upload(&weight));
    let shape = MatmulShape { rows, k, n };
    let want = reference::matmul_forward(&inp, &weight, None, shape);
    for variant in MatmulVariant::ALL {
        let out = poisoned(&ctx, &[rows * n], || {
            by(variant, Fusion::default()).forward(&ctx, linear(&g_inp, &g_w, None), shape)
        });
        let got = read(&ctx, &out, rows * n).await;
        let what = format!("read_write matmul_forward {variant:?} {rows}x{k}x{n}");
        assert_close(&what, &got, &want, MM_FWD_TOL, seed);
    }
    assert!(
        ctx.counters().read_write_dispatches > 0,
        "no dispatch bound read_write"
    );
}

gpu_test!(matmul_backward_matches_reference, backward_body());
/// Each variant's dinp and dweight, then `matmul_backward` as the model calls it
/// (with dbias).
async fn backward_body() {
    let ctx = context().await;
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    // Plus shapes whose weight gradients reduce over many rows (split, summed, and
    // checked to give the same bits on a rerun).
    #[cfg(not(target_arch = "wasm32"))]
    let many: &[(usize, usize, usize)] = &[(4099, 20, 12), (16384, 9, 70)];
    #[cfg(target_arch = "wasm32")]
    let many: &[(usize, usize, usize)] = &[(2051, 20, 12)];
    let extra = random_shape(&mut rng);
    for &(rows, k, n) in MM_SHAPES.iter().chain(many).chain([&extra]) {
        let dout = rng.vec(rows * n, -1.0, 1.0);
        let inp = rng.vec(rows * k, -1.0, 1.0);
        let weight = rng.vec(n * k, -1.0, 1.0);
        let (g_dout, g_inp, g_w) = (ctx.upload(&dout), ctx.upload(&inp), ctx.upload(&weight));
        // The backward reads no bias: it only makes the bias's gradient.
        let g_b = ctx.upload(&vec![0.0f32; n]);
        let shape = MatmulShape { rows, k, n };
        let (want_dinp, want_dw, want_db) =
            reference::matmul_backward(&dout, &inp, &weight, shape, true);
        for variant in MatmulVariant::ALL {
            let what = format!("{variant:?} {rows}x{k}x{n}");
            let op = by(variant, Fusion::default());
            let plain = linear(&g_inp, &g_w, None);
            let dinp = poisoned(&ctx, &[rows * k], || op.dinp(&ctx, &g_dout, plain, shape));
            let got = read(&ctx, &dinp, rows * k).await;
            assert_close(&format!("dinp {what}"), &got, &want_dinp, MM_FWD_TOL, seed);
            let dw = poisoned(&ctx, &[n * k], || {
                op.weight_grads(&ctx, &g_dout, plain, shape).0
            });
            let got_dw = read(&ctx, &dw, n * k).await;
            assert_close(
                &format!("dweight {what}"),
                &got_dw,
                &want_dw,
                MM_DW_TOL,
                seed,
            );
            // The split reductions add partials in a fixed order: same bits again.
            if many.contains(&(rows, k, n)) {
                let dw2 = op.weight_grads(&ctx, &g_dout, plain, shape).0;
                assert_eq!(
                    read(&ctx, &dw2, n * k).await,
                    got_dw,
                    "dweight {what} rerun"
                );
            }
            // With the bias: Tiled, SplitK and Narrow sum dbias in dweight's own pass.
            let (dw, db) = poisoned(&ctx, &[n, n * k], || {
                let x = linear(&g_inp, &g_w, Some(&g_b));
                let (dw, db) = op.weight_grads(&ctx, &g_dout, x, shape);
                (dw, db.expect("dbias asked for"))
            });
            let got_dw_b = read(&ctx, &dw, n * k).await;
            assert_eq!(got_dw_b, got_dw, "dweight {what} with its bias's sums");
            let got_db = read(&ctx, &db, n).await;
            let want = want_db.as_ref().expect("reference dbias");
            assert_close(&format!("dbias {what}"), &got_db, want, MM_DW_TOL, seed);
        }
        for with_bias in [false, true] {
            let lens: &[usize] = if with_bias {
                &[n, n * k, rows * k]
            } else {
                &[n * k, rows * k]
            };
            let x = linear(&g_inp, &g_w, with_bias.then_some(&g_b));
            let (dinp, dw, db) = poisoned(&ctx, lens, || {
                Matmul::default().backward(&ctx, &g_dout, x, shape)
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
            if let Some(db) = db {
                let got_db = read(&ctx, &db, n).await;
                let want = want_db.as_ref().expect("reference dbias");
                assert_close(&format!("dbias {what}"), &got_db, want, MM_DW_TOL, seed);
                if many.contains(&(rows, k, n)) {
                    let (_, _, db2) = Matmul::default().backward(&ctx, &g_dout, x, shape);
                    let db2 = db2.expect("dbias");
                    assert_eq!(read(&ctx, &db2, n).await, got_db, "dbias {what} rerun");
                }
            }
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
#[test]
fn matmul_backward_reference_matches_finite_differences() {
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for (rows, k, n) in [(1, 1, 1), (3, 4, 5), (6, 3, 2)] {
        let shape = MatmulShape { rows, k, n };
        let inp = normals(&mut rng, rows * k, 1.0);
        let weight = normals(&mut rng, n * k, 1.0);
        let bias = normals(&mut rng, n, 1.0);
        let w = normals(&mut rng, rows * n, 1.0);
        let (dinp, dweight, dbias) = reference::matmul_backward(&w, &inp, &weight, shape, true);
        let dbias = dbias.expect("with_bias gives dbias");
        let (_, _, none) = reference::matmul_backward(&w, &inp, &weight, shape, false);
        assert!(none.is_none());
        // Linear in each argument: the differences are exact but for f32 rounding of
        // the outputs (about 6e-8 of each, over a step of 1e-2).
        let tol = 1e-4;
        let size = format!("{rows}x{k}x{n}");
        assert_fd(
            &format!("dinp {size}"),
            seed,
            &inp,
            &dinp,
            (1e-2, tol),
            |x| {
                dot(
                    &reference::matmul_forward(x, &weight, Some(&bias), shape),
                    &w,
                )
            },
        );
        assert_fd(
            &format!("dweight {size}"),
            seed,
            &weight,
            &dweight,
            (1e-2, tol),
            |x| dot(&reference::matmul_forward(&inp, x, Some(&bias), shape), &w),
        );
        assert_fd(
            &format!("dbias {size}"),
            seed,
            &bias,
            &dbias,
            (1e-2, tol),
            |x| {
                dot(
                    &reference::matmul_forward(&inp, &weight, Some(x), shape),
                    &w,
                )
            },
        );
    }
}

//! The matmuls with elementwise work fused into their loads and stores (GELU on
//! the input and its gradient, a residual branch's dropout and add), every f32
//! variant, against the reference's compositions.

use crate::common::{assert_close_against, fresh_seed};
use crate::gpu_test;
use crate::support::*;
use tidepool::kernels::{Fusion, Matmul, MatmulVariant};
use tidepool::reference::{self, DropoutMask, MatmulShape};
use tidepool::rng::Rng;
use tidepool::WgpuContext;

// The plain matmuls' tolerances (see `matmul`): the fused GELU and its gradient
// add an elementwise f32 error of a few ulp to each operand or output.
const FWD_TOL: f32 = 1e-5;
const DW_TOL: f32 = 2e-5;

/// (rows, k, n): none a multiple of any tile or of 8, reductions long enough to
/// split (k or n >= 256) in the split-K variant, the MLP projection's shape at
/// width 48, and a fresh random non-power-of-two shape each run.
fn shapes(rng: &mut Rng) -> Vec<(usize, usize, usize)> {
    let mut shapes = vec![
        (1, 1, 1),
        (7, 13, 5),
        (130, 67, 33),
        (129, 9, 257),
        (66, 192, 48),
    ];
    if cfg!(not(target_arch = "wasm32")) {
        shapes.push((300, 1536, 384));
    }
    shapes.push((odd(rng, 300), odd(rng, 600), odd(rng, 600)));
    shapes
}

/// Pre-activation inputs spread over GELU's curve (|x| up to ~10).
fn pre_gelu(rng: &mut Rng, n: usize) -> Vec<f32> {
    normals(rng, n, 2.5)
}

/// Buffers to poison for a launch that writes `out` floats, after a transient
/// GELU of `act` floats (0: none) in the variant that makes one.
fn outputs(variant: MatmulVariant, out: usize, act: usize) -> Vec<usize> {
    match variant {
        v if v.is_cpu() && act > 0 => vec![out, act],
        _ => vec![out],
    }
}

gpu_test!(matmul_gelu_forward_matches_reference, gelu_forward_body());
/// `inp` through GELU as it is loaded (the MLP's c_proj), every variant, with and
/// without bias.
async fn gelu_forward_body() {
    let ctx = context().await;
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for (rows, k, n) in shapes(&mut rng) {
        let inp = pre_gelu(&mut rng, rows * k);
        let weight = rng.vec(n * k, -1.0, 1.0);
        let bias = rng.vec(n, -1.0, 1.0);
        let (g_inp, g_w, g_b) = (ctx.upload(&inp), ctx.upload(&weight), ctx.upload(&bias));
        let shape = MatmulShape { rows, k, n };
        for variant in MatmulVariant::ALL {
            for with_bias in [false, true] {
                let out = poisoned(&ctx, &outputs(variant, rows * n, rows * k), || {
                    let x = linear(&g_inp, &g_w, with_bias.then_some(&g_b));
                    by(variant, gelu_inp()).forward(&ctx, x, shape)
                });
                let got = read(&ctx, &out, rows * n).await;
                let b = with_bias.then_some(&bias[..]);
                let want = reference::matmul_forward_act(&inp, &weight, b, shape, true);
                let what = format!("gelu forward {variant:?} {rows}x{k}x{n} bias {with_bias}");
                assert_close(&what, &got, &want, FWD_TOL, seed);
            }
        }
    }
}

gpu_test!(matmul_gelu_backward_matches_reference, gelu_backward_body());
/// dinp times gelu'(inp) in the epilogue (after the split sum in split-K), dweight
/// of GELU(inp) on load, each variant, then `matmul_backward_fused` as the model
/// calls it.
async fn gelu_backward_body() {
    let ctx = context().await;
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for (rows, k, n) in shapes(&mut rng) {
        let dout = rng.vec(rows * n, -1.0, 1.0);
        let inp = pre_gelu(&mut rng, rows * k);
        let weight = rng.vec(n * k, -1.0, 1.0);
        let (g_dout, g_inp, g_w) = (ctx.upload(&dout), ctx.upload(&inp), ctx.upload(&weight));
        // The backward reads no bias: it only makes the bias's gradient.
        let g_b = ctx.upload(&vec![0.0f32; n]);
        let shape = MatmulShape { rows, k, n };
        let (want_dinp, want_dw, want_db) =
            reference::matmul_backward_act(&dout, &inp, &weight, shape, true, true);
        let plain = linear(&g_inp, &g_w, None);
        for variant in MatmulVariant::ALL {
            let what = format!("{variant:?} {rows}x{k}x{n}");
            let op = by(variant, gelu_inp());
            let dinp = poisoned(&ctx, &[rows * k], || op.dinp(&ctx, &g_dout, plain, shape));
            let got = read(&ctx, &dinp, rows * k).await;
            assert_close(
                &format!("gelu dinp {what}"),
                &got,
                &want_dinp,
                FWD_TOL,
                seed,
            );
            let dw = poisoned(&ctx, &outputs(variant, n * k, rows * k), || {
                op.weight_grads(&ctx, &g_dout, plain, shape).0
            });
            let got = read(&ctx, &dw, n * k).await;
            assert_close(
                &format!("gelu dweight {what}"),
                &got,
                &want_dw,
                DW_TOL,
                seed,
            );
        }
        let op = Matmul {
            variant: None,
            fusion: gelu_inp(),
        };
        let (dinp, dw, db) = op.backward(&ctx, &g_dout, linear(&g_inp, &g_w, Some(&g_b)), shape);
        let what = format!("backward with GELU {rows}x{k}x{n}");
        let got = read(&ctx, &dinp, rows * k).await;
        assert_close(&format!("dinp, {what}"), &got, &want_dinp, FWD_TOL, seed);
        let got = read(&ctx, &dw, n * k).await;
        assert_close(&format!("dweight, {what}"), &got, &want_dw, DW_TOL, seed);
        let got = read(&ctx, &db.expect("with bias"), n).await;
        let want = want_db.expect("reference dbias");
        assert_close(&format!("dbias, {what}"), &got, &want, DW_TOL, seed);
    }
}

gpu_test!(residual_branch_forward_matches_reference, branch_body());
/// `resid + dropout(act(inp) · wᵀ + bias)` (both branch ends of a block), every
/// variant, with and without GELU on load and dropout; split-K applies the
/// epilogue after its sum.
async fn branch_body() {
    let ctx = context().await;
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for (rows, k, n) in shapes(&mut rng) {
        let inp = pre_gelu(&mut rng, rows * k);
        let weight = rng.vec(n * k, -1.0, 1.0);
        let bias = rng.vec(n, -1.0, 1.0);
        let resid = rng.vec(rows * n, -3.0, 3.0);
        let g = |x: &[f32]| ctx.upload(x);
        let (g_inp, g_w, g_b, g_r) = (g(&inp), g(&weight), g(&bias), g(&resid));
        let shape = MatmulShape { rows, k, n };
        for variant in MatmulVariant::ALL {
            for (gelu_inp, p) in [(false, 0.0), (true, 0.0), (false, 0.3), (true, 0.15)] {
                let mask = (p > 0.0).then(|| DropoutMask {
                    p,
                    seed: rng.next_u64() as u32,
                });
                let fusion = Fusion {
                    gelu_inp,
                    dropout: mask,
                    residual: Some(&g_r),
                };
                let act = if gelu_inp { rows * k } else { 0 };
                let out = poisoned(&ctx, &outputs(variant, rows * n, act), || {
                    let x = linear(&g_inp, &g_w, Some(&g_b));
                    by(variant, fusion).forward(&ctx, x, shape)
                });
                let got = read(&ctx, &out, rows * n).await;
                let weights = (&weight[..], &bias[..]);
                let want = reference::residual_branch_forward(
                    &resid, &inp, weights, shape, gelu_inp, mask,
                );
                let what = format!("branch {variant:?} {rows}x{k}x{n} gelu {gelu_inp} {mask:?}");
                // resid + branch can cancel far below either (seed 1796552811626326295:
                // 1x1x1, the product's rounding 1.1e-4 of the sum), so the error is
                // measured against the terms' size.
                let terms = want
                    .iter()
                    .zip(&resid)
                    .fold(0.0f32, |m, (w, r)| m.max(r.abs() + (w - r).abs()));
                assert_close_against(&what, &got, &want, terms, FWD_TOL, seed);
            }
        }
    }
}

gpu_test!(residual_branch_dropout_mask_is_exact, exact_mask_body());
/// With a weight that picks one input column per output (one-hot rows: every sum
/// is exact, split or not), `resid + dropout(x + bias)` must equal the reference
/// bit for bit: the same mask elements, the same f32 rounding, in every variant,
/// column by column (n = 67) and 4 columns a vec4 (n = 68, `fuse::OUT_VEC4`).
async fn exact_mask_body() {
    let ctx = context().await;
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for n in [67, 68] {
        exact_mask_of_width(&ctx, &mut rng, seed, n).await;
    }
}

async fn exact_mask_of_width(ctx: &WgpuContext, rng: &mut Rng, seed: u64, n: usize) {
    let (rows, k) = (301, 300);
    let inp = normals(rng, rows * k, 1.0);
    let mut weight = vec![0.0f32; n * k];
    for j in 0..n {
        weight[j * k + (j * 7 + 3) % k] = 1.0;
    }
    let bias = normals(rng, n, 1.0);
    let resid = normals(rng, rows * n, 1.0);
    let g = |x: &[f32]| ctx.upload(x);
    let (g_inp, g_w, g_b, g_r) = (g(&inp), g(&weight), g(&bias), g(&resid));
    let shape = MatmulShape { rows, k, n };
    for variant in MatmulVariant::ALL {
        for p in [0.1f32, 0.5] {
            let mask = Some(DropoutMask {
                p,
                seed: rng.next_u64() as u32,
            });
            let fusion = Fusion {
                gelu_inp: false,
                dropout: mask,
                residual: Some(&g_r),
            };
            let out = poisoned(ctx, &[rows * n], || {
                let x = linear(&g_inp, &g_w, Some(&g_b));
                by(variant, fusion).forward(ctx, x, shape)
            });
            let got = read(ctx, &out, rows * n).await;
            let want = reference::residual_branch_forward(
                &resid,
                &inp,
                (&weight, &bias),
                shape,
                false,
                mask,
            );
            assert_eq!(got, want, "{variant:?} n {n} p {p} (seed {seed})");
        }
    }
}

/// GELU and its slope at `x` through a fused 1-wide product by 1.0 (exact): the
/// forward of [rows, 1] x [1, 1] and the dinp of a [rows, 1] gradient of ones.
async fn gelu_through_matmul(
    ctx: &WgpuContext,
    variant: MatmulVariant,
    x: &[f32],
) -> (Vec<f32>, Vec<f32>) {
    let rows = x.len();
    let (gx, one, ones) = (
        ctx.upload(x),
        ctx.upload(&[1.0f32]),
        ctx.upload(&vec![1.0f32; rows]),
    );
    let op = by(variant, gelu_inp());
    let shape = MatmulShape { rows, k: 1, n: 1 };
    let out = op.forward(ctx, linear(&gx, &one, None), shape);
    let dx = op.dinp(ctx, &ones, linear(&gx, &one, None), shape);
    (read(ctx, &out, rows).await, read(ctx, &dx, rows).await)
}

gpu_test!(gelu_is_finite_and_right_at_extremes, extremes_body());
/// Large |x| (where tanh through exp overflows) checked element by element,
/// relative to max(|want|, 1), in every variant.
async fn extremes_body() {
    let ctx = context().await;
    let x: Vec<f32> = [
        0.0, 1e-6, 5.0, 9.0, 10.5, 30.0, 100.0, 1e4, 1e13, 1e20, 3e38,
    ]
    .iter()
    .flat_map(|&v: &f32| [v, -v])
    .collect();
    let ones = vec![1.0f32; x.len()];
    let (want_out, want_dx) = (
        reference::gelu_forward(&x),
        reference::gelu_backward(&x, &ones),
    );
    for variant in MatmulVariant::ALL {
        let (got_out, got_dx) = gelu_through_matmul(&ctx, variant, &x).await;
        for i in 0..x.len() {
            for (what, g, w) in [
                ("forward", got_out[i], want_out[i]),
                ("backward", got_dx[i], want_dx[i]),
            ] {
                let err = (g - w).abs() / w.abs().max(1.0);
                assert!(
                    err <= 1e-5,
                    "{variant:?} gelu {what} at {}: got {g}, want {w}",
                    x[i]
                );
            }
        }
    }
}

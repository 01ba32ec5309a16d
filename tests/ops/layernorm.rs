//! LayerNorm: the GPU kernels against the reference (forward, backward, the
//! backward fused with the residual stream and a dropout mask), the reference's
//! backward against finite differences.

use crate::common::fresh_seed;
use crate::gpu_test;
use crate::support::*;
use tidepool::kernels::{LayerNorm, LayerNormSaved, Target};
use tidepool::reference::{self as cpu, DropoutMask, LayerNormShape};
use tidepool::rng::Rng;

/// (rows, c): every pairing of rows {1, 7, 130} and c {3, 48, 130, 384}, plus
/// natively a training-sized one whose rows are not a multiple of the 64-row chunk.
/// Fixed shapes plus fresh random ones, never a power of two: one with more than 4
/// row chunks of 64 so the weight gradients' unrolled loops and their tails both
/// run on every target, and two past the 4096 rows whose weight gradients GPUs sum
/// in one pass, so that every way runs on GPUs (rows of whole vec4s held in
/// registers on GPUs with subgroups).
fn shapes(rng: &mut Rng) -> Vec<(usize, usize)> {
    let mut shapes: Vec<_> = [1, 7, 130]
        .iter()
        .flat_map(|&r| [3, 48, 130, 384].map(|c| (r, c)))
        .collect();
    shapes.push((257 + 2 * rng.below(200), 3 + 2 * rng.below(200)));
    // Past the 4096 rows that GPUs sum in one pass, narrow enough for the browser:
    // one of odd width, one of whole vec4s (4 times an odd number, never a power of
    // two), which GPUs with subgroups hold in registers.
    shapes.push((4097 + 2 * rng.below(300), 3 + 2 * rng.below(10)));
    shapes.push((4097 + 2 * rng.below(300), 4 * (3 + 2 * rng.below(10))));
    if cfg!(not(target_arch = "wasm32")) {
        shapes.push((16_000 + 37, 384));
    }
    shapes
}

/// Lengths of the buffers a backward draws from the pool: dinp, with a mask its
/// masked copy, the weight gradients' scratch where they take two passes, dweight
/// and dbias.
fn outputs(
    ctx: &tidepool::WgpuContext,
    target: Target,
    rows: usize,
    c: usize,
    masked: bool,
) -> Vec<usize> {
    let op = LayerNorm {
        target: Some(target),
        ..Default::default()
    };
    let scratch = op.backward_scratch(ctx, LayerNormShape { rows, c });
    let mut lens = vec![rows * c];
    lens.extend(masked.then_some(rows * c));
    lens.extend((scratch > 0).then_some(scratch));
    lens.extend([c, c]);
    lens
}

/// The largest term of layernorm's input gradient: dinp = rstd * (g - mean(g) -
/// xhat * mean(g * xhat)), g = dout * w. At small c the three can cancel to far
/// below their size, so dinp's error is measured against rstd * |g|, not the result.
fn dinp_terms(dout: &[f32], w: &[f32], rstd: &[f32], c: usize) -> f32 {
    (0..dout.len())
        .map(|i| (rstd[i / c] * dout[i] * w[i % c]).abs())
        .fold(0.0f32, f32::max)
}

/// Every element within 1e-5 of `terms` (see [`dinp_terms`]) of the reference.
fn assert_close_to_terms(what: &str, got: &[f32], want: &[f32], terms: f32, seed: u64) {
    let err = got
        .iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs())
        .fold(0.0f32, f32::max);
    assert!(
        got.len() == want.len() && got.iter().all(|x| x.is_finite()) && err <= 1e-5 * terms,
        "{what}: max error {err:e} > 1e-5 of the largest term {terms:e} (seed {seed}; replay natively with TIDEPOOL_SEED={seed})"
    );
}

/// Inputs with a per-row offset (so the mean matters) and non-trivial weights.
fn inputs(rng: &mut Rng, rows: usize, c: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let mut inp = normals(rng, rows * c, 1.0);
    for r in 0..rows {
        let shift = rng.range(-3.0, 3.0);
        inp[r * c..(r + 1) * c].iter_mut().for_each(|x| *x += shift);
    }
    (inp, rng.vec(c, 0.5, 1.5), rng.vec(c, -0.5, 0.5))
}

gpu_test!(layernorm_forward_matches_reference, forward_body());
/// Tolerance 1e-5: f32 sums over c <= 384 terms and one rsqrt per row.
async fn forward_body() {
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for (reductions, ctx) in reduction_contexts().await {
        for (rows, c) in shapes(&mut rng) {
            for target in Target::ALL {
                let (inp, w, bias) = inputs(&mut rng, rows, c);
                let (gi, gw, gb) = (ctx.upload(&inp), ctx.upload(&w), ctx.upload(&bias));
                let shape = LayerNormShape { rows, c };
                let op = LayerNorm {
                    target: Some(target),
                    ..Default::default()
                };
                let (out, mean, rstd) = poisoned(&ctx, &[rows * c, rows, rows], || {
                    op.forward(&ctx, &gi, &gw, &gb, shape)
                });
                let (want_out, want_mean, want_rstd) =
                    cpu::layernorm_forward(&inp, &w, &bias, shape);
                let what = format!("{reductions}, {target:?} kernels, rows {rows} c {c}");
                // Measured against the size of its terms, x * rstd * w: at c = 3 a
                // row's spread can be small next to its offset, so x - mean loses
                // digits that rstd then scales up, as any f32 order of sums does.
                let terms = (0..rows * c)
                    .map(|i| (inp[i] * want_rstd[i / c] * w[i % c]).abs())
                    .fold(0.0f32, f32::max);
                let got = read(&ctx, &out, rows * c).await;
                assert_close_floor(&format!("out, {what}"), &got, &want_out, 1e-5, terms, seed);
                // The mean too, against its terms (|x|): a row of 3 can average
                // near 0, where f32 sums' rounding is large next to the mean.
                let x_max = inp.iter().fold(0.0f32, |m, x| m.max(x.abs()));
                let got = read(&ctx, &mean, rows).await;
                assert_close_floor(
                    &format!("mean, {what}"),
                    &got,
                    &want_mean,
                    1e-5,
                    x_max,
                    seed,
                );
                // rstd's relative error grows as a row's spread shrinks next to its
                // values (x - mean keeps |x| * 6e-8 of absolute error): measured
                // against rstd * |x| * rstd, its size times that growth.
                let rstd_terms = want_rstd
                    .iter()
                    .map(|r| r * r * x_max)
                    .fold(0.0f32, f32::max);
                let got = read(&ctx, &rstd, rows).await;
                assert_close_floor(
                    &format!("rstd, {what}"),
                    &got,
                    &want_rstd,
                    1e-5,
                    rstd_terms,
                    seed,
                );
            }
        }
    }
}

gpu_test!(layernorm_backward_matches_reference, backward_body());
/// Tolerances 1e-5: dinp subtracts two row means from g (of the terms' size: at
/// c = 3 the result can cancel a hundredfold below them), dweight and dbias are f32 sums over up to
/// 16k rows in chunks of 64, then over the chunks (measured up to 6e-7).
async fn backward_body() {
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for (reductions, ctx) in reduction_contexts().await {
        for (rows, c) in shapes(&mut rng) {
            for target in Target::ALL {
                let (inp, w, _) = inputs(&mut rng, rows, c);
                let dout = normals(&mut rng, rows * c, 1.0);
                // mean and rstd as the forward reference gives them.
                let shape = LayerNormShape { rows, c };
                let (_, mean, rstd) = cpu::layernorm_forward(&inp, &w, &vec![0.0; c], shape);
                let (gd, gi, gw) = (ctx.upload(&dout), ctx.upload(&inp), ctx.upload(&w));
                let (gm, gr) = (ctx.upload(&mean), ctx.upload(&rstd));
                let lens = outputs(&ctx, target, rows, c, false);
                let op = LayerNorm {
                    target: Some(target),
                    ..Default::default()
                };
                let saved = LayerNormSaved {
                    inp: &gi,
                    mean: &gm,
                    rstd: &gr,
                };
                let grads = poisoned(&ctx, &lens, || op.backward(&ctx, &gd, saved, &gw, shape));
                let (dinp, dw, db) = (grads.dinp, grads.dweight, grads.dbias);
                let (want_dinp, want_dw, want_db) =
                    cpu::layernorm_backward(&dout, &inp, &w, (&mean, &rstd), shape);
                let what = format!("{reductions}, {target:?} kernels, rows {rows} c {c}");
                let got = read(&ctx, &dinp, rows * c).await;
                let terms = dinp_terms(&dout, &w, &rstd, c);
                assert_close_to_terms(&format!("dinp, {what}"), &got, &want_dinp, terms, seed);
                let got = read(&ctx, &dw, c).await;
                assert_close(&format!("dweight, {what}"), &got, &want_dw, 1e-5, seed);
                let got = read(&ctx, &db, c).await;
                assert_close(&format!("dbias, {what}"), &got, &want_db, 1e-5, seed);
            }
        }
    }
}

gpu_test!(
    layernorm_backward_with_residual_matches_reference,
    residual_body()
);
/// The fused backward: dinp = resid + the layernorm's input gradient (same
/// tolerance as dinp), and with a mask that sum through it, which must be
/// exactly the reference dropout of the GPU's own dinp (same mask bits, one
/// f32 multiply).
async fn residual_body() {
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for (reductions, ctx) in reduction_contexts().await {
        let mut shapes: Vec<_> = shapes(&mut rng)
            .into_iter()
            .filter(|&(r, c)| r < 1000 || r * c < 100_000)
            .collect();
        // Odd, so never a power of two.
        shapes.push((3 + 2 * rng.below(149), 5 + 2 * rng.below(150)));
        // Past 4096 rows, of whole vec4s (4 times an odd number): the residual and
        // the mask through the held backward on GPUs with subgroups.
        shapes.push((4097 + 2 * rng.below(100), 4 * (3 + 2 * rng.below(3))));
        for (rows, c) in shapes {
            for target in Target::ALL {
                for (with_resid, p) in [(true, 0.0f32), (true, 0.2), (false, 0.5)] {
                    let (inp, w, _) = inputs(&mut rng, rows, c);
                    let dout = normals(&mut rng, rows * c, 1.0);
                    let resid = normals(&mut rng, rows * c, 1.0);
                    let mask = (p > 0.0).then(|| DropoutMask {
                        p,
                        seed: rng.next_u64() as u32,
                    });
                    let shape = LayerNormShape { rows, c };
                    let (_, mean, rstd) = cpu::layernorm_forward(&inp, &w, &vec![0.0; c], shape);
                    let (gd, gi, gw) = (ctx.upload(&dout), ctx.upload(&inp), ctx.upload(&w));
                    let (gm, gr, gres) = (ctx.upload(&mean), ctx.upload(&rstd), ctx.upload(&resid));
                    let lens = outputs(&ctx, target, rows, c, mask.is_some());
                    let op = LayerNorm {
                        target: Some(target),
                        resid: with_resid.then_some(&gres),
                        mask,
                    };
                    let saved = LayerNormSaved {
                        inp: &gi,
                        mean: &gm,
                        rstd: &gr,
                    };
                    let grads = poisoned(&ctx, &lens, || op.backward(&ctx, &gd, saved, &gw, shape));
                    let (dinp, masked) = (grads.dinp, grads.masked);
                    let (dw, db) = (grads.dweight, grads.dbias);
                    let want_resid = with_resid.then_some(&resid[..]);
                    let (want_dinp, _, want_dw, want_db) = cpu::layernorm_backward_residual(
                        &dout,
                        &inp,
                        &w,
                        (&mean, &rstd),
                        shape,
                        want_resid,
                        mask,
                    );
                    let what = format!(
                    "{reductions}, {target:?} kernels, rows {rows} c {c} resid {with_resid} {mask:?}"
                );
                    let got = read(&ctx, &dinp, rows * c).await;
                    // The residual adds a term of its own size.
                    let resid_size =
                        want_resid.map_or(0.0, |r| r.iter().fold(0.0f32, |m, x| m.max(x.abs())));
                    let terms = dinp_terms(&dout, &w, &rstd, c) + resid_size;
                    assert_close_to_terms(&format!("dinp, {what}"), &got, &want_dinp, terms, seed);
                    assert_eq!(masked.is_some(), mask.is_some(), "{what}");
                    if let (Some(masked), Some(m)) = (masked, mask) {
                        let got_masked = read(&ctx, &masked, rows * c).await;
                        let want = cpu::dropout(&got, m.p, m.seed);
                        assert_eq!(got_masked, want, "masked, {what} (seed {seed})");
                    }
                    let got = read(&ctx, &dw, c).await;
                    assert_close(&format!("dweight, {what}"), &got, &want_dw, 1e-5, seed);
                    let got = read(&ctx, &db, c).await;
                    assert_close(&format!("dbias, {what}"), &got, &want_db, 1e-5, seed);
                }
            }
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
#[test]
fn layernorm_backward_reference_matches_finite_differences() {
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for (rows, c) in [(1, 3), (3, 7), (2, 16)] {
        let shape = LayerNormShape { rows, c };
        let inp: Vec<f32> = normals(&mut rng, rows * c, 1.0)
            .iter()
            .map(|x| x + 0.7)
            .collect();
        let weight = rng.vec(c, 0.5, 1.5);
        let bias = rng.vec(c, -0.5, 0.5);
        let w = normals(&mut rng, rows * c, 1.0);
        let (_, mean, rstd) = cpu::layernorm_forward(&inp, &weight, &bias, shape);
        let (dinp, dweight, dbias) =
            cpu::layernorm_backward(&w, &inp, &weight, (&mean, &rstd), shape);
        let what = format!("rows {rows} c {c}");
        // Smooth, with f32 outputs: 1e-3 of the largest gradient leaves room for the
        // outputs' rounding (about 6e-8 / h relative). dinp's terms are rstd * weight
        // * dout each; they can cancel to far below that (seed 1796095165179297889:
        // 4.9e-5 at rows 1, c 3), so its error is measured against them.
        let terms = (0..rows * c)
            .map(|i| (rstd[i / c] * weight[i % c] * w[i]).abs() as f64)
            .fold(0.0, f64::max);
        check_grad_against(
            &format!("dinp, {what}"),
            seed,
            &inp,
            &dinp,
            (1e-2, 1e-3, terms),
            |x| dot(&cpu::layernorm_forward(x, &weight, &bias, shape).0, &w),
        );
        check_grad(
            &format!("dweight, {what}"),
            seed,
            &weight,
            &dweight,
            (1e-2, 1e-3),
            |x| dot(&cpu::layernorm_forward(&inp, x, &bias, shape).0, &w),
        );
        check_grad(
            &format!("dbias, {what}"),
            seed,
            &bias,
            &dbias,
            (1e-2, 1e-3),
            |x| dot(&cpu::layernorm_forward(&inp, &weight, x, shape).0, &w),
        );
    }
}

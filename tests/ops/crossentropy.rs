//! Softmax cross-entropy with its gradient, and the mean of the losses: the GPU
//! kernels against the reference, the reference's backward against finite
//! differences.

use crate::common::fresh_seed;
use crate::gpu_test;
use crate::support::*;
use tidepool::kernels::{self, CrossEntropy, Mean, Target};
use tidepool::reference::{self as cpu, CrossEntropyShape};
use tidepool::rng::Rng;

/// (rows, v): rows {1, 7, 130} by v {5, 65, 67}, plus a v wider than a workgroup,
/// one just past a chunk (two passes, a last chunk of one column), and vocabularies
/// past 65,536 characters, where one invocation looping over the whole row came out
/// wrong on lavapipe.
fn shapes() -> Vec<(usize, usize)> {
    let mut shapes: Vec<_> = [1, 7, 130]
        .iter()
        .flat_map(|&r| [5, 65, 67].map(|v| (r, v)))
        .collect();
    shapes.push((33, 1000));
    shapes.push((5, kernels::CROSSENTROPY_CHUNK + 1));
    shapes.push((3, 70_000));
    shapes.push((2, 65_537));
    if cfg!(not(target_arch = "wasm32")) {
        shapes.push((16_384, 65));
    }
    shapes
}

gpu_test!(crossentropy_matches_reference, crossentropy_body());
/// Tolerances: losses 1e-5 of max(|loss|, 1) (log(sum) in f32 is good to ~1e-7
/// absolute, so a confident row's loss near 0 is only absolutely accurate);
/// dlogits 1e-5 of dloss, against the reference's backward of its own probs with a
/// fresh scale: the probs' error (f32 exp, sums over v terms) times the scale. Not
/// of the largest dlogit: when the target's probability is near 1 every dlogit of
/// the row is tiny, and p - 1 keeps only f32's absolute accuracy (the H200 showed
/// 1e-2 relative there).
async fn crossentropy_body() {
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for (reductions, ctx) in reduction_contexts().await {
        for (rows, v) in shapes() {
            for target in Target::ALL {
                // Wide logits (up to +-40): softmax must subtract the row max to stay finite.
                let logits = rng.vec(rows * v, -40.0, 40.0);
                let targets = tokens(&mut rng, rows, v);
                let dloss = rng.range(0.1, 3.0) / rows as f32;
                let (gl, gt) = (ctx.upload(&logits), ctx.upload(&targets));
                let shape = CrossEntropyShape { rows, v };
                let op = CrossEntropy {
                    target: Some(target),
                };
                let (losses, dlogits) = poisoned(&ctx, &[rows, rows * v], || {
                    op.forward(&ctx, &gl, &gt, shape, dloss)
                });
                let (want_losses, want_probs) = cpu::crossentropy_forward(&logits, &targets, shape);
                let want_dlogits = cpu::crossentropy_backward(&want_probs, &targets, shape, dloss);
                let what = format!("{reductions}, {target:?} kernels, rows {rows} v {v}");
                let got_losses = read(&ctx, &losses, rows).await;
                assert_close_floor(
                    &format!("losses, {what}"),
                    &got_losses,
                    &want_losses,
                    1e-5,
                    1.0,
                    seed,
                );
                let got = read(&ctx, &dlogits, rows * v).await;
                // 1e-5 of dloss (the floor), as above: a row whose target's
                // probability is near 1 has every dlogit far below dloss.
                let what = format!("dlogits, {what}");
                assert_close_floor(&what, &got, &want_dlogits, 1e-5, dloss, seed);
            }
        }
    }
}

gpu_test!(mean_matches_reference, mean_body());
/// Tolerance 1e-5 of the largest input: a tree of f32 sums, sizes from one
/// partial to the 256-partial cap, each target's one pass and two; fresh odd sizes
/// on both sides of the GPUs' one-pass limit (4096).
async fn mean_body() {
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    let fresh = [1 + 2 * rng.below(2047), 4097 + 2 * rng.below(30_000)];
    for (reductions, ctx) in reduction_contexts().await {
        for n in [1usize, 7, 130, 1024, 1025, 4096, 16_384, 70_001, 300_001]
            .into_iter()
            .chain(fresh)
        {
            for target in Target::ALL {
                let x = rng.vec(n, 0.0, 5.0);
                let gx = ctx.upload(&x);
                // The output, and the scratch partials of a two-pass sum.
                let parts = n.div_ceil(1024).clamp(1, 256);
                let one_pass = kernels::sum_in_one_pass(target, n);
                let lens: &[usize] = if one_pass { &[1] } else { &[1, parts] };
                let op = Mean {
                    target: Some(target),
                };
                let out = poisoned(&ctx, lens, || op.of(&ctx, &gx, n));
                let got = read(&ctx, &out, 1).await;
                let want = cpu::mean(&x);
                let err = (got[0] - want).abs() / 5.0;
                assert!(
                    err <= 1e-5,
                    "mean n {n}, {reductions}, {target:?}: got {} want {want} (seed {seed})",
                    got[0]
                );
            }
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
#[test]
fn crossentropy_backward_reference_matches_finite_differences() {
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for (rows, v) in [(1, 2), (3, 5), (4, 11)] {
        let logits = rng.vec(rows * v, -3.0, 3.0);
        let targets: Vec<u32> = (0..rows).map(|_| rng.below(v) as u32).collect();
        // The mean loss: the backward's scale is 1/rows.
        let scale = 1.0 / rows as f32;
        let shape = CrossEntropyShape { rows, v };
        let (_, probs) = cpu::crossentropy_forward(&logits, &targets, shape);
        let dlogits = cpu::crossentropy_backward(&probs, &targets, shape, scale);
        check_grad(
            &format!("dlogits rows {rows} v {v}"),
            seed,
            &logits,
            &dlogits,
            (1e-2, 1e-3),
            |x| {
                let (losses, _) = cpu::crossentropy_forward(x, &targets, shape);
                losses.iter().map(|&l| l as f64).sum::<f64>() * scale as f64
            },
        );
        // Each row of probs sums to 1, so each row of dlogits sums to 0.
        for r in 0..rows {
            let s: f32 = dlogits[r * v..(r + 1) * v].iter().sum();
            assert!(s.abs() < 1e-6, "row {r} of dlogits sums to {s}");
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
#[test]
fn crossentropy_loss_stays_finite_for_unlikely_targets() {
    // The target's probability underflows f32 (e^-200), yet the loss is exact.
    let logits = [200.0f32, 0.0, -5.0];
    let shape = CrossEntropyShape { rows: 1, v: 3 };
    let (losses, probs) = cpu::crossentropy_forward(&logits, &[1], shape);
    assert_eq!(probs[1], 0.0);
    assert!((losses[0] - 200.0).abs() < 1e-4, "loss {}", losses[0]);
}

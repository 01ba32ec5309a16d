//! The token and position embedding: the GPU kernels against the reference, the
//! reference's backward against finite differences.

use crate::common::fresh_seed;
use crate::gpu_test;
use crate::support::*;
use tidepool::kernels::{self, Embedding, ExtraGrad, Target, TokenIndex};
use tidepool::reference::{self as cpu, DropoutMask, EmbeddingShape};
use tidepool::rng::Rng;

/// (b, t, c, v), and natively the training shape of the shakespeare preset's
/// embedding (b*t = 16384 rows).
fn shapes() -> Vec<(usize, usize, usize, usize)> {
    let mut shapes = vec![(1, 1, 3, 5), (2, 7, 48, 65), (3, 130, 130, 67)];
    if cfg!(not(target_arch = "wasm32")) {
        shapes.push((64, 256, 384, 65));
    }
    shapes
}

gpu_test!(encoder_forward_matches_reference, forward_body());
async fn forward_body() {
    let ctx = context().await;
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for (b, t, c, v) in shapes() {
        let toks = tokens(&mut rng, b * t, v);
        let wte = normals(&mut rng, v * c, 1.0);
        let wpe = normals(&mut rng, t * c, 1.0);
        let (gt, gwte, gwpe) = (ctx.upload(&toks), ctx.upload(&wte), ctx.upload(&wpe));
        let shape = EmbeddingShape { b, t, c, v };
        let out = poisoned(&ctx, &[b * t * c], || {
            Embedding::default().forward(&ctx, &gt, &gwte, &gwpe, shape)
        });
        let got = read(&ctx, &out, b * t * c).await;
        // One f32 add, as the reference: bit-identical.
        let want = cpu::encoder_forward(&toks, &wte, &wpe, shape);
        assert_eq!(got, want, "b {b} t {t} c {c} v {v}, seed {seed}");
    }
}

gpu_test!(encoder_forward_dropout_is_exact, forward_dropout_body());
/// Through the embedding's dropout mask: one f32 add and one multiply on both
/// sides and the same mask bits, so bit-identical to the reference composition.
async fn forward_dropout_body() {
    let ctx = context().await;
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for (b, t, c, v) in shapes() {
        for p in [0.0f32, 0.1, 0.5] {
            let toks = tokens(&mut rng, b * t, v);
            let wte = normals(&mut rng, v * c, 1.0);
            let wpe = normals(&mut rng, t * c, 1.0);
            let mask = (p > 0.0).then(|| DropoutMask {
                p,
                seed: rng.next_u64() as u32,
            });
            let (gt, gwte, gwpe) = (ctx.upload(&toks), ctx.upload(&wte), ctx.upload(&wpe));
            let shape = EmbeddingShape { b, t, c, v };
            let op = Embedding {
                dropout: mask,
                ..Default::default()
            };
            let out = poisoned(&ctx, &[b * t * c], || {
                op.forward(&ctx, &gt, &gwte, &gwpe, shape)
            });
            let got = read(&ctx, &out, b * t * c).await;
            let want = cpu::encoder_forward_dropout(&toks, &wte, &wpe, shape, mask);
            assert_eq!(got, want, "b {b} t {t} c {c} v {v} {mask:?}, seed {seed}");
        }
    }
}

gpu_test!(
    token_index_groups_rows_by_token_in_order,
    token_index_body()
);
async fn token_index_body() {
    let (offsets, positions) = kernels::token_index(&[2, 0, 2, 2, 4, 0], 5);
    assert_eq!(offsets, vec![0, 2, 2, 5, 5, 6]);
    assert_eq!(positions, vec![1, 5, 0, 2, 3, 4]);
}

/// Runs the GPU backward for `toks`, with an extra dwte term (`Some(splits)`: as
/// that many split partials, which the kernel adds) or not, and checks it against
/// the reference. Sums over up to b*t rows in f32 (the repeated-token cases put
/// all of them in one element): 1e-5.
async fn check_backward(
    ctx: &tidepool::WgpuContext,
    rng: &mut Rng,
    seed: u64,
    toks: &[u32],
    (b, t, c, v): (usize, usize, usize, usize),
    extra_splits: Option<usize>,
) -> (Vec<f32>, Vec<f32>) {
    let dout = normals(rng, b * t * c, 1.0);
    let splits = extra_splits.unwrap_or(1);
    let extra = normals(rng, splits * v * c, 1.0);
    let (offsets, positions) = kernels::token_index(toks, v);
    let gdout = ctx.upload(&dout);
    let (goff, gpos, gextra) = (
        ctx.upload(&offsets),
        ctx.upload(&positions),
        ctx.upload(&extra),
    );
    let shape = EmbeddingShape { b, t, c, v };
    let (mut want_dwte, want_dwpe) = cpu::encoder_backward(&dout, toks, shape);
    if extra_splits.is_some() {
        for (i, w) in want_dwte.iter_mut().enumerate() {
            *w += extra.iter().skip(i).step_by(v * c).sum::<f32>();
        }
    }
    let mut got = Vec::new();
    for target in Target::ALL {
        let (dwte, dwpe) = poisoned(ctx, &[v * c, t * c], || {
            let extra = extra_splits.map(|splits| ExtraGrad {
                grad: &gextra,
                splits,
            });
            let index = TokenIndex {
                offsets: (&goff).into(),
                positions: (&gpos).into(),
            };
            let op = Embedding {
                target: Some(target),
                ..Default::default()
            };
            op.backward(ctx, &gdout, index, shape, extra)
        });
        let got_dwte = read(ctx, &dwte, v * c).await;
        let got_dwpe = read(ctx, &dwpe, t * c).await;
        let what = format!("{target:?} kernels, b {b} t {t} c {c} v {v} extra {extra_splits:?}");
        assert_close(&format!("dwte, {what}"), &got_dwte, &want_dwte, 1e-5, seed);
        assert_close(&format!("dwpe, {what}"), &got_dwpe, &want_dwpe, 1e-5, seed);
        got.push((got_dwte, got_dwpe));
    }
    // The adapter's own tuning, for the callers' further checks.
    let mine = Target::ALL
        .iter()
        .position(|&t| t == ctx.kernel_target())
        .expect("one of them");
    got.swap_remove(mine)
}

gpu_test!(encoder_backward_matches_reference, backward_body());
async fn backward_body() {
    let ctx = context().await;
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for (b, t, c, v) in shapes() {
        let toks = tokens(&mut rng, b * t, v);
        // None, the head's gradient whole, and as 2 to 9 split partials.
        let splits = 2 + rng.below(8);
        for extra in [None, Some(1), Some(splits)] {
            check_backward(&ctx, &mut rng, seed, &toks, (b, t, c, v), extra).await;
        }
    }
}

gpu_test!(
    encoder_backward_repeated_tokens_lose_nothing,
    repeated_body()
);
/// One token repeated over the whole batch, and one token in ~90% of rows: every
/// repeat must land (no lost update), and two runs give the same bits.
async fn repeated_body() {
    let ctx = context().await;
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    #[cfg(not(target_arch = "wasm32"))]
    let shape = (8, 256, 48, 65);
    #[cfg(target_arch = "wasm32")]
    let shape = (4, 130, 48, 65);
    let (b, t, _, v) = shape;
    let all_same = vec![3u32; b * t];
    let mostly: Vec<u32> = (0..b * t)
        .map(|_| {
            if rng.uniform() < 0.9 {
                7
            } else {
                rng.below(v) as u32
            }
        })
        .collect();
    for toks in [all_same, mostly] {
        let mut replay = rng.clone();
        let first = check_backward(&ctx, &mut rng, seed, &toks, shape, Some(3)).await;
        let second = check_backward(&ctx, &mut replay, seed, &toks, shape, Some(3)).await;
        assert!(
            first.0 == second.0 && first.1 == second.1,
            "deterministic (seed {seed})"
        );
    }
}

#[cfg(not(target_arch = "wasm32"))]
#[test]
fn encoder_backward_reference_matches_finite_differences() {
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    let shape = EmbeddingShape {
        b: 2,
        t: 5,
        c: 3,
        v: 4,
    };
    let EmbeddingShape { b, t, c, v } = shape;
    // Token 1 repeats, token 3 never appears (its gradient must be 0).
    let tokens = vec![1, 0, 1, 2, 1, 1, 1, 0, 2, 1];
    let wte = normals(&mut rng, v * c, 1.0);
    let wpe = normals(&mut rng, t * c, 1.0);
    let w = normals(&mut rng, b * t * c, 1.0);
    let (dwte, dwpe) = cpu::encoder_backward(&w, &tokens, shape);
    assert!(dwte[3 * c..].iter().all(|&g| g == 0.0));
    // Linear, so no truncation error: a large step (h = 1) shrinks the outputs' f32
    // rounding (divided by h) to well under the tolerance.
    check_grad("dwte", seed, &wte, &dwte, (1.0, 1e-5), |x| {
        dot(&cpu::encoder_forward(&tokens, x, &wpe, shape), &w)
    });
    check_grad("dwpe", seed, &wpe, &dwpe, (1.0, 1e-5), |x| {
        dot(&cpu::encoder_forward(&tokens, &wte, x, shape), &w)
    });
}

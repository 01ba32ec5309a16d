//! Weight gradients from split partials: summed together at the end of a
//! backward ([`SplitSums`]), left to the optimizer as partials, and the
//! multi-tensor sum itself with any number of sums a dispatch.

use crate::common::fresh_seed;
use crate::gpu_test;
use crate::support::*;
use tidepool::kernels::{
    sum_splits_together, Matmul, SplitSum, SplitSums, TensorsPerDispatch, MAX_TENSORS_PER_DISPATCH,
};
use tidepool::reference::MatmulShape;
use tidepool::rng::Rng;

gpu_test!(
    weight_grads_summed_together_match_each_summed_alone,
    split_sums_body()
);
/// Weight gradients whose split partials wait in a `SplitSums` (as the model's
/// backward pass leaves them) and are added together by its `finish` give the
/// same bits as each gradient summed alone by `matmul_backward`, on fresh shapes
/// long enough to split on either target; and `sum_splits_together` gives the
/// same bits whatever number of sums a dispatch takes.
async fn split_sums_body() {
    let ctx = context().await;
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    // CPU adapters split weight gradients from 512 rows, GPUs from 128.
    let layers: Vec<(usize, usize, usize, bool)> = (0..2 + rng.below(4))
        .map(|_| {
            let rows = 520 + rng.below(700);
            (
                rows,
                1 + rng.below(45),
                1 + rng.below(70),
                rng.below(2) == 1,
            )
        })
        .collect();
    let data: Vec<_> = layers
        .iter()
        .map(|&(rows, k, n, _)| {
            let up = |rng: &mut Rng, len| ctx.upload(&rng.vec(len, -1.0, 1.0));
            (
                up(&mut rng, rows * n),
                up(&mut rng, rows * k),
                up(&mut rng, n * k),
                // The backward reads no bias: it only makes the bias's gradient.
                ctx.upload(&vec![0.0f32; n]),
            )
        })
        .collect();
    let lens: Vec<usize> = layers
        .iter()
        .flat_map(|&(rows, k, n, bias)| [rows * k, n * k].into_iter().chain(bias.then_some(n)))
        .collect();
    let mut sums = SplitSums::new();
    let grads = poisoned(&ctx, &lens, || {
        let mut grads = Vec::new();
        for (&(rows, k, n, bias), (dout, inp, w, b)) in layers.iter().zip(&data) {
            let x = linear(inp, w, bias.then_some(b));
            let shape = MatmulShape { rows, k, n };
            let op = Matmul::default();
            grads.push(op.backward_deferred(&ctx, dout, x, shape, Some(&mut sums)));
        }
        grads
    });
    assert!(
        !sums.is_empty(),
        "{layers:?}: no gradient was split (seed {seed})"
    );
    sums.finish(&ctx);
    assert!(sums.is_empty());
    for (i, (&(rows, k, n, bias), (dout, inp, w, b))) in layers.iter().zip(&data).enumerate() {
        let what = format!("layer {i} {rows}x{k}x{n} bias {bias} (seed {seed})");
        let (_, dw, db) = &grads[i];
        let x = linear(inp, w, bias.then_some(b));
        let shape = MatmulShape { rows, k, n };
        let (_, want_dw, want_db) = Matmul::default().backward(&ctx, dout, x, shape);
        assert_eq!(
            read(&ctx, dw, n * k).await,
            read(&ctx, &want_dw, n * k).await,
            "dweight {what}"
        );
        assert_eq!(db.is_some(), bias);
        if let (Some(db), Some(want_db)) = (db, want_db) {
            assert_eq!(
                read(&ctx, db, n).await,
                read(&ctx, &want_db, n).await,
                "dbias {what}"
            );
        }
    }

    // Sums of partials by hand: f64 references, and the same bits for any number
    // of sums a dispatch.
    let parts: Vec<(usize, usize, Vec<f32>)> = (0..1 + rng.below(12))
        .map(|_| {
            let (len, splits) = (1 + rng.below(3000), 1 + rng.below(11));
            (len, splits, rng.vec(len * splits, -1.0, 1.0))
        })
        .collect();
    let uploaded: Vec<_> = parts.iter().map(|(.., x)| ctx.upload(x)).collect();
    let mut first: Option<Vec<Vec<f32>>> = None;
    // At most what the device binds (WebGPU's default: 4 sums a dispatch).
    let most = TensorsPerDispatch::of(&ctx).sums;
    assert!(most <= MAX_TENSORS_PER_DISPATCH);
    for per in [1, 3, most] {
        let lens: Vec<usize> = parts.iter().map(|&(len, ..)| len).collect();
        let outs = poisoned(&ctx, &lens, || {
            let outs: Vec<_> = lens.iter().map(|&len| ctx.create_pooled(len * 4)).collect();
            let sums: Vec<SplitSum> = parts
                .iter()
                .zip(&uploaded)
                .zip(&outs)
                .map(|((&(len, splits, _), part), out)| SplitSum {
                    part: part.into(),
                    out: out.into(),
                    len,
                    splits,
                })
                .collect();
            let per = TensorsPerDispatch {
                sumsq: 1,
                adamw: 1,
                sums: per,
            };
            sum_splits_together(&ctx, per, &sums);
            outs
        });
        let mut got = Vec::new();
        for ((len, splits, x), out) in parts.iter().zip(&outs) {
            let g = read(&ctx, out, *len).await;
            let want: Vec<f32> = (0..*len)
                .map(|i| (0..*splits).map(|s| f64::from(x[s * len + i])).sum::<f64>() as f32)
                .collect();
            let what = format!("{len} floats in {splits} splits, {per} sums a dispatch");
            assert_close(&what, &g, &want, 1e-5, seed);
            got.push(g);
        }
        match &first {
            None => first = Some(got),
            Some(f) => assert!(
                *f == got,
                "{per} sums a dispatch changed the bits (seed {seed})"
            ),
        }
    }
}

gpu_test!(
    weight_grads_left_to_the_optimizer_are_their_partials,
    left_to_optimizer_body()
);
/// With `SplitSums::for_optimizer`, a weight gradient of at most
/// `OPTIMIZER_SPLITS` splits comes back as its partials (`splits_of` says how
/// many), and one of more is summed at `finish`: either way, summed by
/// the passes that read partials, the same bits as `matmul_backward`'s. Rows from
/// 300 to 499 split at most 8 ways on either target (the bias at least 2); from
/// 2100, past 8 (every gradient on GPUs, the biases' on CPU adapters).
async fn left_to_optimizer_body() {
    let ctx = context().await;
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    let layers: Vec<(usize, usize, usize)> = [300, 300, 2100, 2100]
        .map(|from| (from + rng.below(200), 1 + rng.below(45), 1 + rng.below(70)))
        .to_vec();
    let mut sums = SplitSums::for_optimizer();
    let mut left = 0;
    for (i, &(rows, k, n)) in layers.iter().enumerate() {
        let up = |rng: &mut Rng, len| ctx.upload(&rng.vec(len, -1.0, 1.0));
        let (dout, inp, w) = (
            up(&mut rng, rows * n),
            up(&mut rng, rows * k),
            up(&mut rng, n * k),
        );
        // The backward reads no bias: it only makes the bias's gradient.
        let b = ctx.upload(&vec![0.0f32; n]);
        let (x, shape) = (linear(&inp, &w, Some(&b)), MatmulShape { rows, k, n });
        let (_, dw, db) = ctx
            .scope(|| Matmul::default().backward_deferred(&ctx, &dout, x, shape, Some(&mut sums)));
        // Sums wait only where a gradient split past OPTIMIZER_SPLITS ways.
        assert_eq!(
            sums.is_empty(),
            i < 2,
            "layer {i} {rows}x{k}x{n}: {} sums waiting (seed {seed})",
            sums.len()
        );
        ctx.scope(|| sums.finish(&ctx));
        let (_, want_dw, want_db) = Matmul::default().backward(&ctx, &dout, x, shape);
        let db = db.expect("with bias");
        let want_db = want_db.expect("with bias");
        for (name, grad, want, len) in [
            ("dweight", &dw, &want_dw, n * k),
            ("dbias", &db, &want_db, n),
        ] {
            let splits = sums.splits_of(grad);
            let what = format!("{name} of layer {i} {rows}x{k}x{n}, {splits} splits (seed {seed})");
            assert!(splits <= SplitSums::OPTIMIZER_SPLITS, "{what}");
            left += usize::from(splits > 1);
            let summed = ctx.create_pooled(len * 4);
            let sum = SplitSum {
                part: grad.into(),
                out: (&summed).into(),
                len,
                splits,
            };
            ctx.scope(|| sum_splits_together(&ctx, TensorsPerDispatch::of(&ctx), &[sum]));
            assert_eq!(
                read(&ctx, &summed, len).await,
                read(&ctx, want, len).await,
                "{what}"
            );
        }
    }
    assert!(
        left >= 2,
        "{layers:?}: {left} left as partials (seed {seed})"
    );
}

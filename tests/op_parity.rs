//! Every GPU kernel against its CPU reference (`tidepool::reference`), on outputs
//! drawn from NaN-poisoned pool buffers, natively and in headless Chromium.

mod common;

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

// ---- helpers, and the tolerances of every op ----
//
// Tolerances are max |got - want| over max |want| (see `common::assert_close`). The
// references accumulate in f64; the kernels in f32, so sums over k terms carry up to
// about k * 6e-8 relative error in the worst case and far less on random data.

mod support {
    pub use crate::common::{
        assert_close, parity_context as context, poisoned, read, reduction_contexts,
    };

    /// [`assert_close`] with the scale at least `floor`: for values whose absolute
    /// error is what matters (a loss near 0 has ~1e-7 absolute error from log(sum)).
    /// The appended pair adds no error and only raises the scale.
    #[track_caller]
    pub fn assert_close_floor(
        what: &str,
        got: &[f32],
        want: &[f32],
        tol: f32,
        floor: f32,
        seed: u64,
    ) {
        let got: Vec<f32> = got.iter().copied().chain([floor]).collect();
        let want: Vec<f32> = want.iter().copied().chain([floor]).collect();
        assert_close(what, &got, &want, tol, seed);
    }

    pub fn normals(rng: &mut tidepool::rng::Rng, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| rng.normal() * scale).collect()
    }

    pub fn tokens(rng: &mut tidepool::rng::Rng, n: usize, v: usize) -> Vec<u32> {
        (0..n).map(|_| rng.below(v) as u32).collect()
    }
}

mod embedding {
    use super::support::*;
    use crate::common::fresh_seed;
    use crate::gpu_test;
    use tidepool::kernels::{self, Target};
    use tidepool::reference::{self as cpu, DropoutMask};
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
            let out = poisoned(&ctx, &[b * t * c], || {
                kernels::encoder_forward(&ctx, &gt, &gwte, &gwpe, b, t, c)
            });
            let got = read(&ctx, &out, b * t * c).await;
            // One f32 add, as the reference: bit-identical.
            let want = cpu::encoder_forward(&toks, &wte, &wpe, b, t, c);
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
                let out = poisoned(&ctx, &[b * t * c], || {
                    kernels::encoder_forward_dropout(&ctx, &gt, &gwte, &gwpe, b, t, c, mask)
                });
                let got = read(&ctx, &out, b * t * c).await;
                let want = cpu::encoder_forward_dropout(&toks, &wte, &wpe, b, t, c, mask);
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
        let (mut want_dwte, want_dwpe) = cpu::encoder_backward(&dout, toks, b, t, c, v);
        if extra_splits.is_some() {
            for (i, w) in want_dwte.iter_mut().enumerate() {
                *w += extra.iter().skip(i).step_by(v * c).sum::<f32>();
            }
        }
        let mut got = Vec::new();
        for target in Target::ALL {
            let (dwte, dwpe) = poisoned(ctx, &[v * c, t * c], || {
                let extra = extra_splits.map(|splits| (&gextra, splits));
                let shape = (b, t, c, v);
                kernels::encoder_backward_on(ctx, target, &gdout, &goff, &gpos, shape, extra)
            });
            let got_dwte = read(ctx, &dwte, v * c).await;
            let got_dwpe = read(ctx, &dwpe, t * c).await;
            let what =
                format!("{target:?} kernels, b {b} t {t} c {c} v {v} extra {extra_splits:?}");
            assert_close(&format!("dwte, {what}"), &got_dwte, &want_dwte, 1e-5, seed);
            assert_close(&format!("dwpe, {what}"), &got_dwpe, &want_dwpe, 1e-5, seed);
            got.push((got_dwte, got_dwpe));
        }
        // The adapter's own tuning, for the callers' further checks.
        let mine = Target::ALL
            .iter()
            .position(|&t| t == Target::of(ctx))
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
}

mod layernorm {
    use super::support::*;
    use crate::common::fresh_seed;
    use crate::gpu_test;
    use tidepool::kernels::{self, Target};
    use tidepool::reference::{self as cpu, DropoutMask};
    use tidepool::rng::Rng;

    /// (rows, c): every pairing of rows {1, 7, 130} and c {3, 48, 130, 384}, plus
    /// natively a training-sized one whose rows are not a multiple of the 64-row chunk.
    /// Fixed shapes plus fresh random ones, odd (never a power of two): one with more
    /// than 4 row chunks of 64 so the weight gradients' unrolled loops and their tails
    /// both run on every target, and one past the 4096 rows whose weight gradients
    /// GPUs sum in one pass, so that both ways run on GPUs.
    fn shapes(rng: &mut Rng) -> Vec<(usize, usize)> {
        let mut shapes: Vec<_> = [1, 7, 130]
            .iter()
            .flat_map(|&r| [3, 48, 130, 384].map(|c| (r, c)))
            .collect();
        shapes.push((257 + 2 * rng.below(200), 3 + 2 * rng.below(200)));
        // Past the 4096 rows that GPUs sum in one pass, narrow enough for the browser.
        shapes.push((4097 + 2 * rng.below(300), 3 + 2 * rng.below(10)));
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
        let scratch = kernels::layernorm_backward_scratch(ctx, target, rows, c);
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
                    let (out, mean, rstd) = poisoned(&ctx, &[rows * c, rows, rows], || {
                        kernels::layernorm_forward_on(&ctx, target, &gi, &gw, &gb, rows, c)
                    });
                    let (want_out, want_mean, want_rstd) =
                        cpu::layernorm_forward(&inp, &w, &bias, rows, c);
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
                    let (_, mean, rstd) = cpu::layernorm_forward(&inp, &w, &vec![0.0; c], rows, c);
                    let (gd, gi, gw) = (ctx.upload(&dout), ctx.upload(&inp), ctx.upload(&w));
                    let (gm, gr) = (ctx.upload(&mean), ctx.upload(&rstd));
                    let lens = outputs(&ctx, target, rows, c, false);
                    let (dinp, dw, db) = poisoned(&ctx, &lens, || {
                        kernels::layernorm_backward_on(
                            &ctx, target, &gd, &gi, &gw, &gm, &gr, rows, c,
                        )
                    });
                    let (want_dinp, want_dw, want_db) =
                        cpu::layernorm_backward(&dout, &inp, &w, &mean, &rstd, rows, c);
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
                        let (_, mean, rstd) =
                            cpu::layernorm_forward(&inp, &w, &vec![0.0; c], rows, c);
                        let (gd, gi, gw) = (ctx.upload(&dout), ctx.upload(&inp), ctx.upload(&w));
                        let (gm, gr, gres) =
                            (ctx.upload(&mean), ctx.upload(&rstd), ctx.upload(&resid));
                        let lens = outputs(&ctx, target, rows, c, mask.is_some());
                        let r = with_resid.then_some(&gres);
                        let (dinp, masked, dw, db) = poisoned(&ctx, &lens, || {
                            kernels::layernorm_backward_fused_on(
                                &ctx, target, &gd, &gi, &gw, &gm, &gr, rows, c, r, mask,
                            )
                        });
                        let want_resid = with_resid.then_some(&resid[..]);
                        let (want_dinp, _, want_dw, want_db) = cpu::layernorm_backward_residual(
                            &dout, &inp, &w, &mean, &rstd, rows, c, want_resid, mask,
                        );
                        let what = format!(
                        "{reductions}, {target:?} kernels, rows {rows} c {c} resid {with_resid} {mask:?}"
                    );
                        let got = read(&ctx, &dinp, rows * c).await;
                        // The residual adds a term of its own size.
                        let resid_size = want_resid
                            .map_or(0.0, |r| r.iter().fold(0.0f32, |m, x| m.max(x.abs())));
                        let terms = dinp_terms(&dout, &w, &rstd, c) + resid_size;
                        assert_close_to_terms(
                            &format!("dinp, {what}"),
                            &got,
                            &want_dinp,
                            terms,
                            seed,
                        );
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
}

mod gelu {
    use super::support::*;
    use crate::common::fresh_seed;
    use crate::gpu_test;
    use tidepool::kernels;
    use tidepool::reference as cpu;
    use tidepool::rng::Rng;

    const SIZES: &[usize] = &[1, 7, 130, 1000, 70_001];

    gpu_test!(gelu_matches_reference, gelu_body());
    /// The pass the CPU-adapter matmuls read GELU from. Tolerance 1e-5: elementwise,
    /// f32 exp (a few ulp, worse on some drivers) on inputs of magnitude up to ~12.
    /// Its gradient and the other matmuls' GELU on load: `fused_matmul` below.
    async fn gelu_body() {
        let ctx = context().await;
        let seed = fresh_seed();
        let mut rng = Rng::new(seed);
        for &n in SIZES {
            let x = normals(&mut rng, n, 3.0);
            let gx = ctx.upload(&x);
            let out = poisoned(&ctx, &[n], || kernels::gelu_forward(&ctx, &gx, n));
            let got = read(&ctx, &out, n).await;
            assert_close(
                &format!("gelu forward n {n}"),
                &got,
                &cpu::gelu_forward(&x),
                1e-5,
                seed,
            );
        }
    }
}

mod crossentropy {
    use super::support::*;
    use crate::common::fresh_seed;
    use crate::gpu_test;
    use tidepool::kernels::{self, Target};
    use tidepool::reference as cpu;
    use tidepool::rng::Rng;

    /// (rows, v): rows {1, 7, 130} by v {5, 65, 67}, plus a v wider than a workgroup.
    fn shapes() -> Vec<(usize, usize)> {
        let mut shapes: Vec<_> = [1, 7, 130]
            .iter()
            .flat_map(|&r| [5, 65, 67].map(|v| (r, v)))
            .collect();
        shapes.push((33, 1000));
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
                    let (losses, dlogits) = poisoned(&ctx, &[rows, rows * v], || {
                        kernels::crossentropy_forward_on(&ctx, target, &gl, &gt, rows, v, dloss)
                    });
                    let (want_losses, want_probs) =
                        cpu::crossentropy_forward(&logits, &targets, rows, v);
                    let want_dlogits =
                        cpu::crossentropy_backward(&want_probs, &targets, rows, v, dloss);
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
                    let out = poisoned(&ctx, lens, || kernels::mean_on(&ctx, target, &gx, n));
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
}

// ---- matmul ----

mod matmul {
    use super::support::{assert_close, context, poisoned, read};
    use crate::common::fresh_seed;
    use crate::gpu_test;
    use tidepool::kernels::{
        matmul_backward, matmul_dinp_variant, matmul_dweight_variant, matmul_forward_variant,
        matmul_weight_grads_variant, MatmulVariant,
    };
    use tidepool::reference;
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
    ];
    #[cfg(target_arch = "wasm32")]
    const MM_SHAPES: &[(usize, usize, usize)] = &[
        (1, 1, 1),
        (7, 13, 5),
        (130, 67, 33),
        (129, 9, 257),
        (64, 96, 160),
        (33, 300, 65),
    ];

    /// A fresh random non-power-of-two shape (rows, k, n) for each test run, on top
    /// of the fixed ones.
    fn random_shape(rng: &mut Rng) -> (usize, usize, usize) {
        let odd = |rng: &mut Rng, hi: usize| loop {
            let x = 1 + rng.below(hi);
            if !x.is_power_of_two() {
                break x;
            }
        };
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
            for variant in MatmulVariant::ALL {
                for with_bias in [false, true] {
                    let out = poisoned(&ctx, &[rows * n], || {
                        let bias = with_bias.then(|| (&g_b).into());
                        matmul_forward_variant(&ctx, variant, &g_inp, &g_w, bias, rows, k, n)
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
                    let what =
                        format!("matmul_forward {variant:?} {rows}x{k}x{n} bias {with_bias}");
                    assert_close(&what, &got, &want, MM_FWD_TOL, seed);
                }
            }
        }
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
            let (want_dinp, want_dw, want_db) =
                reference::matmul_backward(&dout, &inp, &weight, rows, k, n, true);
            for variant in MatmulVariant::ALL {
                let what = format!("{variant:?} {rows}x{k}x{n}");
                let dinp = poisoned(&ctx, &[rows * k], || {
                    matmul_dinp_variant(&ctx, variant, &g_dout, &g_w, rows, k, n)
                });
                let got = read(&ctx, &dinp, rows * k).await;
                assert_close(&format!("dinp {what}"), &got, &want_dinp, MM_FWD_TOL, seed);
                let dw = poisoned(&ctx, &[n * k], || {
                    matmul_dweight_variant(&ctx, variant, &g_dout, &g_inp, rows, k, n)
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
                    let dw2 = matmul_dweight_variant(&ctx, variant, &g_dout, &g_inp, rows, k, n);
                    assert_eq!(
                        read(&ctx, &dw2, n * k).await,
                        got_dw,
                        "dweight {what} rerun"
                    );
                }
                // With the bias: Tiled and SplitK sum dbias in dweight's own pass.
                let (dw, db) = poisoned(&ctx, &[n, n * k], || {
                    let (dw, db) = matmul_weight_grads_variant(
                        &ctx, variant, &g_dout, &g_inp, rows, k, n, true,
                    );
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
                if let Some(db) = db {
                    let got_db = read(&ctx, &db, n).await;
                    let want = want_db.as_ref().expect("reference dbias");
                    assert_close(&format!("dbias {what}"), &got_db, want, MM_DW_TOL, seed);
                    if many.contains(&(rows, k, n)) {
                        let (_, _, db2) =
                            matmul_backward(&ctx, &g_dout, &g_inp, &g_w, rows, k, n, true);
                        let db2 = db2.expect("dbias");
                        assert_eq!(read(&ctx, &db2, n).await, got_db, "dbias {what} rerun");
                    }
                }
            }
        }
    }
}

// ---- matmuls with fused elementwise ops ----

mod fused_matmul {
    use super::support::{assert_close, context, normals, poisoned, read};
    use crate::common::fresh_seed;
    use crate::gpu_test;
    use tidepool::kernels::{
        matmul_backward, matmul_backward_deferred, matmul_backward_fused,
        matmul_dinp_fused_variant, matmul_dweight_fused_variant, matmul_forward_fused_variant,
        sum_splits_together, ForwardFusion, MatmulVariant, SplitSum, SplitSums, TensorsPerDispatch,
        MAX_TENSORS_PER_DISPATCH,
    };
    use tidepool::reference::{self, DropoutMask};
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
        let odd = |rng: &mut Rng, hi: usize| loop {
            let x = 1 + rng.below(hi);
            if !x.is_power_of_two() {
                break x;
            }
        };
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
            for (&(rows, k, n, bias), (dout, inp, w)) in layers.iter().zip(&data) {
                grads.push(matmul_backward_deferred(
                    &ctx,
                    dout,
                    inp,
                    w,
                    rows,
                    k,
                    n,
                    bias,
                    false,
                    Some(&mut sums),
                ));
            }
            grads
        });
        assert!(
            !sums.is_empty(),
            "{layers:?}: no gradient was split (seed {seed})"
        );
        sums.finish(&ctx);
        assert!(sums.is_empty());
        for (i, (&(rows, k, n, bias), (dout, inp, w))) in layers.iter().zip(&data).enumerate() {
            let what = format!("layer {i} {rows}x{k}x{n} bias {bias} (seed {seed})");
            let (_, dw, db) = &grads[i];
            let (_, want_dw, want_db) = matmul_backward(&ctx, dout, inp, w, rows, k, n, bias);
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
    /// many), and one of more is summed at `finish` as before: either way, summed by
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
            let (_, dw, db) = ctx.scope(|| {
                matmul_backward_deferred(
                    &ctx,
                    &dout,
                    &inp,
                    &w,
                    rows,
                    k,
                    n,
                    true,
                    false,
                    Some(&mut sums),
                )
            });
            // Sums wait only where a gradient split past OPTIMIZER_SPLITS ways.
            assert_eq!(
                sums.is_empty(),
                i < 2,
                "layer {i} {rows}x{k}x{n}: {} sums waiting (seed {seed})",
                sums.len()
            );
            ctx.scope(|| sums.finish(&ctx));
            let (_, want_dw, want_db) = matmul_backward(&ctx, &dout, &inp, &w, rows, k, n, true);
            let db = db.expect("with bias");
            let want_db = want_db.expect("with bias");
            for (name, grad, want, len) in [
                ("dweight", &dw, &want_dw, n * k),
                ("dbias", &db, &want_db, n),
            ] {
                let splits = sums.splits_of(grad);
                let what =
                    format!("{name} of layer {i} {rows}x{k}x{n}, {splits} splits (seed {seed})");
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
            for variant in MatmulVariant::ALL {
                for with_bias in [false, true] {
                    let fusion = ForwardFusion {
                        gelu_inp: true,
                        ..Default::default()
                    };
                    let out = poisoned(&ctx, &outputs(variant, rows * n, rows * k), || {
                        let bias = with_bias.then(|| (&g_b).into());
                        matmul_forward_fused_variant(
                            &ctx, variant, &g_inp, &g_w, bias, rows, k, n, fusion,
                        )
                    });
                    let got = read(&ctx, &out, rows * n).await;
                    let b = with_bias.then_some(&bias[..]);
                    let want = reference::matmul_forward_act(&inp, &weight, b, rows, k, n, true);
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
            let (want_dinp, want_dw, want_db) =
                reference::matmul_backward_act(&dout, &inp, &weight, rows, k, n, true, true);
            for variant in MatmulVariant::ALL {
                let what = format!("{variant:?} {rows}x{k}x{n}");
                let dinp = poisoned(&ctx, &[rows * k], || {
                    let gelu_of = Some(&g_inp);
                    matmul_dinp_fused_variant(&ctx, variant, &g_dout, &g_w, rows, k, n, gelu_of)
                });
                let got = read(&ctx, &dinp, rows * k).await;
                assert_close(
                    &format!("gelu dinp {what}"),
                    &got,
                    &want_dinp,
                    FWD_TOL,
                    seed,
                );
                let dw = poisoned(&ctx, &outputs(variant, n * k, rows * k), || {
                    matmul_dweight_fused_variant(&ctx, variant, &g_dout, &g_inp, rows, k, n, true)
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
            let (dinp, dw, db) =
                matmul_backward_fused(&ctx, &g_dout, &g_inp, &g_w, rows, k, n, true, true);
            let what = format!("matmul_backward_fused {rows}x{k}x{n}");
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
            for variant in MatmulVariant::ALL {
                for (gelu_inp, p) in [(false, 0.0), (true, 0.0), (false, 0.3), (true, 0.15)] {
                    let mask = (p > 0.0).then(|| DropoutMask {
                        p,
                        seed: rng.next_u64() as u32,
                    });
                    let fusion = ForwardFusion {
                        gelu_inp,
                        dropout: mask,
                        residual: Some(&g_r),
                    };
                    let act = if gelu_inp { rows * k } else { 0 };
                    let out = poisoned(&ctx, &outputs(variant, rows * n, act), || {
                        let b = Some((&g_b).into());
                        matmul_forward_fused_variant(
                            &ctx, variant, &g_inp, &g_w, b, rows, k, n, fusion,
                        )
                    });
                    let got = read(&ctx, &out, rows * n).await;
                    let want = reference::residual_branch_forward(
                        &resid, &inp, &weight, &bias, rows, k, n, gelu_inp, mask,
                    );
                    let what =
                        format!("branch {variant:?} {rows}x{k}x{n} gelu {gelu_inp} {mask:?}");
                    assert_close(&what, &got, &want, FWD_TOL, seed);
                }
            }
        }
    }

    gpu_test!(residual_branch_dropout_mask_is_exact, exact_mask_body());
    /// With a weight that picks one input column per output (one-hot rows: every sum
    /// is exact, split or not), `resid + dropout(x + bias)` must equal the reference
    /// bit for bit: the same mask elements, the same f32 rounding, in every variant.
    async fn exact_mask_body() {
        let ctx = context().await;
        let seed = fresh_seed();
        let mut rng = Rng::new(seed);
        let (rows, k, n) = (301, 300, 67);
        let inp = normals(&mut rng, rows * k, 1.0);
        let mut weight = vec![0.0f32; n * k];
        for j in 0..n {
            weight[j * k + (j * 7 + 3) % k] = 1.0;
        }
        let bias = normals(&mut rng, n, 1.0);
        let resid = normals(&mut rng, rows * n, 1.0);
        let g = |x: &[f32]| ctx.upload(x);
        let (g_inp, g_w, g_b, g_r) = (g(&inp), g(&weight), g(&bias), g(&resid));
        for variant in MatmulVariant::ALL {
            for p in [0.1f32, 0.5] {
                let mask = Some(DropoutMask {
                    p,
                    seed: rng.next_u64() as u32,
                });
                let fusion = ForwardFusion {
                    gelu_inp: false,
                    dropout: mask,
                    residual: Some(&g_r),
                };
                let out = poisoned(&ctx, &[rows * n], || {
                    matmul_forward_fused_variant(
                        &ctx,
                        variant,
                        &g_inp,
                        &g_w,
                        Some((&g_b).into()),
                        rows,
                        k,
                        n,
                        fusion,
                    )
                });
                let got = read(&ctx, &out, rows * n).await;
                let want = reference::residual_branch_forward(
                    &resid, &inp, &weight, &bias, rows, k, n, false, mask,
                );
                assert_eq!(got, want, "{variant:?} p {p} (seed {seed})");
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
        let fusion = ForwardFusion {
            gelu_inp: true,
            ..Default::default()
        };
        let out = matmul_forward_fused_variant(ctx, variant, &gx, &one, None, rows, 1, 1, fusion);
        let dx = matmul_dinp_fused_variant(ctx, variant, &ones, &one, rows, 1, 1, Some(&gx));
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
}

// ---- attention ----
//
// Tolerances are max |got - want| over max |want| (`common::assert_close`); the
// references sum in f64, the kernels in f32.
// - attention forward: 1e-5; backward: 2e-5. Online softmax rescales, the GPU's
//   exp and log (a few ulp), and for the backward a difference dp - D whose terms
//   are larger than the result.

use common::fresh_seed;
use common::{assert_close, parity_context as context, poisoned, read, reduction_contexts};
use tidepool::kernels::{attention_backward_on, attention_forward_on, attention_subgroups, Target};
use tidepool::reference;
use tidepool::rng::Rng;

const ATT_FWD_TOL: f32 = 1e-5;
const ATT_BWD_TOL: f32 = 2e-5;

/// (b, t, c, nh) per compiled head-size variant (hs <= 16, <= 64, <= 128): t not a
/// multiple of any block (1, 5, 33, 67, 70, 100, 129, 130), head sizes 4, 8, 12, 16,
/// 64, 96, 128, and GPT-2's layer natively. The browser (SwiftShader) gets smaller
/// shapes, and the hs <= 128 variant (the same template as hs <= 64 with a larger
/// HS4, whose pipelines take SwiftShader about ten seconds to compile) only in the
/// two tests of its own below, where WebGPU's workgroup memory limit is the point.
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
    attention_body(ATT_SMALL_HEADS, None)
);
gpu_test!(
    attention_hs64_matches_reference,
    attention_body(ATT_HS64, None)
);
// Head size 128 needs 24 KiB of workgroup memory in the GPU kernels: WebGPU's default
// is 16 KiB, SwiftShader and real GPUs offer 32 KiB or more (the context asks for all
// the adapter has). Where the device offers it, parity; where not, the planner
// refuses such a model before any GPU work, naming the limit.
gpu_test!(
    attention_hs128_matches_reference,
    attention_hs128_body(&[(1, 70, 192, 2), (1, 129, 128, 1)], None)
);
// With dropout on the probabilities (nanoGPT's attn_dropout): the mask recomputed
// from (seed, index) in the forward's numerator and in both backward kernels.
gpu_test!(
    attention_small_heads_with_dropout_match_reference,
    attention_body(ATT_SMALL_HEADS, Some(0.2))
);
gpu_test!(
    attention_hs64_with_dropout_matches_reference,
    attention_body(ATT_HS64, Some(0.35))
);
gpu_test!(
    attention_hs128_with_dropout_matches_reference,
    attention_hs128_body(&[(2, 67, 192, 2)], Some(0.1))
);

/// Parity at head size 128 where this device has the workgroup memory for it;
/// otherwise the clear refusal a user gets instead.
async fn attention_hs128_body(shapes: &[(usize, usize, usize, usize)], dropout: Option<f32>) {
    let ctx = context().await;
    let need = tidepool::plan::attention_workgroup_bytes(128);
    let limits = tidepool::plan::DeviceLimits::from_wgpu(ctx.limits());
    if limits.max_workgroup_storage_bytes >= need {
        drop(ctx);
        return attention_body(shapes, dropout).await;
    }
    let cfg = tidepool::train::TrainConfig {
        width: 128,
        heads: 1,
        batch: 1,
        context: 8,
        ..tidepool::train::TrainConfig::preset("tiny").expect("tiny")
    };
    let err = tidepool::plan::check(&cfg, 65, &limits)
        .expect_err("head size 128 without the workgroup memory is refused");
    let msg = err.to_string();
    assert!(
        msg.contains("workgroup memory") && msg.contains("heads"),
        "the refusal names the limit and the setting: {msg}"
    );
}

/// `dropout`: the drop probability, with a fresh mask seed. Every shape runs through
/// both kernel tunings ([`Target`]), each on fresh inputs, and the GPU tuning
/// with each exchange of half dots the device has: by subgroup shuffles on
/// the context with subgroups (`reduction_contexts`' first, where the device has
/// them), by shared memory on the one without. The CPU tuning, which has no
/// exchange, runs on the first context only.
async fn attention_body(shapes: &[(usize, usize, usize, usize)], dropout: Option<f32>) {
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    let contexts = reduction_contexts().await;
    for (i, (_, ctx)) in contexts.iter().enumerate() {
        let info = ctx.adapter_info();
        let shuffles = attention_subgroups(ctx);
        if ctx.subgroups() {
            assert!(
                shuffles || info.subgroup_min_size < 2,
                "{}: subgroups {} to {} wide, but the attention kernels do not use them",
                ctx.adapter_name(),
                info.subgroup_min_size,
                info.subgroup_max_size
            );
        } else {
            assert!(
                !shuffles,
                "subgroup shuffles on a context without subgroups"
            );
        }
        let exchange = if shuffles {
            "pairs by subgroup shuffles"
        } else {
            "pairs by shared memory"
        };
        let targets: &[Target] = if i == 0 { &Target::ALL } else { &[Target::Gpu] };
        attention_on(ctx, targets, exchange, shapes, dropout, &mut rng, seed).await;
    }
}

async fn attention_on(
    ctx: &tidepool::gpu::WgpuContext,
    targets: &[Target],
    exchange: &str,
    shapes: &[(usize, usize, usize, usize)],
    dropout: Option<f32>,
    rng: &mut Rng,
    seed: u64,
) {
    for &(b, t, c, nh) in shapes {
        for &target in targets {
            let dropout = dropout.map(|p| reference::AttnDropout {
                p,
                seed: rng.next_u64() as u32,
            });
            // Spread like trained activations: scores of a few units, peaked softmaxes.
            let qkv = rng.vec(b * t * 3 * c, -2.0, 2.0);
            let dout = rng.vec(b * t * c, -1.0, 1.0);
            let (g_qkv, g_dout) = (ctx.upload(&qkv), ctx.upload(&dout));
            let (out, saved) = poisoned(ctx, &[b * nh * t, b * t * c], || {
                attention_forward_on(ctx, target, &g_qkv, b, t, c, nh, dropout)
            });
            let (want_out, att) = reference::attention_forward(&qkv, b, t, c, nh, dropout);
            let what = format!(
                "{target:?} kernels ({exchange}), b {b} t {t} c {c} nh {nh} dropout {dropout:?}"
            );
            let got = read(ctx, &out, b * t * c).await;
            assert_close(
                &format!("attention_forward {what}"),
                &got,
                &want_out,
                ATT_FWD_TOL,
                seed,
            );

            // The CPU kernels' two passes also draw D's buffer; the GPU's one does not.
            let outputs: &[usize] = match target {
                Target::Gpu => &[b * t * 3 * c],
                Target::Cpu => &[b * nh * t, b * t * 3 * c],
            };
            let dqkv = poisoned(ctx, outputs, || {
                attention_backward_on(
                    ctx, target, &g_dout, &g_qkv, &out, &saved, b, t, c, nh, dropout,
                )
            });
            let got = read(ctx, &dqkv, b * t * 3 * c).await;
            let want = reference::attention_backward(&dout, &qkv, &att, b, t, c, nh, dropout);
            assert_close(
                &format!("attention_backward {what}"),
                &got,
                &want,
                ATT_BWD_TOL,
                seed,
            );
        }
    }
}

// ---- dropout ----

// The masks' GPU side is checked where each is applied, bit for bit against
// `reference::dropout`: embedding (`encoder_forward_dropout_is_exact`), residual
// branches (`residual_branch_dropout_mask_is_exact`), layernorm backward
// (`layernorm_backward_with_residual_matches_reference`) and attention.
#[cfg(not(target_arch = "wasm32"))]
mod dropout {
    use tidepool::reference;

    #[test]
    fn dropout_mask_has_the_right_rate_and_depends_on_the_seed() {
        let x = vec![1.0f32; 200_000];
        for p in [0.1f32, 0.2, 0.5] {
            let out = reference::dropout(&x, p, 7);
            let dropped = out.iter().filter(|v| **v == 0.0).count() as f32 / x.len() as f32;
            assert!((dropped - p).abs() < 0.005, "p {p}: dropped {dropped}");
            let kept = out.iter().find(|v| **v != 0.0).unwrap();
            assert_eq!(*kept, 1.0 / (1.0 - p), "kept values are scaled up");
        }
        assert_ne!(
            reference::dropout(&x, 0.5, 1),
            reference::dropout(&x, 0.5, 2)
        );
        assert_ne!(
            reference::dropout_seed(1, 1, 0),
            reference::dropout_seed(1, 2, 0),
            "steps get new masks"
        );
        assert_ne!(
            reference::dropout_seed(1, 1, 0),
            reference::dropout_seed(1, 1, 1)
        );
    }
}

// ---- block reductions: both preludes compile everywhere ----
//
// The kernels' parity tests above run each block-reduction variant the device has
// (`common::reduction_contexts`); this compiles both with naga, as wgpu's Vulkan
// backend would, so the subgroup one is checked even where no device offers it.
#[cfg(not(target_arch = "wasm32"))]
mod reductions {
    use tidepool::kernels::{prelude_kernels, source_for};

    #[test]
    fn prelude_kernels_compile_to_spirv_with_either_reduction() {
        use naga::valid::{Capabilities, ShaderStages, SubgroupOperationSet, Validator};
        let kernels = prelude_kernels();
        assert!(kernels.len() >= 10, "{} kernels", kernels.len());
        for kernel in &kernels {
            assert!(
                kernel.source.contains("fn block_sum("),
                "{}: not joined after the prelude",
                kernel.name
            );
            for subgroups in [false, true] {
                let what = format!("{} (subgroups {subgroups})", kernel.name);
                let source = source_for(kernel, subgroups);
                assert_eq!(
                    source.contains("subgroupAdd"),
                    subgroups,
                    "{what}: the prelude was not swapped as asked"
                );
                let module = naga::front::wgsl::parse_str(&source)
                    .unwrap_or_else(|e| panic!("{what}: {}", e.emit_to_string(&source)));
                let caps = if subgroups {
                    Capabilities::SUBGROUP
                } else {
                    Capabilities::empty()
                };
                let info = Validator::new(naga::valid::ValidationFlags::all(), caps)
                    .subgroup_stages(ShaderStages::COMPUTE)
                    .subgroup_operations(SubgroupOperationSet::all())
                    .validate(&module)
                    .unwrap_or_else(|e| panic!("{what}: {}", e.emit_to_string(&source)));
                let options = naga::back::spv::Options {
                    lang_version: (1, 3),
                    ..Default::default()
                };
                let words = naga::back::spv::write_vec(&module, &info, &options, None)
                    .unwrap_or_else(|e| panic!("{what}: SPIR-V: {e}"));
                // OpCapability (17) GroupNonUniformArithmetic (63): the subgroup adds and
                // maxes reach the SPIR-V (naga writes every function), only with subgroups.
                let arithmetic = words.windows(2).any(|w| w == [(2 << 16) | 17, 63]);
                assert_eq!(arithmetic, subgroups, "{what}");
            }
        }
    }
}

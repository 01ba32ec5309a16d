//! The optimizer kernels against their CPU reference (`tidepool::reference`): the
//! multi-tensor step (sums of squares, global norm and clipping scale, AdamW) in
//! both kernel tunings, with many and few tensors a dispatch, moments in one or
//! several arena chunks, and gradients whole or as split partials; and scaling in
//! place. Natively and in headless Chromium.

mod common;

use common::fresh_seed;
use common::{assert_close, context, poisoned, read, reduction_contexts};
use tidepool::kernels::{
    self, AdamW, ArenaLayout, Arenas, GradArena, GradLayout, Moments, ParamArena, SplitSum, Target,
    TensorsPerDispatch,
};
use tidepool::reference as cpu;
use tidepool::rng::Rng;
use tidepool::WgpuContext;

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

fn normals(rng: &mut Rng, n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|_| rng.normal() * scale).collect()
}

/// Largest tensor drawn: past one GPU sum-of-squares part (1024 floats) and, natively,
/// past one CPU-adapter part (65536) and the 256 parts of the GPU tuning.
#[cfg(not(target_arch = "wasm32"))]
const MAX_LEN: usize = 300_000;
#[cfg(target_arch = "wasm32")]
const MAX_LEN: usize = 70_000;

/// `count` tensor lengths, none a multiple of the workgroup (256): every other one
/// drawn from sizes around the kernels' parts and spans, the rest odd and spread up
/// to `MAX_LEN / 4`.
fn lengths(rng: &mut Rng, count: usize) -> Vec<usize> {
    let edges = [1, 7, 1023, 4097, 65_537, MAX_LEN - 1];
    (0..count)
        .map(|i| {
            if i % 2 == 0 {
                edges[rng.below(edges.len())]
            } else {
                1 + rng.below(MAX_LEN / 8) * 2
            }
        })
        .collect()
}

/// The cases' hyperparameters at `step`.
fn hyper(step: u32) -> AdamW {
    AdamW {
        lr: 1e-2,
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        weight_decay: 0.1,
        step,
    }
}

/// What one case runs on the GPU and on the host.
struct Case {
    params: Vec<Vec<f32>>,
    m: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    decay: Vec<bool>,
}

gpu_test!(adamw_step_matches_reference, step_body());
/// Tolerances, relative to the largest value of each tensor: 1e-5 for the norm and
/// the scale (f32 sums in a fixed tree against f64), 1e-5 for parameters and moments
/// after each of three steps (elementwise f32 against f64, one sqrt and divide each).
async fn step_body() {
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    let small = TensorsPerDispatch {
        sumsq: 3,
        adamw: 2,
        sums: 2,
    };
    let one = TensorsPerDispatch {
        sumsq: 1,
        adamw: 1,
        sums: 1,
    };
    for (reductions, ctx) in reduction_contexts().await {
        for target in Target::ALL {
            let device = TensorsPerDispatch::of(&ctx).for_target(target);
            // Counts below and above each setting's tensors a dispatch.
            for (count, per) in [
                (1, device),
                (5, small),
                (3, one),
                (device.adamw + 3, device),
            ] {
                // Several arena chunks where one tensor's moments fill most of a chunk.
                for chunked in [false, true] {
                    let what = format!(
                        "{reductions}, {target:?}, {count} tensors, {per:?}, chunked {chunked}"
                    );
                    run_case(&ctx, &mut rng, target, count, per, chunked, &what, seed).await;
                }
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn run_case(
    ctx: &WgpuContext,
    rng: &mut Rng,
    target: Target,
    count: usize,
    per: TensorsPerDispatch,
    chunked: bool,
    what: &str,
    seed: u64,
) {
    let lens = lengths(rng, count);
    let mut case = Case {
        params: lens.iter().map(|&n| normals(rng, n, 0.5)).collect(),
        // Moments as a resumed run has them: v positive.
        m: lens.iter().map(|&n| normals(rng, n, 0.01)).collect(),
        v: lens
            .iter()
            .map(|&n| normals(rng, n, 0.01).iter().map(|x| x * x).collect())
            .collect(),
        decay: lens.iter().map(|_| rng.below(2) == 1).collect(),
    };
    let max_binding = if chunked {
        // The largest tensor and the header fill a chunk: no other tensor shares it.
        ArenaLayout::binding_bytes_for(*lens.iter().max().unwrap())
    } else {
        ctx.max_binding_size()
    };
    let layout = ArenaLayout::new(&lens, max_binding).unwrap();
    let moments = Moments::from_values_in(ctx, layout.clone(), &case.m, &case.v).unwrap();
    assert!(!chunked || count == 1 || moments.chunks() > 1, "{what}");
    let params = ParamArena::upload_in(ctx, layout, &case.params).unwrap();
    for step in 1..=3u32 {
        // About half the gradients as split partials (as a backward leaves them for
        // the optimizer), the reference's gradient their sum.
        let splits = split_counts(rng, &lens);
        let parts: Vec<Vec<f32>> = lens
            .iter()
            .zip(&splits)
            .map(|(&n, &s)| match s {
                1 => normals(rng, n, 0.1),
                _ => exact_partials(rng, n * s),
            })
            .collect();
        let grads: Vec<Vec<f32>> = parts
            .iter()
            .zip(&lens)
            .map(|(part, &n)| sum_partials(part, n))
            .collect();
        let grad_layout = GradLayout::new(params.layout(), &splits, ctx.max_binding_size());
        let gpu_grads = GradArena::upload(ctx, &grad_layout, &params, &parts, &splits).unwrap();
        let total: f64 = grads.iter().map(|g| cpu::grad_sumsq(g)).sum();
        let norm = total.sqrt() as f32;
        // Off, above the norm (no clip), below it (clip).
        let max_norm = [0.0, norm * 2.0, norm * 0.25][step as usize - 1];
        let hp = hyper(step);
        let what = format!("{what}, splits {splits:?}");
        // [norm, scale] also go to a report at a slot that moves with the step; the
        // floats around it must stay as they were.
        let report = ctx.upload(&[f32::NAN; 8]);
        let slot = step as usize;
        let before = ctx.counters().dispatches;
        let scratch = kernels::scratch_floats(target, &lens);
        ctx.scope(|| {
            poisoned(ctx, &[scratch], || {
                let report = Some((&report, slot));
                let arenas = Arenas {
                    params: &params,
                    grads: &gpu_grads,
                    moments: &moments,
                };
                let decay = &case.decay;
                kernels::adamw_step_on(ctx, target, per, arenas, decay, &hp, max_norm, report)
            })
        });
        let dispatches = ctx.counters().dispatches - before;
        let passes = count.div_ceil(per.sumsq) + count.div_ceil(per.adamw);
        if moments.chunks() == 1 {
            assert_eq!(dispatches as usize, passes + 1, "dispatches, {what}");
        } else {
            // One norm a chunk; a dispatch of either pass never spans two chunks.
            let most = passes + 3 * moments.chunks() - 2;
            assert!(
                dispatches as usize <= most,
                "dispatches {dispatches}, {what}"
            );
        }

        let (want_norm, scale) = cpu::clip_scale(total, max_norm);
        // The size of the terms of m = b1 m + (1 - b1) g scale, per tensor: they can
        // cancel far below themselves (a 1-float tensor failed at 1e-4 of its m with
        // seed 1796091820432961241), so m's error is measured against them.
        let m_terms: Vec<f32> = case
            .m
            .iter()
            .zip(&grads)
            .map(|(m, g)| {
                m.iter().zip(g).fold(0.0f32, |most, (m, g)| {
                    most.max(hp.beta1 * m.abs())
                        .max((1.0 - hp.beta1) * (g * scale).abs())
                })
            })
            .collect();
        // The size of the terms of param - lr * update, per tensor: like m, they can
        // cancel far below themselves (a 1-float tensor failed at 7.6e-5 of its value
        // with seed 1796108118462051672), so param's error is measured against them.
        let params_before = case.params.clone();
        let Case {
            params: host,
            m,
            v,
            decay,
        } = &mut case;
        for ((((param, grad), m), v), &decay) in
            host.iter_mut().zip(&grads).zip(m).zip(v).zip(&*decay)
        {
            let hp = AdamW {
                weight_decay: if decay { hp.weight_decay } else { 0.0 },
                ..hp
            };
            cpu::adamw_update(param, grad, m, v, &hp, scale);
        }
        let what = format!("{what}, step {step}, max_norm {max_norm}");
        let got = ctx
            .download::<f32>(moments.norm_scale(), 2)
            .await
            .expect("download");
        assert_close(
            &format!("norm, {what}"),
            &got[..1],
            &[want_norm],
            1e-5,
            seed,
        );
        assert_close(&format!("scale, {what}"), &got[1..], &[scale], 1e-5, seed);
        let reported = read(ctx, &report, 8).await;
        for (i, r) in reported.iter().enumerate() {
            match i.checked_sub(slot) {
                Some(k @ (0 | 1)) => {
                    assert_eq!(r.to_bits(), got[k].to_bits(), "report {i}: {what}")
                }
                _ => assert!(r.is_nan(), "report {i} written outside its slot: {what}"),
            }
        }
        if step == 3 {
            assert!(got[1] < 0.3, "clipped: {what}");
        } else {
            assert_eq!(got[1], 1.0, "not clipped: {what}");
        }
        let (m, v) = moments.download(ctx).await.expect("download");
        let got_params = params.download(ctx).await.expect("download");
        for i in 0..count {
            let n = lens[i];
            let tensor = format!("tensor {i} of {n}, {what}");
            let got = &got_params[i];
            let p_terms = params_before[i]
                .iter()
                .zip(&case.params[i])
                .fold(0.0f32, |most, (b, a)| most.max(b.abs()).max((b - a).abs()));
            // Appending the terms' size to both sides adds no error, only scale.
            let with = |x: &[f32], terms: f32| [x, &[terms]].concat();
            assert_close(
                &format!("param, {tensor}"),
                &with(got, p_terms),
                &with(&case.params[i], p_terms),
                1e-5,
                seed,
            );
            let with_terms = |x: &[f32]| with(x, m_terms[i]);
            assert_close(
                &format!("m, {tensor}"),
                &with_terms(&m[i]),
                &with_terms(&case.m[i]),
                1e-5,
                seed,
            );
            assert_close(&format!("v, {tensor}"), &v[i], &case.v[i], 1e-5, seed);
        }
    }
}

/// Split partials for about half of the tensors of `lens`: 2 to 9 of them, as many as
/// keep the partials under `MAX_LEN` floats; 1 (the gradient itself) for the rest.
fn split_counts(rng: &mut Rng, lens: &[usize]) -> Vec<usize> {
    lens.iter()
        .map(|&n| match rng.below(2) {
            0 => 1,
            _ => (2 + rng.below(8)).min(MAX_LEN / n).max(1),
        })
        .collect()
}

/// `n` partials whose sums are exact in f32 whatever the order (multiples of 2^-13
/// under 0.13): a sum that cancels to near zero would otherwise turn AdamW's first
/// step, g / |g|, on the order of its rounding.
fn exact_partials(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| (rng.below(2001) as f32 - 1000.0) / 8192.0)
        .collect()
}

/// The gradient of `[splits, n]` partials, summed in f64.
fn sum_partials(part: &[f32], n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            part.iter()
                .skip(i)
                .step_by(n)
                .map(|&x| f64::from(x))
                .sum::<f64>() as f32
        })
        .collect()
}

gpu_test!(
    split_gradients_step_as_their_sums_bit_for_bit,
    split_bits_body()
);
/// Exact: a step reading gradients as split partials and one reading their sums
/// (`sum_splits_together`, as the backward made them before it left them to the
/// optimizer) write the same bits: both add the partials in one order.
async fn split_bits_body() {
    let ctx = context().await;
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    let target = Target::of(&ctx);
    let per = TensorsPerDispatch::of(&ctx).for_target(target);
    let lens = lengths(&mut rng, 6);
    let splits: Vec<usize> = lens
        .iter()
        .map(|&n| (2 + rng.below(8)).min(MAX_LEN / n).max(2))
        .collect();
    let parts: Vec<Vec<f32>> = lens
        .iter()
        .zip(&splits)
        .map(|(&n, &s)| normals(&mut rng, n * s, 0.1))
        .collect();
    let params: Vec<Vec<f32>> = lens.iter().map(|&n| normals(&mut rng, n, 0.5)).collect();
    let gpu_parts: Vec<_> = parts.iter().map(|p| ctx.upload(p)).collect();
    let sums: Vec<_> = lens
        .iter()
        .map(|&n| ctx.upload(&vec![f32::NAN; n]))
        .collect();
    let split_sums: Vec<SplitSum> = gpu_parts
        .iter()
        .zip(&sums)
        .zip(lens.iter().zip(&splits))
        .map(|((part, out), (&len, &splits))| SplitSum {
            part: part.into(),
            out: out.into(),
            len,
            splits,
        })
        .collect();
    ctx.scope(|| kernels::sum_splits_together(&ctx, per, &split_sums));
    let mut summed = Vec::new();
    for (sum, &n) in sums.iter().zip(&lens) {
        summed.push(read(&ctx, sum, n).await);
    }
    let hp = hyper(1);
    let mut results = Vec::new();
    for from_partials in [false, true] {
        let moments = Moments::zeroed(&ctx, &lens).unwrap();
        let gpu_params = ParamArena::upload_in(&ctx, moments.layout().clone(), &params).unwrap();
        let (grads, grad_splits) = if from_partials {
            (&parts, splits.clone())
        } else {
            (&summed, vec![1; lens.len()])
        };
        let layout = GradLayout::new(gpu_params.layout(), &grad_splits, ctx.max_binding_size());
        let gpu_grads = GradArena::upload(&ctx, &layout, &gpu_params, grads, &grad_splits).unwrap();
        let decay: Vec<bool> = (0..lens.len()).map(|i| i % 2 == 0).collect();
        ctx.scope(|| {
            kernels::adamw_step(
                &ctx,
                &gpu_params,
                &gpu_grads,
                &decay,
                &moments,
                &hp,
                1.0,
                None,
            )
        });
        let norm = read(&ctx, moments.norm_scale(), 2).await;
        let (m, v) = moments.download(&ctx).await.unwrap();
        let mut got = vec![norm, m.concat(), v.concat()];
        got.extend(gpu_params.download(&ctx).await.unwrap());
        results.push(got);
    }
    let bits = |x: &Vec<Vec<f32>>| -> Vec<Vec<u32>> {
        x.iter()
            .map(|v| v.iter().map(|f| f.to_bits()).collect())
            .collect()
    };
    assert_eq!(
        bits(&results[0]),
        bits(&results[1]),
        "norm, moments and params from partials against from their sums: lens {lens:?}, \
         splits {splits:?}, seed {seed}"
    );
}

gpu_test!(
    parameters_and_moments_round_trip_through_their_arenas,
    arenas_body()
);
/// Exact: uploads and downloads copy bits; each tensor's range binds its values and
/// nothing else; new moments are zero.
async fn arenas_body() {
    let ctx = context().await;
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    let lens = lengths(&mut rng, 7);
    let chunk = ArenaLayout::binding_bytes_for(*lens.iter().max().unwrap());
    let zero = Moments::zeroed_in(&ctx, ArenaLayout::new(&lens, chunk).unwrap()).unwrap();
    assert!(zero.chunks() > 1);
    let (m, v) = zero.download(&ctx).await.unwrap();
    for (i, &n) in lens.iter().enumerate() {
        assert_eq!((m[i].len(), v[i].len()), (n, n));
        assert!(m[i].iter().chain(&v[i]).all(|&x| x == 0.0), "tensor {i}");
    }
    let m: Vec<Vec<f32>> = lens.iter().map(|&n| normals(&mut rng, n, 1.0)).collect();
    let v: Vec<Vec<f32>> = lens.iter().map(|&n| normals(&mut rng, n, 1.0)).collect();
    for max_binding in [ctx.max_binding_size(), chunk] {
        let layout = ArenaLayout::new(&lens, max_binding).unwrap();
        let moments = Moments::from_values_in(&ctx, layout.clone(), &m, &v).unwrap();
        assert_eq!(moments.len(), lens.len());
        assert_eq!(
            moments.download(&ctx).await.unwrap(),
            (m.clone(), v.clone())
        );
        let params = ParamArena::upload_in(&ctx, layout, &m).unwrap();
        assert_eq!(params.download(&ctx).await.unwrap(), m, "seed {seed}");
        let align = ctx.limits().min_storage_buffer_offset_alignment as u64;
        for (i, (range, &n)) in params.tensors().iter().zip(&lens).enumerate() {
            assert_eq!(range.size(), n as u64 * 4, "tensor {i}");
            assert!(range.offset().is_multiple_of(align), "tensor {i}");
            let first = (range.offset() / 4) as usize;
            let got = ctx
                .download_at::<f32>(range.buffer(), first, n)
                .await
                .unwrap();
            assert_eq!(got, m[i], "tensor {i}, seed {seed}");
        }
    }
    // A step's gradients: each weight finds its slot, at an aligned offset, of its
    // length times its room; a range that is no tensor's finds none.
    let layout = ArenaLayout::new(&lens, chunk).unwrap();
    let params = ParamArena::upload_in(&ctx, layout.clone(), &m).unwrap();
    let rooms: Vec<usize> = lens.iter().map(|_| 1 + rng.below(3)).collect();
    let grad_layout = GradLayout::new(&layout, &rooms, ctx.max_binding_size());
    let grads = GradArena::new(&ctx, &grad_layout, &params);
    let align = ctx.limits().min_storage_buffer_offset_alignment as u64;
    for (i, weight) in params.tensors().into_iter().enumerate() {
        assert_eq!(grads.index_of(weight), Some(i), "seed {seed}");
        let dest = grads.dest(i);
        assert_eq!((dest.len, dest.room), (lens[i], rooms[i]), "seed {seed}");
        assert_eq!(dest.range.size(), (rooms[i] * lens[i]) as u64 * 4);
        assert_eq!(dest.value().size(), lens[i] as u64 * 4);
        assert!(dest.range.offset().is_multiple_of(align));
        assert_eq!(grads.splits(i), 1);
    }
    let elsewhere = ctx.upload(&[0.0f32; 64]);
    assert_eq!(grads.index_of((&elsewhere).into()), None);
    // Slots of one chunk do not overlap.
    for i in 0..lens.len() {
        for j in i + 1..lens.len() {
            let (a, b) = (grads.dest(i).range, grads.dest(j).range);
            let apart = a.offset() + a.size() <= b.offset() || b.offset() + b.size() <= a.offset();
            assert!(
                a.buffer() != b.buffer() || apart,
                "slots {i} and {j}, seed {seed}"
            );
        }
    }

    // Refused: mismatched tensors, and one too large for a chunk.
    let layout = ArenaLayout::new(&lens, ctx.max_binding_size()).unwrap();
    assert!(Moments::from_values_in(&ctx, layout.clone(), &m, &v[1..]).is_err());
    assert!(ParamArena::upload_in(&ctx, layout, &m[1..]).is_err());
    let err = ArenaLayout::new(&[1000], 4000).err().unwrap();
    assert!(
        err.to_string().contains("binds at most 4000 bytes"),
        "{err}"
    );
}

gpu_test!(scale_in_place_matches_reference, scale_body());
/// Exact: one f32 multiply, as the reference.
async fn scale_body() {
    let ctx = context().await;
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for &n in &[1usize, 130, 70_001] {
        let mut x = normals(&mut rng, n, 1.0);
        let gx = ctx.upload(&x);
        let ns = ctx.upload(&[9.0f32, 0.37]);
        poisoned(&ctx, &[], || kernels::scale_in_place(&ctx, &gx, n, &ns));
        cpu::scale_in_place(&mut x, 0.37);
        assert_eq!(read(&ctx, &gx, n).await, x, "n {n}, seed {seed}");
    }
}

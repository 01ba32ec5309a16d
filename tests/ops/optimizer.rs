//! The optimizer kernels against their CPU reference (`tidepool::reference`): the
//! multi-tensor step (sums of squares, global norm and clipping scale, AdamW) in
//! both kernel tunings, with many and few tensors a dispatch, moments in one or
//! several arena chunks, and gradients whole or as split partials; the arenas; and
//! scaling in place. The reference's AdamW step and clipping by hand.

use crate::common::fresh_seed;
use crate::gpu_test;
use crate::support::*;
use tidepool::arena::{ArenaLayout, GradLayout};
use tidepool::kernels::{
    self, Arenas, GradArena, Moments, OptimizerStep, ParamArena, SplitSum, Target,
    TensorsPerDispatch,
};
use tidepool::reference::{self as cpu, AdamW};
use tidepool::rng::Rng;
use tidepool::WgpuContext;

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
                    let case = CaseShape {
                        target,
                        count,
                        per,
                        chunked,
                    };
                    run_case(&ctx, &mut rng, case, &what, seed).await;
                }
            }
        }
    }
}

/// One case's tuning, tensors, tensors a dispatch and whether the moments take
/// several arena chunks.
#[derive(Clone, Copy)]
struct CaseShape {
    target: Target,
    count: usize,
    per: TensorsPerDispatch,
    chunked: bool,
}

async fn run_case(ctx: &WgpuContext, rng: &mut Rng, shape: CaseShape, what: &str, seed: u64) {
    let CaseShape {
        target,
        count,
        per,
        chunked,
    } = shape;
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
                let step = OptimizerStep {
                    hp,
                    max_norm,
                    decay: &case.decay,
                    report: Some((&report, slot)),
                    target: Some(target),
                    per_dispatch: Some(per),
                };
                let arenas = Arenas {
                    params: &params,
                    grads: &gpu_grads,
                    moments: &moments,
                };
                step.run(ctx, arenas)
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
    let target = ctx.kernel_target();
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
        let step = OptimizerStep {
            hp,
            max_norm: 1.0,
            decay: &decay,
            report: None,
            target: None,
            per_dispatch: None,
        };
        let arenas = Arenas {
            params: &gpu_params,
            grads: &gpu_grads,
            moments: &moments,
        };
        ctx.scope(|| step.run(&ctx, arenas));
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

#[cfg(not(target_arch = "wasm32"))]
#[test]
fn adamw_reference_first_step_and_clip_scale() {
    // Step 1 from zero moments: m_hat = g, v_hat = g^2, so the step is
    // lr * (sign(g) + weight_decay * param) up to eps.
    let hp = AdamW {
        lr: 0.1,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.5,
        step: 1,
    };
    let mut param = vec![1.0f32, -2.0, 0.5];
    let grad = [0.3f32, -4.0, 0.0];
    let (mut m, mut v) = (vec![0.0; 3], vec![0.0; 3]);
    cpu::adamw_update(&mut param, &grad, &mut m, &mut v, &hp, 0.5);
    let want = [
        1.0 - 0.1 * (1.0 + 0.5),
        -2.0 - 0.1 * (-1.0 - 1.0),
        0.5 - 0.1 * 0.25,
    ];
    for (p, w) in param.iter().zip(want) {
        assert!((p - w).abs() < 1e-6, "param {p} want {w}");
    }
    assert!(
        (m[1] - 0.1 * -2.0).abs() < 1e-6,
        "m uses the scaled gradient"
    );
    assert!(
        (v[1] - 0.001 * 4.0).abs() < 1e-7,
        "v uses the scaled gradient"
    );

    assert_eq!(cpu::clip_scale(16.0, 0.0), (4.0, 1.0));
    assert_eq!(cpu::clip_scale(16.0, 5.0), (4.0, 1.0));
    let (norm, scale) = cpu::clip_scale(16.0, 1.0);
    assert_eq!(norm, 4.0);
    assert!((scale - 0.25).abs() < 1e-6);
    assert_eq!(cpu::grad_sumsq(&[3.0, -4.0]), 25.0);
}

gpu_test!(f16_weight_copy_follows_the_parameters, f16_copy_body());
/// Exact: the f16 copy of each weight holds its values rounded to nearest even (the
/// `half` crate's rounding, not the shader's), is written once until the parameters
/// change, and after an AdamW step holds the new values.
async fn f16_copy_body() {
    use tidepool::config::Precision;
    let options = tidepool::gpu::ContextOptions {
        precision: Precision::F16,
        f16_weights: true,
        ..Default::default()
    };
    let ctx = match WgpuContext::with_options(options).await {
        Ok(ctx) => ctx,
        Err(e) => {
            // Only an adapter without shader-f16 refuses (Chromium's SwiftShader);
            // natively lavapipe has it.
            let plain = context().await;
            let f16 = plain
                .adapter_features()
                .contains(wgpu::Features::SHADER_F16);
            assert!(!f16, "refused although the adapter offers shader-f16: {e}");
            return;
        }
    };
    assert!(
        kernels::matmul::reads_f16_weights(&ctx),
        "its f16 products read a copy"
    );
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    let lens = lengths(&mut rng, 5);
    // Values across f16's range: normals, tiny ones (subnormal in f16) and ones past
    // its largest finite value.
    let values = |rng: &mut Rng| -> Vec<Vec<f32>> {
        lens.iter()
            .map(|&n| {
                let mut v = normals(rng, n, 1.0);
                for (i, x) in v.iter_mut().enumerate() {
                    *x *= [1.0, 1e-6, 1e5][i % 3];
                }
                v
            })
            .collect()
    };
    let compare = |got: Vec<u32>, want: &[f32], what: String| {
        let bits: Vec<u16> = got
            .iter()
            .flat_map(|w| [*w as u16, (w >> 16) as u16])
            .collect();
        for (j, &x) in want.iter().enumerate() {
            let exact = half::f16::from_f32(x).to_bits();
            assert_eq!(bits[j], exact, "{what}: element {j} ({x:e}), seed {seed}");
        }
    };

    let layout = ArenaLayout::new(&lens, ctx.max_binding_size()).unwrap();
    let first = values(&mut rng);
    // Without a copy asked for, none; the trainer asks where this holds.
    let plain = ParamArena::upload_in(&ctx, layout.clone(), &first).unwrap();
    assert!(plain.f16_weights(&ctx).is_none());
    let params = plain.with_f16_copy(&ctx);
    for (i, copy) in f16_copies(&ctx, &params, &first, "uploaded") {
        let words = (copy.size() / 4) as usize;
        compare(
            ctx.download::<u32>(copy, words).await.unwrap(),
            &first[i],
            format!("tensor {i}"),
        );
    }
    // Unchanged parameters: nothing is rewritten.
    let before = ctx.counters().dispatches;
    f16_copies(&ctx, &params, &first, "again");
    assert_eq!(
        ctx.counters().dispatches,
        before,
        "a copy rewritten with nothing changed"
    );

    // An AdamW step changes every parameter; the next use rewrites the copy.
    let moments = Moments::zeroed_in(&ctx, layout.clone()).unwrap();
    let grads: Vec<Vec<f32>> = lens.iter().map(|&n| normals(&mut rng, n, 0.1)).collect();
    let ones = vec![1; lens.len()];
    let grad_layout = GradLayout::new(&layout, &ones, ctx.max_binding_size());
    let gpu_grads = GradArena::upload(&ctx, &grad_layout, &params, &grads, &ones).unwrap();
    let decay: Vec<bool> = lens.iter().map(|_| true).collect();
    let step = OptimizerStep {
        hp: hyper(1),
        max_norm: 0.0,
        decay: &decay,
        report: None,
        target: None,
        per_dispatch: None,
    };
    let arenas = Arenas {
        params: &params,
        grads: &gpu_grads,
        moments: &moments,
    };
    ctx.scope(|| step.run(&ctx, arenas));
    let stepped = params.download(&ctx).await.unwrap();
    assert_ne!(stepped, first, "the step changed the parameters");
    for (i, copy) in f16_copies(&ctx, &params, &stepped, "stepped") {
        let words = (copy.size() / 4) as usize;
        compare(
            ctx.download::<u32>(copy, words).await.unwrap(),
            &stepped[i],
            format!("stepped tensor {i}"),
        );
    }

    // A context told to read the f32 weights reads no copy.
    let options = tidepool::gpu::ContextOptions {
        precision: Precision::F16,
        f16_weights: false,
        ..Default::default()
    };
    let plain = WgpuContext::with_options(options).await.unwrap();
    assert!(!kernels::matmul::reads_f16_weights(&plain));
}

/// The f16 copy of each of `params`' tensors (`want`: their values) that binds, after
/// checking where each lies; every tensor whose copy's offset is a binding offset has
/// one.
fn f16_copies<'a>(
    ctx: &WgpuContext,
    params: &'a ParamArena,
    want: &[Vec<f32>],
    what: &str,
) -> Vec<(usize, tidepool::gpu::Slice<'a>)> {
    let halves = params.f16_weights(ctx).expect("an f16 copy");
    let align = ctx.limits().min_storage_buffer_offset_alignment as u64;
    let mut copies = Vec::new();
    for (i, weight) in params.tensors().into_iter().enumerate() {
        match halves.of(weight) {
            Some(copy) => {
                assert!(copy.offset().is_multiple_of(align), "{what}: tensor {i}");
                // Whole vec4s of halves: the shaders read the copy as vec4<f16>.
                let vec4s = want[i].len().div_ceil(4) as u64;
                assert_eq!(copy.size(), vec4s * 8, "{what}: tensor {i}");
                copies.push((i, copy));
            }
            None => assert!(
                !(weight.offset() / 2).is_multiple_of(align),
                "{what}: tensor {i}"
            ),
        }
    }
    assert!(
        !copies.is_empty(),
        "{what}: the first tensor's copy binds at least"
    );
    copies
}

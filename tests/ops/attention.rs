//! Causal self-attention: the GPU kernels (both tunings; the GPU tuning's paired
//! kernels with both exchanges of partial dots, and its tiled kernels) against the
//! reference, the reference's backward against finite differences.
//!
// Tolerances are max |got - want| over max |want| (`common::assert_close`); the
// references sum in f64, the kernels in f32.
// - attention forward: 1e-5; backward: 2e-5. Online softmax rescales, the GPU's
//   exp and log (a few ulp), and for the backward a difference dp - D whose terms
//   are larger than the result.

use crate::common::fresh_seed;
use crate::gpu_test;
use crate::support::*;
use tidepool::kernels::{
    attention_subgroups, Attention, AttentionSaved, GpuAttention, Target, SHUFFLE_ROW_THREADS,
};
use tidepool::reference::{self, AttentionShape};
use tidepool::rng::Rng;

const ATT_FWD_TOL: f32 = 1e-5;
const ATT_BWD_TOL: f32 = 2e-5;

/// (b, t, c, nh) per compiled head-size variant (hs <= 16, <= 64, <= 128): t not a
/// multiple of any block (1, 5, 33, 37, 67, 70, 100, 129, 130), head sizes 4, 5, 8,
/// 12, 16, 63, 64, 96, 128, and GPT-2's layer natively. Heads of 5 and 63 channels
/// take the paired kernels' float variant, the others their vec4 one. The browser (SwiftShader) gets smaller
/// shapes, and the hs <= 128 variant (the same template as hs <= 64 with a larger
/// HS4, whose pipelines take SwiftShader about ten seconds to compile) only in the
/// two tests of its own below, where WebGPU's workgroup memory limit is the point.
#[cfg(not(target_arch = "wasm32"))]
const ATT_SMALL_HEADS: &[(usize, usize, usize, usize)] = &[
    (1, 1, 4, 1),
    (2, 5, 16, 2),
    (1, 33, 32, 2),
    (2, 70, 36, 3),
    (2, 37, 10, 2),
];
#[cfg(target_arch = "wasm32")]
const ATT_SMALL_HEADS: &[(usize, usize, usize, usize)] =
    &[(1, 1, 4, 1), (2, 5, 16, 2), (1, 33, 32, 2), (1, 37, 10, 2)];
#[cfg(not(target_arch = "wasm32"))]
const ATT_HS64: &[(usize, usize, usize, usize)] = &[
    (2, 100, 128, 2),
    (1, 130, 64, 1),
    (2, 256, 384, 6),
    (1, 67, 126, 2),
];
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
    let need = Attention::workgroup_bytes(Target::Gpu, 128);
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
/// both kernel tunings ([`Target`]), each on fresh inputs, and the GPU tuning's
/// paired kernels with each exchange of partial dots the device has: by subgroup
/// shuffles on the context with subgroups (`reduction_contexts`' first, where the
/// device has them), by shared memory on the one without. The CPU tuning, which
/// has no exchange, and the GPU tuning's tiled kernels (none either; heads of up to
/// 64 channels where the device has their workgroup memory) run on the first
/// context only.
async fn attention_body(shapes: &[(usize, usize, usize, usize)], dropout: Option<f32>) {
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    let contexts = reduction_contexts().await;
    for (i, (_, ctx)) in contexts.iter().enumerate() {
        let info = ctx.adapter_info();
        let shuffles = attention_subgroups(ctx);
        if ctx.subgroups() {
            assert!(
                shuffles || (info.subgroup_min_size as usize) < SHUFFLE_ROW_THREADS,
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
        let kernels: &[Kernels] = if i == 0 {
            &[
                (Target::Gpu, Some(GpuAttention::Paired)),
                (Target::Gpu, Some(GpuAttention::Tiled)),
                (Target::Cpu, None),
            ]
        } else {
            &[(Target::Gpu, Some(GpuAttention::Paired))]
        };
        attention_on(ctx, kernels, exchange, shapes, dropout, &mut rng, seed).await;
    }
}

/// A tuning, and the GPU tuning's kernels.
type Kernels = (Target, Option<GpuAttention>);

async fn attention_on(
    ctx: &tidepool::gpu::WgpuContext,
    kernels: &[Kernels],
    exchange: &str,
    shapes: &[(usize, usize, usize, usize)],
    dropout: Option<f32>,
    rng: &mut Rng,
    seed: u64,
) {
    for &(b, t, c, nh) in shapes {
        let shape = AttentionShape { b, t, c, heads: nh };
        for &(target, gpu_kernels) in kernels {
            let tiled = gpu_kernels == Some(GpuAttention::Tiled);
            if tiled && !Attention::tiled_runs(ctx, c / nh) {
                // Heads past 64 channels (or too little workgroup memory): the
                // paired kernels run those.
                assert!(c / nh > 64, "no tiled kernels for heads of {}", c / nh);
                continue;
            }
            let dropout = dropout.map(|p| reference::AttnDropout {
                p,
                seed: rng.next_u64() as u32,
            });
            let op = Attention {
                target: Some(target),
                dropout,
                gpu_kernels,
            };
            // Spread like trained activations: scores of a few units, peaked softmaxes.
            let qkv = rng.vec(b * t * 3 * c, -2.0, 2.0);
            let dout = rng.vec(b * t * c, -1.0, 1.0);
            let (g_qkv, g_dout) = (ctx.upload(&qkv), ctx.upload(&dout));
            let (out, lse) = poisoned(ctx, &[b * nh * t, b * t * c], || {
                op.forward(ctx, &g_qkv, shape)
            });
            let (want_out, att) = reference::attention_forward(&qkv, shape, dropout);
            let exchange = if tiled { "tiled" } else { exchange };
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

            // The CPU kernels' two passes and the tiled kernels' D pass also draw D's
            // buffer; the paired GPU backward does not.
            let outputs: &[usize] = if target == Target::Cpu || tiled {
                &[b * nh * t, b * t * 3 * c]
            } else {
                &[b * t * 3 * c]
            };
            let saved = AttentionSaved {
                qkv: &g_qkv,
                out: &out,
                lse: &lse,
            };
            let dqkv = poisoned(ctx, outputs, || op.backward(ctx, &g_dout, saved, shape));
            let got = read(ctx, &dqkv, b * t * 3 * c).await;
            let want = reference::attention_backward(&dout, &qkv, &att, shape, dropout);
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

#[cfg(not(target_arch = "wasm32"))]
#[test]
fn attention_reference_probabilities_are_causal_rows_summing_to_one() {
    let mut rng = Rng::new(fresh_seed());
    let (b, t, c, nh) = (2, 4, 6, 3);
    let shape = AttentionShape { b, t, c, heads: nh };
    let qkv = normals(&mut rng, b * t * 3 * c, 1.0);
    let (_, att) = reference::attention_forward(&qkv, shape, None);
    for row in att.chunks(t).enumerate() {
        let (r, p) = row;
        let ti = r % t;
        assert!(
            p[ti + 1..].iter().all(|&x| x == 0.0),
            "row {r} sees the future"
        );
        let sum: f64 = p.iter().map(|&x| x as f64).sum();
        assert!((sum - 1.0).abs() < 1e-6, "row {r} sums to {sum}");
    }
}

/// The contract of attention dropout: probability `[bi, h, i, j]` is element
/// `((bi * nh + h) * t + i) * t + j` of a plain dropout mask of the same seed, so the
/// output is `(att * dropout(ones)) @ v`, computed here from the undropped `att`.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn attention_dropout_masks_probabilities_by_their_flat_index() {
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    let (b, t, c, nh) = (2, 9, 6, 3);
    let shape = AttentionShape { b, t, c, heads: nh };
    let hs = c / nh;
    let qkv = normals(&mut rng, b * t * 3 * c, 1.0);
    let d = reference::AttnDropout {
        p: 0.4,
        seed: rng.next_u64() as u32,
    };
    let (out, att) = reference::attention_forward(&qkv, shape, Some(d));
    let (plain, att_plain) = reference::attention_forward(&qkv, shape, None);
    assert_eq!(att, att_plain, "att is the undropped probabilities");
    let mask = reference::dropout(&vec![1.0; b * nh * t * t], d.p, d.seed);
    let dropped = mask.iter().filter(|&&m| m == 0.0).count() as f64 / mask.len() as f64;
    assert!(
        (0.25..0.55).contains(&dropped),
        "{dropped} of the mask dropped"
    );
    let mut worst = 0.0f64;
    for bi in 0..b {
        for h in 0..nh {
            for i in 0..t {
                assert_eq!(
                    reference::attn_dropout_index(t, nh, bi, h, i, 3) as usize,
                    ((bi * nh + h) * t + i) * t + 3
                );
                for e in 0..hs {
                    let want: f64 = (0..=i)
                        .map(|j| {
                            let k = ((bi * nh + h) * t + i) * t + j;
                            att[k] as f64
                                * mask[k] as f64
                                * qkv[(bi * t + j) * 3 * c + 2 * c + h * hs + e] as f64
                        })
                        .sum();
                    let got = out[(bi * t + i) * c + h * hs + e] as f64;
                    worst = worst.max((got - want).abs());
                }
            }
        }
    }
    assert!(
        worst < 1e-5,
        "dropped attention off by {worst} (seed {seed})"
    );
    assert_ne!(out, plain, "dropout changed nothing (seed {seed})");
}

#[cfg(not(target_arch = "wasm32"))]
#[test]
fn attention_backward_reference_matches_finite_differences() {
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    // Head sizes 1, 2 and 4; t = 1 (softmax of one key: only v gets a gradient).
    // Without and with dropout on the probabilities (fixed masks: p and the seed).
    let dropouts = [
        None,
        Some(reference::AttnDropout {
            p: 0.3,
            seed: rng.next_u64() as u32,
        }),
    ];
    let shapes = [
        (1, 1, 2, 1),
        (1, 3, 2, 2),
        (2, 4, 4, 2),
        (1, 5, 4, 1),
        (2, 7, 6, 3),
    ];
    for (dropout, (b, t, c, nh)) in dropouts
        .iter()
        .flat_map(|&d| shapes.iter().map(move |&s| (d, s)))
    {
        let shape = AttentionShape { b, t, c, heads: nh };
        let qkv = normals(&mut rng, b * t * 3 * c, 1.0);
        let w = normals(&mut rng, b * t * c, 1.0);
        let (_, att) = reference::attention_forward(&qkv, shape, dropout);
        let dqkv = reference::attention_backward(&w, &qkv, &att, shape, dropout);
        // Curved (softmax), so central differences are off by O(h^2) ~ 1e-6 of the
        // curvature; f32 rounding of outputs adds ~1e-5 at h = 1e-2.
        assert_fd(
            &format!("dqkv b {b} t {t} c {c} nh {nh} dropout {dropout:?}"),
            seed,
            &qkv,
            &dqkv,
            (1e-2, 1e-3),
            |x| dot(&reference::attention_forward(x, shape, dropout).0, &w),
        );
    }
}

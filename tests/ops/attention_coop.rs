//! The tensor-core attention kernels (`attention_coop*.wgsl`) on emulated
//! cooperative matrices, against the reference.
//!
//! No device here has cooperative matrices, but everything in those kernels around
//! them (the tiles staged and rounded to f16, which subgroup and lane own which rows,
//! the causal mask and the block ranges, the online softmax, dropout, the
//! statistics, the gradient scale and the writes) still runs: the test swaps each
//! kernel's section of cooperative operations (its end, from `// ---- cooperative
//! operations ----`) for plain WGSL (a fragment stands for where it was loaded from;
//! an accumulator is 8 floats a lane, lane l holding elements l, l + 32, ..; the
//! lane-pair exchange goes through workgroup memory) and dispatches the result. What
//! this leaves to the GPU run (`scripts/gpu-run.sh parity`) is those operations' own
//! semantics, the same ones the tensor-core GEMMs use.
//!
//! The reference is given q, k and v rounded to f16 as the kernels round them (the
//! shapes' heads have 4, 16 or 64 channels: a power-of-two scale, so rounding q
//! scaled is rounding q); what remains is the rounding of the weights and of ds.
#![cfg(not(target_arch = "wasm32"))]

use crate::common::{self, fresh_seed, max_rel_error, poisoned, read};
use tidepool::config::Precision;
use tidepool::gpu::{ContextOptions, Kernel, WgpuContext};
use tidepool::kernels::{
    Attention, AttentionSaved, GpuAttention, Target, ATTENTION_DSUM_ROWS, GRAD_SCALE,
};
use tidepool::reference::{self, AttentionShape, AttnDropout};
use tidepool::rng::Rng;

/// The largest |got - want| over the largest |want|, forward and backward: the
/// weights (and ds) rounded to f16 (relative 2^-11) in sums of up to 256 terms.
const FWD_TOL: f32 = 1e-3;
const BWD_TOL: f32 = 1.5e-3;

const MARK: &str = "// ---- cooperative operations ----";

const COMMON: &str = r#"
// ---- cooperative operations, emulated ----
alias Emu8 = array<f32, 8>;
var<private> emu_t: u32;

fn zero_acc() -> Emu8 {
    return Emu8();
}

// A fragment: (tile, offset, stride of its rows, stride of its columns).
fn emu_mma(a: vec4<u32>, b: vec4<u32>, c: Emu8) -> Emu8 {
    let lane = emu_t % 32u;
    var out = c;
    for (var j = 0u; j < 8u; j++) {
        let i = lane + 32u * j;
        var sum = out[j];
        for (var k = 0u; k < 16u; k++) {
            sum += emu_read(a.x, a.y + (i / 16u) * a.z + k * a.w)
                * emu_read(b.x, b.y + k * b.z + (i % 16u) * b.w);
        }
        out[j] = sum;
    }
    return out;
}

fn mma(a: vec4<u32>, b: vec4<u32>, c: Emu8) -> Emu8 {
    return emu_mma(a, b, c);
}

fn row_major(tile: u32, at: u32, stride: u32) -> vec4<u32> {
    return vec4<u32>(tile, at, stride, 1u);
}

fn col_major(tile: u32, at: u32, stride: u32) -> vec4<u32> {
    return vec4<u32>(tile, at, 1u, stride);
}
"#;

const FORWARD: &str = r#"
var<workgroup> emu_pair: array<f32, 128>;

fn emu_read(tile: u32, at: u32) -> f32 {
    switch tile {
        case 0u: { return f32(qs[at]); }
        case 1u: { return f32(ks[at]); }
        case 2u: { return f32(vs[at]); }
        default: { return f32(ps[at]); }
    }
}

fn q_frag(at: u32) -> vec4<u32> { return row_major(0u, at, LDH); }
fn k_frag(at: u32) -> vec4<u32> { return col_major(1u, at, LDH); }
fn v_frag(at: u32) -> vec4<u32> { return row_major(2u, at, LDH); }
fn p_frag(at: u32) -> vec4<u32> { return row_major(3u, at, LDP); }

fn store_s(acc: Emu8, at: u32) {
    let lane = emu_t % 32u;
    for (var j = 0u; j < 8u; j++) {
        let i = lane + 32u * j;
        ss[at + (i / 16u) * LDS + i % 16u] = acc[j];
    }
}

fn pair_other(x: f32) -> f32 {
    emu_pair[emu_t] = x;
    workgroupBarrier();
    let y = emu_pair[emu_t ^ 1u];
    workgroupBarrier();
    return y;
}
"#;

const BACKWARD: &str = r#"
fn emu_read(tile: u32, at: u32) -> f32 {
    switch tile {
        case 0u: { return f32(ra[at]); }
        case 1u: { return f32(rb[at]); }
        case 2u: { return f32(sa[at]); }
        case 3u: { return f32(sb[at]); }
        case 4u: { return f32(w1[at]); }
        default: { return f32(w2[at]); }
    }
}

fn ra_frag(at: u32) -> vec4<u32> { return row_major(0u, at, LDH); }
fn rb_frag(at: u32) -> vec4<u32> { return row_major(1u, at, LDH); }
fn w1_frag(at: u32) -> vec4<u32> { return row_major(4u, at, LDW); }
fn w2_frag(at: u32) -> vec4<u32> { return row_major(5u, at, LDW); }
fn sa_frag_t(at: u32) -> vec4<u32> { return col_major(2u, at, LDH); }
fn sb_frag_t(at: u32) -> vec4<u32> { return col_major(3u, at, LDH); }
fn sa_frag(at: u32) -> vec4<u32> { return row_major(2u, at, LDH); }
fn sb_frag(at: u32) -> vec4<u32> { return row_major(3u, at, LDH); }

fn store_x(acc: Emu8, at: u32) {
    let lane = emu_t % 32u;
    for (var j = 0u; j < 8u; j++) {
        let i = lane + 32u * j;
        xs[at + (i / 16u) * LDX + i % 16u] = acc[j];
    }
}

fn store_y(acc: Emu8, at: u32) {
    let lane = emu_t % 32u;
    for (var j = 0u; j < 8u; j++) {
        let i = lane + 32u * j;
        ys[at + (i / 16u) * LDX + i % 16u] = acc[j];
    }
}
"#;

/// The kernel `name` with its cooperative operations emulated by `own` (and
/// [`COMMON`]); panics where the kernel no longer has what the rewrite expects.
fn emulated(name: &str, own: &str) -> Kernel {
    let real = tidepool::kernels::catalog(false)
        .into_iter()
        .find(|k| k.name == name)
        .unwrap_or_else(|| panic!("no kernel {name}"));
    let (body, _) = real
        .source
        .split_once(MARK)
        .expect("the kernel marks its section");
    let mut source = body.to_string();
    for (from, to) in [
        ("enable wgpu_cooperative_matrix;\n", ""),
        (
            "    @builtin(subgroup_id) s: u32,\n    @builtin(subgroup_invocation_id) lane: u32,\n) {\n",
            ") {\n    let s = t / 32u;\n    let lane = t % 32u;\n    emu_t = t;\n",
        ),
    ] {
        assert!(source.contains(from), "{name} has no {from:?} any more");
        source = source.replace(from, to);
    }
    // An accumulator passed to a helper outside the section (the backward's flush).
    source = source.replace("coop_mat16x16<f32, C>", "Emu8");
    for op in [
        "coop_mat",
        "coopLoad",
        "coopStore",
        "coopMultiplyAdd",
        "@builtin(subgroup",
        "subgroupShuffle",
    ] {
        assert!(!source.contains(op), "{name}: {op} left unemulated");
    }
    Kernel {
        name: Box::leak(format!("emulated_{name}").into_boxed_str()),
        source: Box::leak(format!("{source}{COMMON}{own}").into_boxed_str()),
        entry: "main",
        unchecked: true,
    }
}

/// The kernels' uniform (`Params` of attention.rs).
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    t: u32,
    c: u32,
    nh: u32,
    hs: u32,
    scale: f32,
    seed: u32,
    threshold: u32,
    keep_scale: f32,
}

fn to_f16(x: &[f32]) -> Vec<f32> {
    x.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect()
}

/// How the kernels are launched: emulated (the D pass, then the rewritten
/// kernels, dispatched here) or the real ones through `Attention`.
enum Kernels {
    Emulated {
        forward: Kernel,
        backward: Kernel,
        dsum: Kernel,
    },
    Real,
}

async fn f16_context() -> WgpuContext {
    WgpuContext::with_options(ContextOptions {
        precision: Precision::F16,
        pool: tidepool::pool::BufferPoolConfig {
            fit_ratio: 1,
            ..Default::default()
        },
        ..Default::default()
    })
    .await
    .expect("natively the CI adapter (lavapipe) has shader-f16")
}

#[test]
fn coop_attention_logic_on_emulated_matrices() {
    pollster::block_on(async {
        let dsum = tidepool::kernels::catalog(false)
            .into_iter()
            .find(|k| k.name == "attention_dsum")
            .expect("the D pass");
        let kernels = Kernels::Emulated {
            forward: emulated("attention_coop_forward_hs64", FORWARD),
            backward: emulated("attention_coop_backward_hs64", BACKWARD),
            dsum,
        };
        check(&f16_context().await, &kernels, "emulated").await
    })
}

/// The real kernels where the device runs them (the H200 in `gpu-run.sh parity`);
/// elsewhere the reason it gives, which must be the missing cooperative matrices.
#[test]
fn coop_attention_matches_reference_where_the_device_runs_it() {
    pollster::block_on(async {
        let ctx = f16_context().await;
        let shape = AttentionShape {
            b: 1,
            t: 1,
            c: 64,
            heads: 1,
        };
        if let Err(why) = Attention::coop_runs(&ctx, shape) {
            common::note(&format!("no tensor-core attention here: {why}"));
            assert!(
                !ctx.adapter_features()
                    .contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX),
                "refused although the adapter has cooperative matrices: {why}"
            );
            return;
        }
        check(&ctx, &Kernels::Real, "tensor cores").await
    })
}

/// Both passes on fresh random shapes against the reference.
async fn check(ctx: &WgpuContext, kernels: &Kernels, how: &str) {
    let seed = fresh_seed();
    common::note(&format!("coop attention ({how}): seed {seed}"));
    let mut rng = Rng::new(seed);
    // t past a workgroup's 64 rows and not a multiple of a step's 16 or 32, heads of
    // 64 channels and of fewer (zero-padded), one row; and a random t.
    let random_t = 1 + rng.below(200);
    let shapes = [
        (2, 70, 128, 2, None),
        (1, 130, 32, 2, Some(0.2)),
        (1, 1, 4, 1, None),
        (2, random_t, 192, 3, Some(0.3)),
        (1, 37, 48, 3, None),
    ];
    for (b, t, c, nh, p) in shapes {
        let shape = AttentionShape { b, t, c, heads: nh };
        let hs = c / nh;
        let dropout = p.map(|p| AttnDropout {
            p,
            seed: rng.next_u64() as u32,
        });
        let mut params = Params {
            t: t as u32,
            c: c as u32,
            nh: nh as u32,
            hs: hs as u32,
            scale: 1.0 / (hs as f32).sqrt(),
            seed: 0,
            threshold: 0,
            keep_scale: 1.0,
        };
        if let Some(d) = dropout {
            let (threshold, keep_scale) = reference::dropout_mask_params(d.p);
            (params.seed, params.threshold, params.keep_scale) = (d.seed, threshold, keep_scale);
        }
        let op = Attention {
            target: Some(Target::Gpu),
            dropout,
            gpu_kernels: Some(GpuAttention::Coop),
        };
        let what = format!("{how}, b {b} t {t} c {c} nh {nh} dropout {dropout:?} (seed {seed})");
        // Spread like trained activations: scores of a few units, peaked softmaxes;
        // dout as small as a step's gradients (GRAD_SCALE keeps them off f16's
        // subnormals).
        let qkv = to_f16(&rng.vec(b * t * 3 * c, -2.0, 2.0));
        let dout: Vec<f32> = to_f16(&rng.vec(b * t * c, -1.0, 1.0))
            .iter()
            .map(|x| x / GRAD_SCALE)
            .collect();
        let (g_qkv, g_dout) = (ctx.upload(&qkv), ctx.upload(&dout));
        let blocks = t.div_ceil(64) as u32;
        let bh = (b * nh) as u32;
        // What the forward saves (the shaders' `stats`): each row's logsumexp, then
        // with dropout the mask, ceil(t / 16) words a row, bit n of word w key 16w + n.
        let rows = b * nh * t;
        let mask_words = t.div_ceil(16);
        let words = rows
            + if dropout.is_some() {
                rows * mask_words
            } else {
                0
            };

        let (out, lse) = poisoned(ctx, &[words, b * t * c], || match kernels {
            Kernels::Emulated { forward, .. } => {
                let out = ctx.create_pooled(b * t * c * 4);
                let lse = ctx.create_pooled(words * 4);
                ctx.dispatch(forward, &params, &[&g_qkv, &out, &lse], [blocks, bh, 1]);
                (out, lse)
            }
            Kernels::Real => op.forward(ctx, &g_qkv, shape),
        });
        let (want_out, att) = reference::attention_forward(&qkv, shape, dropout);
        let got = read(ctx, &out, b * t * c).await;
        let err = max_rel_error(&got, &want_out);
        common::note(&format!("forward {what}: {err:e}"));
        assert!(err <= FWD_TOL, "forward {what}: {err:e} > {FWD_TOL:e}");
        // Each row's logsumexp, which the backward reads, summed here in f64.
        let got_lse = read(ctx, &lse, b * nh * t).await;
        for (row, &l) in got_lse.iter().enumerate() {
            let (bhi, i) = (row / t, row % t);
            let (bi, h) = (bhi / nh, bhi % nh);
            let score = |j: usize| -> f64 {
                let at = |ti: usize, part: usize| (bi * t + ti) * 3 * c + part * c + h * hs;
                let dot: f64 = (0..hs)
                    .map(|d| qkv[at(i, 0) + d] as f64 * qkv[at(j, 1) + d] as f64)
                    .sum();
                dot / (hs as f64).sqrt()
            };
            let max = (0..=i).map(score).fold(f64::MIN, f64::max);
            let want = max + (0..=i).map(|j| (score(j) - max).exp()).sum::<f64>().ln();
            assert!(
                (l as f64 - want).abs() <= 2e-3 * want.abs().max(1.0),
                "lse of row {row}, {what}: {l} against {want}"
            );
        }

        // Every decision the backward reads (key j <= query i) against the reference's
        // keep rule; the poison (NaN's bits) fails any word the forward left.
        if let Some(d) = dropout {
            let kept = reference::dropout(&vec![1.0; rows * t], d.p, d.seed);
            let stats: Vec<u32> = ctx.download(&lse, words).await.expect("download");
            for row in 0..rows {
                let (bhi, i) = (row / t, row % t);
                for j in 0..=i {
                    let got = stats[rows + row * mask_words + j / 16] >> (j % 16) & 1 == 1;
                    let idx = reference::attn_dropout_index(t, nh, bhi / nh, bhi % nh, i, j);
                    let want = kept[idx as usize] != 0.0;
                    assert_eq!(got, want, "mask bit (row {row}, key {j}), {what}");
                }
            }
        }

        let saved = AttentionSaved {
            qkv: &g_qkv,
            out: &out,
            lse: &lse,
        };
        let dqkv = poisoned(ctx, &[b * nh * t, b * t * 3 * c], || match kernels {
            Kernels::Emulated { backward, dsum, .. } => {
                let sums = ctx.create_pooled(b * nh * t * 4);
                let dqkv = ctx.create_pooled(b * t * 3 * c * 4);
                let groups = [t.div_ceil(ATTENTION_DSUM_ROWS) as u32, bh, 1];
                ctx.dispatch(dsum, &params, &[&g_dout, &out, &sums], groups);
                ctx.dispatch(
                    backward,
                    &params,
                    &[&g_dout, &g_qkv, &lse, &sums, &dqkv],
                    [2 * blocks, bh, 1],
                );
                dqkv
            }
            Kernels::Real => op.backward(ctx, &g_dout, saved, shape),
        });
        let got = read(ctx, &dqkv, b * t * 3 * c).await;
        let want = reference::attention_backward(&dout, &qkv, &att, shape, dropout);
        let err = max_rel_error(&got, &want);
        common::note(&format!("backward {what}: {err:e}"));
        assert!(err <= BWD_TOL, "backward {what}: {err:e} > {BWD_TOL:e}");
    }
    ctx.take_error().expect("no GPU errors");
}

//! Causal multi-head self-attention, forward and backward, flash style: the forward
//! saves one logsumexp per row instead of the `b*nh*t*t` probabilities.

use std::sync::OnceLock;

use super::target::Target;
use crate::gpu::{Kernel, PooledBuffer, WgpuContext};
use crate::reference::{dropout_mask_params, AttnDropout};

/// Queries (forward, dq) or keys (dkdv) of one workgroup of the GPU kernels.
const BLOCK: usize = 64;
/// The same for the CPU kernels [forward, dq, dkdv] (`ROWS` in their shaders).
const CPU_BLOCKS: [usize; 3] = [32, 16, 16];

/// The shaders guard every index (head channels past `hs`, rows past `t`) and the
/// launchers check buffer sizes, so all variants compile unchecked
/// (`Kernel::unchecked`).
const FORWARD_WGSL: &str = with_dropout_mask!("attention.wgsl");
const BACKWARD_WGSL: &str = with_dropout_mask!("attention_backward.wgsl");
/// The CPU adapters' variant ([`Target::Cpu`]): a few rows an invocation, no
/// workgroup memory, no barriers; same bindings and results.
const FORWARD_CPU_WGSL: &str = with_dropout_mask!("attention_cpu.wgsl");
const BACKWARD_CPU_WGSL: &str = with_dropout_mask!("attention_backward_cpu.wgsl");

/// Head-size bounds of the compiled variants, in vec4s: hs <= 16, 64, 128.
const HS4S: [usize; 3] = [4, 16, 32];

/// Expands a `.wgsl` template for heads of up to `4 * hs4` channels. It prepends
/// `const HS4` and `const H2` (`hs4 / 2`: each thread holds half of a head, every
/// other vec4); every code line holding `#D` works on one vec4 `#D` of that half.
///
/// Natively such a line is repeated for #D = 0 .. H2-1 (`qa#D` becomes `qa0`,
/// `qa1`.., `#Du` the index): the head lives in named registers, with no
/// dynamically indexed local array for the driver to spill (12% off the backward
/// on an H200). In the browser it becomes a loop over `array<vec4<f32>, H2>`
/// instead (`var qa#D = e;` declares the array and fills it): the same arithmetic
/// in a fraction of the shader, which WebGPU implementations compile several times
/// faster (seconds less per pipeline on SwiftShader).
fn expand(template: &str, hs4: usize) -> String {
    let unroll = cfg!(not(target_arch = "wasm32"));
    let h2 = hs4 / 2;
    let mut wgsl = format!("const HS4: u32 = {hs4}u;\nconst H2: u32 = {h2}u;\n");
    for line in template.lines() {
        let code = line.trim_start();
        if !line.contains("#D") || code.starts_with("//") {
            wgsl.push_str(line);
        } else if unroll {
            for d in 0..h2 {
                wgsl.push_str(&line.replace("#D", &d.to_string()));
                wgsl.push('\n');
            }
            continue;
        } else {
            let indent = &line[..line.len() - code.len()];
            let looped = |stmt: &str| {
                let stmt = stmt.replace("#Du", "d_").replace("#D", "[d_]");
                format!("for (var d_ = 0u; d_ < H2; d_++) {{ {stmt} }}")
            };
            let decl = code
                .strip_prefix("var ")
                .and_then(|rest| rest.split_once("#D = "));
            match decl {
                Some((name, init)) => {
                    let fill = looped(&format!("{name}#D = {init}"));
                    wgsl.push_str(&format!("{indent}var {name}: array<vec4<f32>, H2>; {fill}"));
                }
                None => wgsl.push_str(&format!("{indent}{}", looped(code))),
            }
        }
        wgsl.push('\n');
    }
    wgsl
}

/// [forward, dq, dkdv] tuned for `target`, for heads of at most `4 * HS4S[v]`
/// channels, expanded once.
fn kernels(target: Target, v: usize) -> &'static [Kernel; 3] {
    static NAMES: [[[&str; 3]; 3]; 2] = [
        [
            [
                "attention_forward_hs16",
                "attention_dq_hs16",
                "attention_dkdv_hs16",
            ],
            [
                "attention_forward_hs64",
                "attention_dq_hs64",
                "attention_dkdv_hs64",
            ],
            [
                "attention_forward_hs128",
                "attention_dq_hs128",
                "attention_dkdv_hs128",
            ],
        ],
        [
            [
                "attention_cpu_forward_hs16",
                "attention_cpu_dq_hs16",
                "attention_cpu_dkdv_hs16",
            ],
            [
                "attention_cpu_forward_hs64",
                "attention_cpu_dq_hs64",
                "attention_cpu_dkdv_hs64",
            ],
            [
                "attention_cpu_forward_hs128",
                "attention_cpu_dq_hs128",
                "attention_cpu_dkdv_hs128",
            ],
        ],
    ];
    static VARIANTS: [[OnceLock<[Kernel; 3]>; 3]; 2] = [
        [OnceLock::new(), OnceLock::new(), OnceLock::new()],
        [OnceLock::new(), OnceLock::new(), OnceLock::new()],
    ];
    let ti = target as usize;
    VARIANTS[ti][v].get_or_init(|| {
        let (fwd, bwd) = match target {
            Target::Gpu => (FORWARD_WGSL, BACKWARD_WGSL),
            Target::Cpu => (FORWARD_CPU_WGSL, BACKWARD_CPU_WGSL),
        };
        // Leaked once a variant a process: kernels are `'static` like the others.
        let fwd: &'static str = Box::leak(expand(fwd, HS4S[v]).into_boxed_str());
        let bwd: &'static str = Box::leak(expand(bwd, HS4S[v]).into_boxed_str());
        let kernel = |name, source, entry| Kernel {
            name,
            source,
            entry,
            unchecked: true,
        };
        [
            kernel(NAMES[ti][v][0], fwd, "main"),
            kernel(NAMES[ti][v][1], bwd, "dq"),
            kernel(NAMES[ti][v][2], bwd, "dkdv"),
        ]
    })
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    t: u32,
    c: u32,
    nh: u32,
    hs: u32,
    scale: f32,
    /// Attention-probability dropout: mask seed, keep threshold (`>=` keeps; 0
    /// keeps all) and the kept probabilities' factor (1 without dropout).
    seed: u32,
    threshold: u32,
    keep_scale: f32,
}

/// Panics unless `buffer` holds `floats` f32s: the unchecked shaders rely on it.
#[track_caller]
fn check_len(buffer: &PooledBuffer, floats: usize, what: &str) {
    assert!(
        buffer.size() >= floats as u64 * 4,
        "{what}: a {}-byte buffer for {floats} floats",
        buffer.size()
    );
}

fn setup(
    target: Target,
    b: usize,
    t: usize,
    c: usize,
    nh: usize,
    dropout: Option<AttnDropout>,
) -> (Params, &'static [Kernel; 3], [[u32; 3]; 3]) {
    assert!(b > 0 && t > 0 && nh > 0, "attention of an empty tensor");
    assert!(
        c.is_multiple_of(nh),
        "c = {c} does not split into nh = {nh} heads"
    );
    let hs = c / nh;
    let v = HS4S
        .iter()
        .position(|&hs4| hs <= 4 * hs4)
        .unwrap_or_else(|| panic!("attention supports head sizes up to 128, not {hs}"));
    let kernels = kernels(target, v);
    let blocks = match target {
        Target::Gpu => [BLOCK; 3],
        Target::Cpu => CPU_BLOCKS,
    };
    let groups = blocks.map(|block| [t.div_ceil(block) as u32, (b * nh) as u32, 1]);
    assert!(
        b * nh <= 65535,
        "b * nh = {} exceeds one grid dimension",
        b * nh
    );
    let params = Params {
        t: t as u32,
        c: c as u32,
        nh: nh as u32,
        hs: hs as u32,
        scale: 1.0 / (hs as f32).sqrt(),
        seed: 0,
        threshold: 0,
        keep_scale: 1.0,
    };
    let params = match dropout {
        Some(d) => {
            let (threshold, keep_scale) = dropout_mask_params(d.p);
            Params {
                seed: d.seed,
                threshold,
                keep_scale,
                ..params
            }
        }
        None => params,
    };
    (params, kernels, groups)
}

/// Causal self-attention over `qkv` `[b, t, 3c]` (queries, keys, values along
/// channels; head size `c / nh`, at most 128). Returns `out` `[b, t, c]` and what
/// [`attention_backward`] needs: the logsumexp of each row's scaled scores,
/// `[b, nh, t]`. With `dropout`, the probabilities are masked as
/// [`crate::reference::attention_forward`] masks them (in the numerator only: the
/// softmax's sum and the logsumexp are of the undropped probabilities).
pub fn attention_forward(
    ctx: &WgpuContext,
    qkv: &PooledBuffer,
    b: usize,
    t: usize,
    c: usize,
    nh: usize,
    dropout: Option<AttnDropout>,
) -> (PooledBuffer, PooledBuffer) {
    attention_forward_on(ctx, Target::of(ctx), qkv, b, t, c, nh, dropout)
}

/// [`attention_forward`] computed by the kernels tuned for `target`.
#[allow(clippy::too_many_arguments)]
pub fn attention_forward_on(
    ctx: &WgpuContext,
    target: Target,
    qkv: &PooledBuffer,
    b: usize,
    t: usize,
    c: usize,
    nh: usize,
    dropout: Option<AttnDropout>,
) -> (PooledBuffer, PooledBuffer) {
    let (params, kernels, groups) = setup(target, b, t, c, nh, dropout);
    check_len(qkv, b * t * 3 * c, "attention_forward qkv");
    let out = ctx.create_pooled(b * t * c * 4);
    let lse = ctx.create_pooled(b * nh * t * 4);
    ctx.dispatch(&kernels[0], &params, &[qkv, &out, &lse], groups[0]);
    (out, lse)
}

/// Gradient of [`attention_forward`] with respect to `qkv`: `dqkv` `[b, t, 3c]`,
/// from `dout` `[b, t, c]`, the forward's input, output and saved logsumexp, and
/// the forward's `dropout` (its mask is recomputed, never stored).
#[allow(clippy::too_many_arguments)]
pub fn attention_backward(
    ctx: &WgpuContext,
    dout: &PooledBuffer,
    qkv: &PooledBuffer,
    out: &PooledBuffer,
    saved: &PooledBuffer,
    b: usize,
    t: usize,
    c: usize,
    nh: usize,
    dropout: Option<AttnDropout>,
) -> PooledBuffer {
    attention_backward_on(
        ctx,
        Target::of(ctx),
        dout,
        qkv,
        out,
        saved,
        b,
        t,
        c,
        nh,
        dropout,
    )
}

/// [`attention_backward`] computed by the kernels tuned for `target`.
#[allow(clippy::too_many_arguments)]
pub fn attention_backward_on(
    ctx: &WgpuContext,
    target: Target,
    dout: &PooledBuffer,
    qkv: &PooledBuffer,
    out: &PooledBuffer,
    saved: &PooledBuffer,
    b: usize,
    t: usize,
    c: usize,
    nh: usize,
    dropout: Option<AttnDropout>,
) -> PooledBuffer {
    let (params, kernels, groups) = setup(target, b, t, c, nh, dropout);
    check_len(dout, b * t * c, "attention_backward dout");
    check_len(qkv, b * t * 3 * c, "attention_backward qkv");
    check_len(out, b * t * c, "attention_backward out");
    check_len(saved, b * nh * t, "attention_backward saved");
    let dqkv = ctx.create_pooled(b * t * 3 * c * 4);
    // D_i = dout_i · out_i, written by the dq pass for the dk/dv pass.
    let dsum = ctx.create_pooled(b * nh * t * 4);
    ctx.dispatch(
        &kernels[1],
        &params,
        &[dout, qkv, saved, &dsum, &dqkv, out],
        groups[1],
    );
    ctx.dispatch(
        &kernels[2],
        &params,
        &[dout, qkv, saved, &dsum, &dqkv],
        groups[2],
    );
    dqkv
}

//! Optimizer pieces on the GPU: per-tensor sums of squares, the global gradient norm
//! and clipping scale, AdamW, and scaling in place. The norm and scale never leave the
//! GPU: `global_norm_scale` writes `[norm, scale]`, which the update kernels read.

use super::target::Target;
use crate::gpu::{grid_1d, Kernel, PooledBuffer, WgpuContext};
pub use crate::reference::AdamW;

const SOURCE: &str = with_prelude!("optimizer.wgsl");

const REDUCE_PARTIAL: Kernel = Kernel {
    name: "optimizer_reduce_partial",
    source: SOURCE,
    entry: "reduce_partial",
    unchecked: false,
};
const REDUCE_ONE: Kernel = Kernel {
    name: "optimizer_reduce_one",
    source: SOURCE,
    entry: "reduce_one",
    unchecked: false,
};
const REDUCE_FINAL: Kernel = Kernel {
    name: "optimizer_reduce_final",
    source: SOURCE,
    entry: "reduce_final",
    unchecked: false,
};
const GLOBAL_NORM: Kernel = Kernel {
    name: "optimizer_global_norm",
    source: SOURCE,
    entry: "global_norm",
    unchecked: false,
};
const ADAMW: Kernel = Kernel {
    name: "optimizer_adamw",
    source: SOURCE,
    entry: "adamw",
    unchecked: false,
};
const SCALE: Kernel = Kernel {
    name: "optimizer_scale",
    source: SOURCE,
    entry: "scale",
    unchecked: false,
};

/// `Params` in optimizer.wgsl (the sums, the norm, the scaling).
#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    parts: u32,
    slot: u32,
    square: u32,
    mul: f32,
    max_norm: f32,
    _pad: [u32; 2],
}

/// `AdamParams` in optimizer.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct AdamParams {
    n: u32,
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    weight_decay: f32,
    bc1: f32,
    bc2: f32,
}

const WG: u32 = 256;
/// Workgroups of the sum's first pass: at least 4 elements a thread, at most 256
/// partials for the one-workgroup second pass.
const MAX_PARTS: usize = 256;
/// Largest sum that CPU adapters do in one pass of one workgroup: a dispatch and a
/// reduction tree fewer, and at the sizes they train, no less parallel in practice.
const CPU_ONE_PASS_MAX: usize = 1 << 16;

/// `out[slot] = mul * sum(x[i])` (or of `x[i]^2` when `square`) over `n` floats, in
/// two passes with a fixed order. Writes only `out[slot]`. Draws one scratch buffer
/// of `min(ceil(n/1024), 256)` floats from the pool, except on CPU adapters up to
/// `CPU_ONE_PASS_MAX` floats (one pass, no scratch).
pub(crate) fn sum_into(
    ctx: &WgpuContext,
    x: &PooledBuffer,
    n: usize,
    square: bool,
    mul: f32,
    out: &PooledBuffer,
    slot: usize,
) {
    sum_into_on(ctx, Target::of(ctx), x, n, square, mul, out, slot)
}

#[allow(clippy::too_many_arguments)]
fn sum_into_on(
    ctx: &WgpuContext,
    target: Target,
    x: &PooledBuffer,
    n: usize,
    square: bool,
    mul: f32,
    out: &PooledBuffer,
    slot: usize,
) {
    if target == Target::Cpu && n <= CPU_ONE_PASS_MAX {
        let params = Params {
            n: n as u32,
            slot: slot as u32,
            square: square as u32,
            mul,
            ..Default::default()
        };
        ctx.dispatch(&REDUCE_ONE, &params, &[x, out], [1, 1, 1]);
        return;
    }
    let parts = n.div_ceil(4 * WG as usize).clamp(1, MAX_PARTS);
    let params = Params {
        n: n as u32,
        parts: parts as u32,
        slot: slot as u32,
        square: square as u32,
        mul,
        ..Default::default()
    };
    let partial = ctx.create_pooled(parts * 4);
    ctx.dispatch(
        &REDUCE_PARTIAL,
        &params,
        &[x, &partial],
        [parts as u32, 1, 1],
    );
    ctx.dispatch(&REDUCE_FINAL, &params, &[&partial, out], [1, 1, 1]);
}

/// Writes the sum of squares of `grad` (`n` floats) into `out[slot]`.
///
/// The one exception to "a launcher writes all of its output": `out` belongs to the
/// caller, who makes it with one slot per gradient tensor and calls this once for
/// every slot before [`global_norm_scale`] reads them.
pub fn grad_sumsq_into(
    ctx: &WgpuContext,
    grad: &PooledBuffer,
    n: usize,
    out: &PooledBuffer,
    slot: usize,
) {
    grad_sumsq_into_on(ctx, Target::of(ctx), grad, n, out, slot)
}

/// [`grad_sumsq_into`] in the variant for `target`.
pub fn grad_sumsq_into_on(
    ctx: &WgpuContext,
    target: Target,
    grad: &PooledBuffer,
    n: usize,
    out: &PooledBuffer,
    slot: usize,
) {
    assert!(
        (slot + 1) * 4 <= out.len(),
        "slot {slot} past the end of a {}-byte buffer",
        out.len()
    );
    sum_into_on(ctx, target, grad, n, true, 1.0, out, slot);
}

/// From `count` per-tensor sums of squares: `[norm, scale]` with `norm` the global
/// gradient norm and `scale = max_norm / (norm + 1e-6)` when `max_norm > 0` and
/// `norm > max_norm`, else 1 (as [`crate::reference::clip_scale`]).
pub fn global_norm_scale(
    ctx: &WgpuContext,
    sumsq: &PooledBuffer,
    count: usize,
    max_norm: f32,
) -> PooledBuffer {
    let out = ctx.create_pooled(2 * 4);
    let params = Params {
        n: count as u32,
        max_norm,
        ..Default::default()
    };
    ctx.dispatch(&GLOBAL_NORM, &params, &[sumsq, &out], [1, 1, 1]);
    out
}

/// One AdamW step on `param`, `m`, `v` (`n` floats each, updated in place) with the
/// gradient `grad` times `norm_scale[1]` (the clipping scale from
/// [`global_norm_scale`]). Bias corrections come from `hp.step` (1-based).
#[allow(clippy::too_many_arguments)]
pub fn adamw_update(
    ctx: &WgpuContext,
    param: &PooledBuffer,
    grad: &PooledBuffer,
    m: &PooledBuffer,
    v: &PooledBuffer,
    n: usize,
    hp: &AdamW,
    norm_scale: &PooledBuffer,
) {
    let (bc1, bc2) = hp.bias_corrections();
    let params = AdamParams {
        n: n as u32,
        lr: hp.lr,
        beta1: hp.beta1,
        beta2: hp.beta2,
        eps: hp.eps,
        weight_decay: hp.weight_decay,
        bc1,
        bc2,
    };
    ctx.dispatch(
        &ADAMW,
        &params,
        &[param, grad, m, v, norm_scale],
        grid_1d(n as u32, WG),
    );
}

/// `x *= norm_scale[1]` over `n` floats, in place.
pub fn scale_in_place(ctx: &WgpuContext, x: &PooledBuffer, n: usize, norm_scale: &PooledBuffer) {
    let params = Params {
        n: n as u32,
        ..Default::default()
    };
    ctx.dispatch(&SCALE, &params, &[x, norm_scale], grid_1d(n as u32, WG));
}

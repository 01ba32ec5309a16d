//! Softmax + cross-entropy (fused), its backward, and the mean of the losses.

use super::optimizer::sum_into;
use super::target::Target;
use crate::gpu::{grid_1d, Kernel, PooledBuffer, WgpuContext};

pub(super) const SOURCE: &str = with_prelude!("crossentropy.wgsl");

const FORWARD: Kernel = Kernel {
    name: "crossentropy_forward",
    source: SOURCE,
    entry: "forward",
    unchecked: false,
};
const FORWARD_ROWS: Kernel = Kernel {
    name: "crossentropy_forward_rows",
    source: SOURCE,
    entry: "forward_rows",
    unchecked: false,
};
const BACKWARD: Kernel = Kernel {
    name: "crossentropy_backward",
    source: SOURCE,
    entry: "backward",
    unchecked: false,
};

/// Workgroup size of every entry point (`WG` in crossentropy.wgsl).
const WG: u32 = 128;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    v: u32,
    scale: f32,
    _pad: u32,
}

/// Softmax of each of `rows` rows of `v` logits and the loss of its target (`targets`:
/// `rows` u32): returns `losses` (`rows`) and `probs` (`rows*v`).
pub fn crossentropy_forward(
    ctx: &WgpuContext,
    logits: &PooledBuffer,
    targets: &PooledBuffer,
    rows: usize,
    v: usize,
) -> (PooledBuffer, PooledBuffer) {
    crossentropy_forward_on(ctx, Target::of(ctx), logits, targets, rows, v)
}

/// [`crossentropy_forward`] in the variant for `target`: one workgroup a row (GPUs)
/// or one thread a row (CPU adapters).
pub fn crossentropy_forward_on(
    ctx: &WgpuContext,
    target: Target,
    logits: &PooledBuffer,
    targets: &PooledBuffer,
    rows: usize,
    v: usize,
) -> (PooledBuffer, PooledBuffer) {
    let losses = ctx.create_pooled(rows * 4);
    let probs = ctx.create_pooled(rows * v * 4);
    let params = Params {
        rows: rows as u32,
        v: v as u32,
        scale: 0.0,
        _pad: 0,
    };
    let (kernel, grid) = match target {
        Target::Gpu => (&FORWARD, grid_1d(rows as u32, 1)),
        Target::Cpu => (&FORWARD_ROWS, grid_1d(rows as u32, WG)),
    };
    ctx.dispatch(kernel, &params, &[logits, targets, &losses, &probs], grid);
    (losses, probs)
}

/// `dlogits = (probs - onehot(targets)) * scale` (`rows*v`): the gradient of
/// `scale * sum(losses)`; `scale = 1/rows` for the mean loss.
pub fn crossentropy_backward(
    ctx: &WgpuContext,
    probs: &PooledBuffer,
    targets: &PooledBuffer,
    rows: usize,
    v: usize,
    scale: f32,
) -> PooledBuffer {
    let n = rows * v;
    let dlogits = ctx.create_pooled(n * 4);
    let params = Params {
        rows: rows as u32,
        v: v as u32,
        scale,
        _pad: 0,
    };
    ctx.dispatch(
        &BACKWARD,
        &params,
        &[probs, targets, &dlogits],
        grid_1d(n as u32, WG),
    );
    dlogits
}

/// The mean of `n` floats, as a 1-float buffer: a two-pass parallel sum (see
/// the optimizer module), fixed order, so the same input gives the same bits.
pub fn mean(ctx: &WgpuContext, x: &PooledBuffer, n: usize) -> PooledBuffer {
    mean_on(ctx, Target::of(ctx), x, n)
}

/// [`mean`] in the variant for `target`.
pub fn mean_on(ctx: &WgpuContext, target: Target, x: &PooledBuffer, n: usize) -> PooledBuffer {
    let out = ctx.create_pooled(4);
    sum_into(ctx, target, x, n, false, 1.0 / n.max(1) as f32, &out, 0);
    out
}

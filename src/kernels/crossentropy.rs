//! Softmax + cross-entropy with its gradient (fused), and the mean of the losses.

use super::optimizer::sum_into;
use super::target::Target;
use crate::gpu::{grid_1d, Kernel, PooledBuffer, Slice, WgpuContext};

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

/// Softmax cross-entropy of each of `rows` rows of `v` logits against its target
/// (`targets`: `rows` u32), with its gradient: returns `losses` (`rows`) and `dlogits
/// = (softmax - onehot(targets)) * dloss` (`rows*v`), the gradient of `dloss *
/// sum(losses)` (`dloss = 1/rows` for the mean loss). One pass: the gradient needs
/// no kernel of its own.
pub fn crossentropy_forward<'a>(
    ctx: &WgpuContext,
    logits: &PooledBuffer,
    targets: impl Into<Slice<'a>>,
    rows: usize,
    v: usize,
    dloss: f32,
) -> (PooledBuffer, PooledBuffer) {
    crossentropy_forward_on(ctx, Target::of(ctx), logits, targets, rows, v, dloss)
}

/// [`crossentropy_forward`] in the variant for `target`: one workgroup a row (GPUs)
/// or one thread a row (CPU adapters).
pub fn crossentropy_forward_on<'a>(
    ctx: &WgpuContext,
    target: Target,
    logits: &PooledBuffer,
    targets: impl Into<Slice<'a>>,
    rows: usize,
    v: usize,
    dloss: f32,
) -> (PooledBuffer, PooledBuffer) {
    let losses = ctx.create_pooled(rows * 4);
    let dlogits = ctx.create_pooled(rows * v * 4);
    let params = Params {
        rows: rows as u32,
        v: v as u32,
        scale: dloss,
        _pad: 0,
    };
    let (kernel, grid) = match target {
        Target::Gpu => (&FORWARD, grid_1d(rows as u32, 1)),
        Target::Cpu => (&FORWARD_ROWS, grid_1d(rows as u32, WG)),
    };
    ctx.dispatch_slices(
        kernel,
        &params,
        &[
            logits.into(),
            targets.into(),
            (&losses).into(),
            (&dlogits).into(),
        ],
        grid,
    );
    (losses, dlogits)
}

/// The mean of `n` floats, as a 1-float buffer: a two-pass parallel sum (see
/// the optimizer module), fixed order, so the same input gives the same bits.
pub fn mean(ctx: &WgpuContext, x: &PooledBuffer, n: usize) -> PooledBuffer {
    mean_on(ctx, Target::of(ctx), x, n)
}

/// [`mean`] in the variant for `target`.
pub fn mean_on(ctx: &WgpuContext, target: Target, x: &PooledBuffer, n: usize) -> PooledBuffer {
    let out = ctx.create_pooled(4);
    mean_into(ctx, target, x, n, &out, 0);
    out
}

/// [`mean_on`] into float `slot` of `out` (the same bits), writing nothing else.
pub fn mean_into(
    ctx: &WgpuContext,
    target: Target,
    x: &PooledBuffer,
    n: usize,
    out: &PooledBuffer,
    slot: usize,
) {
    assert!(
        out.len() >= (slot + 1) * 4,
        "slot {slot} of a {}-byte buffer",
        out.len()
    );
    sum_into(ctx, target, x, n, false, 1.0 / n.max(1) as f32, out, slot);
}

/// Every kernel of this op.
pub(super) fn catalog() -> Vec<Kernel> {
    vec![FORWARD, FORWARD_ROWS]
}

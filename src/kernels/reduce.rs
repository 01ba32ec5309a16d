//! Sums of one tensor in a fixed order (the loss's mean, [`Mean`]), the global
//! gradient norm and clipping scale of an optimizer step, and scaling in place: the
//! entry points of `reduce.wgsl`.

use crate::gpu::{grid_1d, Kernel, PooledBuffer, WgpuContext};
use crate::tuning::Target;

pub(super) const SOURCE: &str = with_prelude!("reduce.wgsl");

const WG: u32 = 256;

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
pub(super) const GLOBAL_NORM: Kernel = Kernel {
    name: "optimizer_global_norm",
    source: SOURCE,
    entry: "global_norm",
    unchecked: false,
};
pub(super) const GLOBAL_NORM_REPORT: Kernel = Kernel {
    name: "optimizer_global_norm_report",
    source: SOURCE,
    entry: "global_norm_report",
    unchecked: false,
};
const SCALE: Kernel = Kernel {
    name: "optimizer_scale",
    source: SOURCE,
    entry: "scale",
    unchecked: false,
};

/// `Params` in reduce.wgsl (the sums, the norm, the scaling).
#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(super) struct Params {
    pub n: u32,
    pub parts: u32,
    pub slot: u32,
    pub square: u32,
    pub mul: f32,
    pub max_norm: f32,
    pub _pad: [u32; 2],
}

/// Workgroups of the sum's first pass: at least 4 elements a thread, at most 256
/// partials for the one-workgroup second pass.
pub(super) const MAX_PARTS: usize = 256;
/// Largest sum that CPU adapters do in one pass of one workgroup: a dispatch and a
/// reduction tree fewer, and at the sizes they train, no less parallel in practice.
pub(super) const CPU_ONE_PASS_MAX: usize = 1 << 16;
/// The same on GPUs: up to 16 loads a thread, as short as the first of two passes
/// (the loss's mean of the page's presets: 512 and 2048 rows).
const GPU_ONE_PASS_MAX: usize = 16 * WG as usize;

/// Whether a sum of `n` floats on `target` (the loss's mean, [`Mean`]) runs
/// in one pass of one workgroup, drawing no scratch from the pool.
pub fn sum_in_one_pass(target: Target, n: usize) -> bool {
    n <= match target {
        Target::Cpu => CPU_ONE_PASS_MAX,
        Target::Gpu => GPU_ONE_PASS_MAX,
    }
}
/// The mean of `n` floats in a fixed order, so the same input gives the same bits:
/// one workgroup's pass where [`sum_in_one_pass`] (up to 4096 floats on GPUs, 65536
/// on CPU adapters, drawing nothing from the pool), else two passes through a
/// scratch buffer of `min(ceil(n/1024), 256)` partial sums.
#[derive(Clone, Copy, Debug, Default)]
pub struct Mean {
    /// The kernels' tuning (`None`: the context's).
    pub target: Option<Target>,
}

impl Mean {
    /// The mean of `x`'s first `n` floats, as a 1-float buffer.
    pub fn of(&self, ctx: &WgpuContext, x: &PooledBuffer, n: usize) -> PooledBuffer {
        let out = ctx.create_pooled(4);
        self.write(ctx, x, n, &out, 0);
        out
    }

    /// [`Mean::of`] into float `slot` of `out` (the same bits), writing nothing else.
    pub fn write(
        &self,
        ctx: &WgpuContext,
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
        let target = self.target.unwrap_or(ctx.kernel_target());
        let params = Params {
            n: n as u32,
            slot: slot as u32,
            mul: 1.0 / n.max(1) as f32,
            ..Default::default()
        };
        if sum_in_one_pass(target, n) {
            ctx.dispatch(&REDUCE_ONE, &params, &[x, out], [1, 1, 1]);
            return;
        }
        let parts = n.div_ceil(4 * WG as usize).clamp(1, MAX_PARTS);
        let params = Params {
            parts: parts as u32,
            ..params
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
}

/// `x *= norm_scale[1]` over `n` floats, in place.
pub fn scale_in_place(ctx: &WgpuContext, x: &PooledBuffer, n: usize, norm_scale: &PooledBuffer) {
    let params = Params {
        n: n as u32,
        ..Default::default()
    };
    ctx.dispatch(&SCALE, &params, &[x, norm_scale], grid_1d(n as u32, WG));
}

/// Every kernel of `reduce.wgsl`.
pub(super) fn catalog() -> Vec<Kernel> {
    vec![
        REDUCE_PARTIAL,
        REDUCE_ONE,
        REDUCE_FINAL,
        GLOBAL_NORM,
        GLOBAL_NORM_REPORT,
        SCALE,
    ]
}

//! GELU, tanh approximation, in a pass of its own: only where a matmul core would
//! recompute a fused GELU prologue too often (the CPU-adapter core reloads each
//! input element for every 8 output columns). Everywhere else the matmuls apply
//! `gelu.wgsl` as they load, and its gradient in their epilogue.

use crate::gpu::{grid_1d, Kernel, PooledBuffer, WgpuContext};

pub(super) const SOURCE: &str = concat!(
    include_str!("../gpu/prelude.wgsl"),
    include_str!("gelu.wgsl"),
    include_str!("gelu_pass.wgsl")
);

const FORWARD: Kernel = Kernel {
    name: "gelu_forward",
    source: SOURCE,
    entry: "forward",
    unchecked: false,
};

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    _pad: [u32; 3],
}

/// GELU (tanh approximation) of `n` floats.
pub fn gelu_forward(ctx: &WgpuContext, x: &PooledBuffer, n: usize) -> PooledBuffer {
    let out = ctx.create_pooled(n * 4);
    let params = Params {
        n: n as u32,
        _pad: [0; 3],
    };
    ctx.dispatch(&FORWARD, &params, &[x, &out], grid_1d(n as u32, 256));
    out
}

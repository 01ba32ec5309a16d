use crate::gpu::{grid_1d, Kernel, PooledBuffer, WgpuContext};
use crate::reference::dropout_mask_params;

const DROPOUT: Kernel = Kernel {
    name: "dropout",
    source: concat!(include_str!("hash.wgsl"), include_str!("dropout.wgsl")),
    entry: "main",
    unchecked: false,
};

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    seed: u32,
    threshold: u32,
    scale: f32,
}

/// Inverted dropout of `n` floats with drop probability `p` and mask `seed` (see
/// `reference::dropout`). Its backward is the same call on the gradient.
pub fn dropout(ctx: &WgpuContext, x: &PooledBuffer, n: usize, p: f32, seed: u32) -> PooledBuffer {
    let out = ctx.create_pooled(n * 4);
    let (threshold, scale) = dropout_mask_params(p);
    let params = Params {
        n: n as u32,
        seed,
        threshold,
        scale,
    };
    ctx.dispatch(&DROPOUT, &params, &[x, &out], grid_1d(n as u32, 256));
    out
}

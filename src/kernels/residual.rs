use crate::gpu::{grid_1d, Kernel, PooledBuffer, WgpuContext};

pub(super) const RESIDUAL: Kernel = Kernel {
    name: "residual_forward",
    source: with_prelude!("residual.wgsl"),
    entry: "main",
    unchecked: false,
};

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    _pad: [u32; 3],
}

/// `a + b` over `n` floats. The backward of a residual add is the identity on both
/// branches, so it needs no kernel.
pub fn residual_forward(
    ctx: &WgpuContext,
    a: &PooledBuffer,
    b: &PooledBuffer,
    n: usize,
) -> PooledBuffer {
    let out = ctx.create_pooled(n * 4);
    let params = Params {
        n: n as u32,
        _pad: [0; 3],
    };
    ctx.dispatch(&RESIDUAL, &params, &[a, b, &out], grid_1d(n as u32, 256));
    out
}

/// Every kernel of this op.
pub(super) fn catalog() -> Vec<Kernel> {
    vec![RESIDUAL]
}

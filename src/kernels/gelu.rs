//! GELU, tanh approximation, forward and backward.

use crate::gpu::{grid_1d, Kernel, PooledBuffer, WgpuContext};

const SOURCE: &str = with_prelude!("gelu.wgsl");

const FORWARD: Kernel = Kernel {
    name: "gelu_forward",
    source: SOURCE,
    entry: "forward",
    unchecked: false,
};
const BACKWARD: Kernel = Kernel {
    name: "gelu_backward",
    source: SOURCE,
    entry: "backward",
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

/// `dout` times the derivative of [`gelu_forward`] at `x` (`n` floats each).
pub fn gelu_backward(
    ctx: &WgpuContext,
    x: &PooledBuffer,
    dout: &PooledBuffer,
    n: usize,
) -> PooledBuffer {
    let dx = ctx.create_pooled(n * 4);
    let params = Params {
        n: n as u32,
        _pad: [0; 3],
    };
    ctx.dispatch(&BACKWARD, &params, &[x, dout, &dx], grid_1d(n as u32, 256));
    dx
}

//! LayerNorm (eps 1e-5, biased variance as PyTorch), forward and backward.

use super::target::Target;
use crate::gpu::{grid_1d, Kernel, PooledBuffer, WgpuContext};

const SOURCE: &str = with_prelude!("layernorm.wgsl");

const FORWARD: Kernel = Kernel {
    name: "layernorm_forward",
    source: SOURCE,
    entry: "forward",
    unchecked: false,
};
const FORWARD_ROWS: Kernel = Kernel {
    name: "layernorm_forward_rows",
    source: SOURCE,
    entry: "forward_rows",
    unchecked: false,
};
const BACKWARD_DINP_ROWS: Kernel = Kernel {
    name: "layernorm_backward_dinp_rows",
    source: SOURCE,
    entry: "backward_dinp_rows",
    unchecked: false,
};
const BACKWARD_DINP: Kernel = Kernel {
    name: "layernorm_backward_dinp",
    source: SOURCE,
    entry: "backward_dinp",
    unchecked: false,
};
const BACKWARD_PARTIAL: Kernel = Kernel {
    name: "layernorm_backward_partial",
    source: SOURCE,
    entry: "backward_partial",
    unchecked: false,
};
const BACKWARD_FINAL: Kernel = Kernel {
    name: "layernorm_backward_final",
    source: SOURCE,
    entry: "backward_final",
    unchecked: false,
};

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    c: u32,
    chunks: u32,
    chunk_rows: u32,
}

/// Rows a thread of the dweight/dbias first pass sums: at 16384 x 384 that is 256
/// chunks, about 98k threads, and a second pass of 256 terms a channel.
const CHUNK_ROWS: usize = 64;

/// Workgroup size of every entry point (`WG` in layernorm.wgsl).
const WG: u32 = 128;

/// GPUs: one workgroup a row. CPU adapters: one thread a row.
fn row_grid(target: Target, rows: usize) -> [u32; 3] {
    match target {
        Target::Gpu => grid_1d(rows as u32, 1),
        Target::Cpu => grid_1d(rows as u32, WG),
    }
}

/// LayerNorm of each of `rows` rows of `c` floats: returns `out` (`rows*c`) and the
/// per-row `mean` and `rstd` (`rows` each) for the backward pass.
pub fn layernorm_forward(
    ctx: &WgpuContext,
    inp: &PooledBuffer,
    weight: &PooledBuffer,
    bias: &PooledBuffer,
    rows: usize,
    c: usize,
) -> (PooledBuffer, PooledBuffer, PooledBuffer) {
    layernorm_forward_on(ctx, Target::of(ctx), inp, weight, bias, rows, c)
}

/// [`layernorm_forward`] in the variant for `target`.
pub fn layernorm_forward_on(
    ctx: &WgpuContext,
    target: Target,
    inp: &PooledBuffer,
    weight: &PooledBuffer,
    bias: &PooledBuffer,
    rows: usize,
    c: usize,
) -> (PooledBuffer, PooledBuffer, PooledBuffer) {
    let out = ctx.create_pooled(rows * c * 4);
    let mean = ctx.create_pooled(rows * 4);
    let rstd = ctx.create_pooled(rows * 4);
    let params = Params {
        rows: rows as u32,
        c: c as u32,
        chunks: 0,
        chunk_rows: 0,
    };
    let kernel = match target {
        Target::Gpu => &FORWARD,
        Target::Cpu => &FORWARD_ROWS,
    };
    ctx.dispatch(
        kernel,
        &params,
        &[inp, weight, bias, &out, &mean, &rstd],
        row_grid(target, rows),
    );
    (out, mean, rstd)
}

/// Gradients of [`layernorm_forward`]: `dinp` (`rows*c`), `dweight` and `dbias` (`c`,
/// summed over rows). The sum over rows runs in two passes (chunks of rows, then the
/// chunks), in a fixed order; it draws one scratch buffer of `2 * ceil(rows/64) * c`
/// floats from the pool.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_backward(
    ctx: &WgpuContext,
    dout: &PooledBuffer,
    inp: &PooledBuffer,
    weight: &PooledBuffer,
    mean: &PooledBuffer,
    rstd: &PooledBuffer,
    rows: usize,
    c: usize,
) -> (PooledBuffer, PooledBuffer, PooledBuffer) {
    layernorm_backward_on(ctx, Target::of(ctx), dout, inp, weight, mean, rstd, rows, c)
}

/// [`layernorm_backward`] in the variant for `target`.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_backward_on(
    ctx: &WgpuContext,
    target: Target,
    dout: &PooledBuffer,
    inp: &PooledBuffer,
    weight: &PooledBuffer,
    mean: &PooledBuffer,
    rstd: &PooledBuffer,
    rows: usize,
    c: usize,
) -> (PooledBuffer, PooledBuffer, PooledBuffer) {
    let chunks = rows.div_ceil(CHUNK_ROWS).max(1);
    let params = Params {
        rows: rows as u32,
        c: c as u32,
        chunks: chunks as u32,
        chunk_rows: CHUNK_ROWS as u32,
    };
    let dinp = ctx.create_pooled(rows * c * 4);
    let kernel = match target {
        Target::Gpu => &BACKWARD_DINP,
        Target::Cpu => &BACKWARD_DINP_ROWS,
    };
    ctx.dispatch(
        kernel,
        &params,
        &[dout, inp, weight, mean, rstd, &dinp],
        row_grid(target, rows),
    );
    let partial = ctx.create_pooled(2 * chunks * c * 4);
    ctx.dispatch(
        &BACKWARD_PARTIAL,
        &params,
        &[dout, inp, mean, rstd, &partial],
        grid_1d((chunks * c) as u32, WG),
    );
    let dweight = ctx.create_pooled(c * 4);
    let dbias = ctx.create_pooled(c * 4);
    ctx.dispatch(
        &BACKWARD_FINAL,
        &params,
        &[&partial, &dweight, &dbias],
        grid_1d(c as u32, WG),
    );
    (dinp, dweight, dbias)
}

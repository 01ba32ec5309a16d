//! LayerNorm (eps 1e-5, biased variance as PyTorch), forward and backward.

use super::split_sums::{Partials, SplitSums};
use super::target::Target;
use crate::gpu::{grid_1d, Kernel, PooledBuffer, WgpuContext};
use crate::reference::{dropout_mask_params, DropoutMask};

pub(super) const SOURCE: &str = concat!(
    include_str!("prelude.wgsl"),
    include_str!("hash.wgsl"),
    include_str!("layernorm.wgsl")
);

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
const BACKWARD_DINP_PARAMS: Kernel = Kernel {
    name: "layernorm_backward_dinp_params",
    source: SOURCE,
    entry: "backward_dinp_params",
    unchecked: false,
};

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    c: u32,
    chunks: u32,
    chunk_rows: u32,
    /// backward_dinp's fusions: bit 0 the residual gradient, bit 1 the mask.
    flags: u32,
    seed: u32,
    threshold: u32,
    scale: f32,
}

const RESID: u32 = 1;
const MASK: u32 = 2;

impl Params {
    fn new(rows: usize, c: usize, chunks: usize, chunk_rows: usize) -> Self {
        Params {
            rows: rows as u32,
            c: c as u32,
            chunks: chunks as u32,
            chunk_rows: chunk_rows as u32,
            flags: 0,
            seed: 0,
            threshold: 0,
            scale: 1.0,
        }
    }
}

/// Rows a thread of the dweight/dbias first pass sums: at 16384 x 384 that is 256
/// chunks, about 98k threads, and a second pass of 256 terms a channel.
const CHUNK_ROWS: usize = 64;

/// Workgroup size of every entry point (`WG` in layernorm.wgsl).
const WG: u32 = 128;

/// Rows a workgroup of `backward_dinp_params` takes: tiny's 512 rows make 128
/// workgroups, and as many split partials for `sum_splits` to add.
const PARAMS_CHUNK_ROWS: usize = 4;

/// Most channels `backward_dinp_params` keeps sums for (`WG * PT` in layernorm.wgsl).
const PARAMS_MAX_C: usize = 1024;

/// Most rows whose weight gradients a GPU sums in the dinp pass
/// (`backward_dinp_params`): past them the partials would outgrow the two-pass
/// scratch, whose first pass spreads the rows over more threads.
const PARAMS_MAX_ROWS: usize = 4096;

/// Storage buffers `backward_dinp_params` binds: the dinp pass's 8 and the two
/// partials. WebGPU's default is 8; SwiftShader offers 10, native GPUs more.
const PARAMS_STORAGE_BUFFERS: u32 = 10;

/// Whether the weight gradients come from the dinp pass's partials
/// (`backward_dinp_params`) rather than two passes of their own.
fn params_in_dinp(ctx: &WgpuContext, target: Target, rows: usize, c: usize) -> bool {
    target == Target::Gpu
        && rows <= PARAMS_MAX_ROWS
        && c <= PARAMS_MAX_C
        && ctx.limits().max_storage_buffers_per_shader_stage >= PARAMS_STORAGE_BUFFERS
}

/// Lengths (floats) of the scratch buffers that [`layernorm_backward_on`] draws from
/// the pool for its weight gradients, in the order drawn: two `[chunks of 4 rows,
/// c]` partials where the dinp pass sums them, else the two passes' one `2 * ceil(rows
/// / 64) * c`.
pub fn layernorm_backward_scratch(
    ctx: &WgpuContext,
    target: Target,
    rows: usize,
    c: usize,
) -> Vec<usize> {
    if params_in_dinp(ctx, target, rows, c) {
        vec![rows.div_ceil(PARAMS_CHUNK_ROWS).max(1) * c; 2]
    } else {
        vec![2 * rows.div_ceil(CHUNK_ROWS).max(1) * c]
    }
}

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
    let params = Params::new(rows, c, 0, 0);
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
/// summed over rows). The sum over rows runs in a fixed order, in chunks of rows then
/// the chunks, through scratch buffers from the pool ([`layernorm_backward_scratch`]):
/// on GPUs up to 4096 rows the dinp pass sums the chunks, else a pass of their own.
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
    let (dinp, _, dweight, dbias) = layernorm_backward_deferred_on(
        ctx, target, dout, inp, weight, mean, rstd, rows, c, None, None, None,
    );
    (dinp, dweight, dbias)
}

/// [`layernorm_backward_on`] where the input was also the residual stream: `dinp` is
/// `resid + ` the layernorm's input gradient (`resid`: the stream's gradient from
/// above), and with `mask` also returned through that dropout mask (the gradient of
/// the residual branch whose output the input was). Returns (dinp, masked, dweight,
/// dbias). The weight gradients' partials, where the dinp pass leaves them (GPUs, up
/// to 4096 rows), wait in `sums` when given (and under its cap) for
/// [`SplitSums::finish`] to add them with the backward pass's others; else they are
/// added now.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_backward_deferred_on(
    ctx: &WgpuContext,
    target: Target,
    dout: &PooledBuffer,
    inp: &PooledBuffer,
    weight: &PooledBuffer,
    mean: &PooledBuffer,
    rstd: &PooledBuffer,
    rows: usize,
    c: usize,
    resid: Option<&PooledBuffer>,
    mask: Option<DropoutMask>,
    sums: Option<&mut SplitSums>,
) -> (
    PooledBuffer,
    Option<PooledBuffer>,
    PooledBuffer,
    PooledBuffer,
) {
    let in_dinp = params_in_dinp(ctx, target, rows, c);
    let chunk_rows = if in_dinp {
        PARAMS_CHUNK_ROWS
    } else {
        CHUNK_ROWS
    };
    let chunks = rows.div_ceil(chunk_rows).max(1);
    let mut params = Params::new(rows, c, chunks, chunk_rows);
    if let Some(resid) = resid {
        assert!(
            resid.size() >= (rows * c * 4) as u64,
            "layernorm_backward resid"
        );
        params.flags |= RESID;
    }
    if let Some(m) = mask {
        let (threshold, scale) = dropout_mask_params(m.p);
        (params.seed, params.threshold, params.scale) = (m.seed, threshold, scale);
        params.flags |= MASK;
    }
    let dinp = ctx.create_pooled(rows * c * 4);
    let masked = mask.map(|_| ctx.create_pooled(rows * c * 4));
    let scratch: Vec<PooledBuffer> = layernorm_backward_scratch(ctx, target, rows, c)
        .into_iter()
        .map(|len| ctx.create_pooled(len * 4))
        .collect();
    let resid_or_any = resid.unwrap_or(dout);
    if in_dinp {
        let dweight = ctx.create_pooled(c * 4);
        let dbias = ctx.create_pooled(c * 4);
        // Without a mask `masked` is never written, and takes dweight, which the sum
        // of partials writes later: WebGPU forbids two writable bindings of one buffer
        // in a dispatch, whether or not both are written.
        let masked_or_any = masked.as_ref().unwrap_or(&dweight);
        ctx.dispatch(
            &BACKWARD_DINP_PARAMS,
            &params,
            &[
                dout,
                inp,
                weight,
                mean,
                rstd,
                &dinp,
                resid_or_any,
                masked_or_any,
                &scratch[0],
                &scratch[1],
            ],
            grid_1d(chunks as u32 * WG, WG),
        );
        let mut scratch = scratch.into_iter();
        let mut partials = |out| Partials {
            out,
            pending: Some((scratch.next().expect("two partials"), c, chunks)),
        };
        let (dweight, dbias) = (partials(dweight), partials(dbias));
        let (dweight, dbias) = SplitSums::defer_or_finish(sums, ctx, dweight, Some(dbias));
        return (dinp, masked, dweight, dbias.expect("a bias gradient"));
    }
    // The scratch is written only by a later pass: without a mask the dinp pass
    // binds it in place of `masked` (written only with one).
    let partial = &scratch[0];
    let masked_or_any = masked.as_ref().unwrap_or(partial);
    let kernel = match target {
        Target::Gpu => &BACKWARD_DINP,
        Target::Cpu => &BACKWARD_DINP_ROWS,
    };
    ctx.dispatch(
        kernel,
        &params,
        &[
            dout,
            inp,
            weight,
            mean,
            rstd,
            &dinp,
            resid_or_any,
            masked_or_any,
        ],
        row_grid(target, rows),
    );
    ctx.dispatch(
        &BACKWARD_PARTIAL,
        &params,
        &[dout, inp, mean, rstd, partial],
        grid_1d((chunks * c) as u32, WG),
    );
    let dweight = ctx.create_pooled(c * 4);
    let dbias = ctx.create_pooled(c * 4);
    ctx.dispatch(
        &BACKWARD_FINAL,
        &params,
        &[partial, &dweight, &dbias],
        grid_1d(c as u32, WG),
    );
    (dinp, masked, dweight, dbias)
}

//! LayerNorm (eps 1e-5, biased variance as PyTorch), forward and backward.

use super::target::Target;
use crate::gpu::{grid_1d, Kernel, PooledBuffer, Slice, WgpuContext};
use crate::reference::{dropout_mask_params, DropoutMask};

pub(super) const SOURCE: &str = concat!(
    include_str!("../gpu/prelude.wgsl"),
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

/// Channels a column workgroup of `backward_dinp_params` sums (`PC` in
/// layernorm.wgsl).
const PARAMS_CHANNELS: usize = 2;

/// Most rows whose weight gradients a GPU sums in the dinp pass's column workgroups
/// (`backward_dinp_params`): a lane then adds up to 64 rows. Past them two passes
/// of their own spread the rows over many more threads.
const PARAMS_MAX_ROWS: usize = 4096;

/// Storage buffers `backward_dinp_params` binds: the dinp pass's 8, dweight and
/// dbias. WebGPU's default is 8; SwiftShader offers 10, native GPUs more.
const PARAMS_STORAGE_BUFFERS: u32 = 10;

/// Whether the weight gradients come from the dinp pass's own workgroups
/// (`backward_dinp_params`) rather than two passes of their own.
fn params_in_dinp(ctx: &WgpuContext, target: Target, rows: usize) -> bool {
    target == Target::Gpu
        && rows <= PARAMS_MAX_ROWS
        && ctx.limits().max_storage_buffers_per_shader_stage >= PARAMS_STORAGE_BUFFERS
}

/// Floats of pooled scratch that [`layernorm_backward_on`] draws for its weight
/// gradients: 0 where the dinp pass sums them (GPUs, up to 4096 rows), else two
/// passes' `2 * ceil(rows / 64) * c` partial sums.
pub fn layernorm_backward_scratch(
    ctx: &WgpuContext,
    target: Target,
    rows: usize,
    c: usize,
) -> usize {
    if params_in_dinp(ctx, target, rows) {
        0
    } else {
        2 * rows.div_ceil(CHUNK_ROWS).max(1) * c
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
pub fn layernorm_forward<'w>(
    ctx: &WgpuContext,
    inp: &PooledBuffer,
    weight: impl Into<Slice<'w>>,
    bias: impl Into<Slice<'w>>,
    rows: usize,
    c: usize,
) -> (PooledBuffer, PooledBuffer, PooledBuffer) {
    layernorm_forward_on(ctx, Target::of(ctx), inp, weight, bias, rows, c)
}

/// [`layernorm_forward`] in the variant for `target`.
pub fn layernorm_forward_on<'w>(
    ctx: &WgpuContext,
    target: Target,
    inp: &PooledBuffer,
    weight: impl Into<Slice<'w>>,
    bias: impl Into<Slice<'w>>,
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
    ctx.dispatch_slices(
        kernel,
        &params,
        &[
            inp.into(),
            weight.into(),
            bias.into(),
            (&out).into(),
            (&mean).into(),
            (&rstd).into(),
        ],
        row_grid(target, rows),
    );
    (out, mean, rstd)
}

/// Gradients of [`layernorm_forward`]: `dinp` (`rows*c`), `dweight` and `dbias` (`c`,
/// summed over rows). The sum over rows runs in a fixed order: on GPUs up to 4096 rows
/// in the dinp pass's own column workgroups (lanes of rows, then a fixed tree), else
/// in two passes (chunks of rows, then the chunks) through a scratch buffer from the
/// pool ([`layernorm_backward_scratch`] floats).
#[allow(clippy::too_many_arguments)]
pub fn layernorm_backward<'w>(
    ctx: &WgpuContext,
    dout: &PooledBuffer,
    inp: &PooledBuffer,
    weight: impl Into<Slice<'w>>,
    mean: &PooledBuffer,
    rstd: &PooledBuffer,
    rows: usize,
    c: usize,
) -> (PooledBuffer, PooledBuffer, PooledBuffer) {
    layernorm_backward_on(ctx, Target::of(ctx), dout, inp, weight, mean, rstd, rows, c)
}

/// [`layernorm_backward`] in the variant for `target`.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_backward_on<'w>(
    ctx: &WgpuContext,
    target: Target,
    dout: &PooledBuffer,
    inp: &PooledBuffer,
    weight: impl Into<Slice<'w>>,
    mean: &PooledBuffer,
    rstd: &PooledBuffer,
    rows: usize,
    c: usize,
) -> (PooledBuffer, PooledBuffer, PooledBuffer) {
    let (dinp, _, dweight, dbias) = layernorm_backward_fused_on(
        ctx, target, dout, inp, weight, mean, rstd, rows, c, None, None,
    );
    (dinp, dweight, dbias)
}

/// [`layernorm_backward_on`] where the input was also the residual stream: `dinp` is
/// `resid + ` the layernorm's input gradient (`resid`: the stream's gradient from
/// above), and with `mask` also returned through that dropout mask (the gradient of
/// the residual branch whose output the input was). Returns (dinp, masked, dweight,
/// dbias).
#[allow(clippy::too_many_arguments)]
pub fn layernorm_backward_fused_on<'w>(
    ctx: &WgpuContext,
    target: Target,
    dout: &PooledBuffer,
    inp: &PooledBuffer,
    weight: impl Into<Slice<'w>>,
    mean: &PooledBuffer,
    rstd: &PooledBuffer,
    rows: usize,
    c: usize,
    resid: Option<&PooledBuffer>,
    mask: Option<DropoutMask>,
) -> (
    PooledBuffer,
    Option<PooledBuffer>,
    PooledBuffer,
    PooledBuffer,
) {
    let (dinp, masked, grads) = layernorm_backward_into(
        ctx,
        target,
        dout,
        inp,
        weight,
        mean,
        rstd,
        (rows, c),
        resid,
        mask,
        None,
    );
    let (dweight, dbias) = grads.expect("made without destinations");
    (dinp, masked, dweight, dbias)
}

/// [`layernorm_backward_fused_on`] with dweight and dbias written into `dests`
/// where given (ranges of `c` floats of the trainer's
/// [`crate::kernels::GradArena`]), else returned. `shape`: (rows, c).
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
pub(crate) fn layernorm_backward_into<'w>(
    ctx: &WgpuContext,
    target: Target,
    dout: &PooledBuffer,
    inp: &PooledBuffer,
    weight: impl Into<Slice<'w>>,
    mean: &PooledBuffer,
    rstd: &PooledBuffer,
    (rows, c): (usize, usize),
    resid: Option<&PooledBuffer>,
    mask: Option<DropoutMask>,
    dests: Option<[Slice; 2]>,
) -> (
    PooledBuffer,
    Option<PooledBuffer>,
    Option<(PooledBuffer, PooledBuffer)>,
) {
    if let Some(dests) = &dests {
        assert!(
            dests.iter().all(|d| d.size() == c as u64 * 4),
            "layernorm gradients of {c} floats"
        );
    }
    // The weight gradients' buffers when they have no destination.
    let made = dests
        .is_none()
        .then(|| (ctx.create_pooled(c * 4), ctx.create_pooled(c * 4)));
    let [dweight, dbias]: [Slice; 2] = match (&made, dests) {
        (Some((w, b)), _) => [w.into(), b.into()],
        (None, Some(dests)) => dests,
        (None, None) => unreachable!(),
    };
    let chunks = rows.div_ceil(CHUNK_ROWS).max(1);
    let mut params = Params::new(rows, c, chunks, CHUNK_ROWS);
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
    let in_dinp = params_in_dinp(ctx, target, rows);
    // Without a mask the dinp pass binds `scratch` in place of `masked` (written only
    // with one): WebGPU forbids two writable bindings of one buffer in a dispatch,
    // written or not. In two passes it is their partial sums, written only by a later
    // pass; in one, a 4-byte stand-in.
    let scratch = ctx.create_pooled(if in_dinp { 4 } else { 2 * chunks * c * 4 });
    let resid_or_any = resid.unwrap_or(dout);
    let masked_or_any = masked.as_ref().unwrap_or(&scratch);
    let mut bound: Vec<Slice> = vec![
        dout.into(),
        inp.into(),
        weight.into(),
        mean.into(),
        rstd.into(),
        (&dinp).into(),
        resid_or_any.into(),
        masked_or_any.into(),
    ];
    if in_dinp {
        bound.extend([dweight, dbias]);
        let groups = rows + c.div_ceil(PARAMS_CHANNELS);
        ctx.dispatch_slices(
            &BACKWARD_DINP_PARAMS,
            &params,
            &bound,
            grid_1d(groups as u32, 1),
        );
        return (dinp, masked, made);
    }
    let kernel = match target {
        Target::Gpu => &BACKWARD_DINP,
        Target::Cpu => &BACKWARD_DINP_ROWS,
    };
    ctx.dispatch_slices(kernel, &params, &bound, row_grid(target, rows));
    let partial = &scratch;
    ctx.dispatch(
        &BACKWARD_PARTIAL,
        &params,
        &[dout, inp, mean, rstd, partial],
        grid_1d((chunks * c) as u32, WG),
    );
    ctx.dispatch_slices(
        &BACKWARD_FINAL,
        &params,
        &[partial.into(), dweight, dbias],
        grid_1d(c as u32, WG),
    );
    (dinp, masked, made)
}

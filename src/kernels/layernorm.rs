//! LayerNorm (eps 1e-5, biased variance as PyTorch), forward and backward.

use crate::gpu::{grid_1d, Kernel, PooledBuffer, Slice, WgpuContext};
pub use crate::reference::LayerNormShape;
use crate::reference::{dropout_mask_params, DropoutMask};
use crate::tuning::Target;

pub(super) const SOURCE: &str = concat!(
    include_str!("../gpu/prelude.wgsl"),
    include_str!("hash.wgsl"),
    include_str!("layernorm_common.wgsl"),
    include_str!("layernorm_bindings.wgsl"),
    include_str!("layernorm.wgsl")
);

const FORWARD: Kernel = Kernel {
    name: "layernorm_forward",
    source: SOURCE,
    entry: "forward",
    unchecked: false,
};
/// `concat!` of a shader that uses subgroups: browsers want the extension enabled
/// first in the module; naga (native) rejects the directive.
#[cfg(target_arch = "wasm32")]
macro_rules! with_subgroups {
    ($($part:expr),* $(,)?) => { concat!("enable subgroups;\n", $($part),*) };
}
#[cfg(not(target_arch = "wasm32"))]
macro_rules! with_subgroups {
    ($($part:expr),* $(,)?) => { concat!($($part),*) };
}

/// The forward with a subgroup a row (layernorm_subgroups.wgsl), where the context
/// reduces by subgroups ([`forward_subgroups`]).
const SUBGROUPS_SOURCE: &str = with_subgroups!(
    include_str!("layernorm_common.wgsl"),
    include_str!("layernorm_bindings.wgsl"),
    include_str!("layernorm_subgroups.wgsl")
);
const FORWARD_SUBGROUPS: Kernel = Kernel {
    name: "layernorm_forward_subgroups",
    source: SUBGROUPS_SOURCE,
    entry: "forward_subgroups",
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

/// Rows a workgroup of `backward_held` takes ([`HELD_ROWS`]; `ROWS` in
/// layernorm_held.wgsl, which [`held_source`] joins in front): a macro, so that the
/// one literal reaches both the constant and `concat!`. 32 beat 8, 16, 64 and 128 on
/// the H100 (the shakespeare step's held backward 1.11 GPU ms against 1.19-1.83;
/// BENCHMARKS.md: the step against PyTorch).
macro_rules! held_rows {
    () => {
        32
    };
}

/// layernorm_held.wgsl with `const HELD` and `const ROWS` joined in front
/// (identical sources are one string in the binary).
macro_rules! held_source {
    ($held:literal) => {
        with_subgroups!(
            "const HELD: u32 = ",
            $held,
            "u;\nconst ROWS: u32 = ",
            held_rows!(),
            "u;\n",
            include_str!("layernorm_common.wgsl"),
            include_str!("hash.wgsl"),
            include_str!("layernorm_held.wgsl")
        )
    };
}
/// layernorm_held.wgsl with `HELD` vec4s a lane: its forward and backward.
macro_rules! held_kernels {
    ($held:literal) => {
        HeldKernels {
            held: $held,
            forward: Kernel {
                name: concat!("layernorm_forward_held", $held),
                source: held_source!($held),
                entry: "forward_held",
                unchecked: false,
            },
            backward: Kernel {
                name: concat!("layernorm_backward_held", $held),
                source: held_source!($held),
                entry: "backward_held",
                unchecked: false,
            },
        }
    };
}

/// The held kernels of one size: up to `held` vec4s a lane, rows of up to
/// `4 * held * width` channels on subgroups `width` wide.
#[derive(Clone, Copy)]
struct HeldKernels {
    held: usize,
    forward: Kernel,
    backward: Kernel,
}

/// The sizes compiled: each row takes the first that holds it (3 and 6: 384 and
/// 768 channels on 32-wide subgroups, which take no padding lanes).
const HELD: [HeldKernels; 7] = [
    held_kernels!(1),
    held_kernels!(2),
    held_kernels!(3),
    held_kernels!(4),
    held_kernels!(6),
    held_kernels!(8),
    held_kernels!(16),
];

const FINAL_HELD: Kernel = Kernel {
    name: "layernorm_backward_final_held",
    source: held_source!(1),
    entry: "final_held",
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

/// Rows a workgroup of the subgroup forward takes where the context reduces by
/// subgroups whose sizes divide the workgroup: WG / the largest size, the fewest
/// rows any of the device's subgroup sizes gives a workgroup.
fn forward_subgroups(ctx: &WgpuContext) -> Option<u32> {
    let info = ctx.adapter_info();
    let (min, max) = (info.subgroup_min_size, info.subgroup_max_size);
    let divides = |size: u32| size > 0 && size.is_power_of_two() && size <= WG;
    (ctx.subgroups() && divides(min) && divides(max)).then(|| WG / max)
}

/// Rows a workgroup of `backward_held` takes (`ROWS` in layernorm_held.wgsl).
const HELD_ROWS: usize = held_rows!();

/// Most channels `backward_held` sums in workgroup memory (4 * `RED_C4`).
const HELD_MAX_C: usize = 1024;

/// Storage buffers `backward_held` binds: WebGPU's default is 8.
const HELD_STORAGE_BUFFERS: u32 = 9;

/// The held kernels (layernorm_held.wgsl) for rows of `c` channels: on GPUs that
/// reduce by subgroups at least WG / `HELD_ROWS` wide, for c a multiple of 4, the
/// fewest vec4s a lane that hold a row on the narrowest subgroups the device picks.
fn held(ctx: &WgpuContext, target: Target, c: usize) -> Option<HeldKernels> {
    let narrowest = ctx.adapter_info().subgroup_min_size as usize;
    let usable = target == Target::Gpu
        && forward_subgroups(ctx).is_some()
        && narrowest >= WG as usize / HELD_ROWS
        && c.is_multiple_of(4);
    let c4 = c / 4;
    HELD.into_iter()
        .find(|h| h.held * narrowest >= c4)
        .filter(|_| usable)
}

/// The held backward for `rows` rows of `c`, where the dinp pass does not sum the
/// weight gradients itself (past 4096 rows): dinp and a partial sum of the weight
/// gradients a block of `HELD_ROWS` rows, read once, then a subgroup a channel adds the
/// blocks.
fn held_backward(ctx: &WgpuContext, target: Target, rows: usize, c: usize) -> Option<Kernel> {
    let fits = !params_in_dinp(ctx, target, rows)
        && c <= HELD_MAX_C
        && ctx.limits().max_storage_buffers_per_shader_stage >= HELD_STORAGE_BUFFERS;
    held(ctx, target, c).filter(|_| fits).map(|h| h.backward)
}

/// Rows a partial sum of the weight gradients covers, where the backward takes them
/// in blocks: the held backward's workgroup, else a thread of `backward_partial`.
fn block_rows(ctx: &WgpuContext, target: Target, rows: usize, c: usize) -> usize {
    match held_backward(ctx, target, rows, c) {
        Some(_) => HELD_ROWS,
        None => CHUNK_ROWS,
    }
}

/// GPUs: one workgroup a row. CPU adapters: one thread a row.
fn row_grid(target: Target, rows: usize) -> [u32; 3] {
    match target {
        Target::Gpu => grid_1d(rows as u32, 1),
        Target::Cpu => grid_1d(rows as u32, WG),
    }
}

/// What the forward saved for the backward: its input and each row's mean and rstd.
#[derive(Clone, Copy, Debug)]
pub struct LayerNormSaved<'a> {
    pub inp: &'a PooledBuffer,
    pub mean: &'a PooledBuffer,
    pub rstd: &'a PooledBuffer,
}

/// The backward's results: `dinp` (`rows*c`), its copy through the dropout mask
/// when one was given, and the weight gradients (`c` each, summed over rows).
pub struct LayerNormGrads {
    pub dinp: PooledBuffer,
    pub masked: Option<PooledBuffer>,
    pub dweight: PooledBuffer,
    pub dbias: PooledBuffer,
}

/// LayerNorm over each row (eps 1e-5, biased variance, as PyTorch), forward and
/// backward. The backward's sum over rows runs in a fixed order: on GPUs up to 4096
/// rows in the dinp pass's own column workgroups (lanes of rows, then a fixed
/// tree), else in two passes (chunks of rows, then the chunks) through a scratch
/// buffer from the pool ([`LayerNorm::backward_scratch`] floats).
#[derive(Clone, Copy, Debug, Default)]
pub struct LayerNorm<'a> {
    /// The kernels' tuning (`None`: the context's).
    pub target: Option<Target>,
    /// Backward: the input was also the residual stream, whose gradient from above
    /// this is: `dinp = resid + ` the layernorm's input gradient.
    pub resid: Option<&'a PooledBuffer>,
    /// Backward: `dinp` is also returned through this dropout mask (the gradient of
    /// the residual branch whose output the input was).
    pub mask: Option<DropoutMask>,
}

impl LayerNorm<'_> {
    fn target(&self, ctx: &WgpuContext) -> Target {
        self.target.unwrap_or(ctx.kernel_target())
    }

    /// `out` (`rows*c`) and each row's `mean` and `rstd` (`rows` each) for the
    /// backward.
    pub fn forward<'w>(
        &self,
        ctx: &WgpuContext,
        inp: &PooledBuffer,
        weight: impl Into<Slice<'w>>,
        bias: impl Into<Slice<'w>>,
        shape: LayerNormShape,
    ) -> (PooledBuffer, PooledBuffer, PooledBuffer) {
        let LayerNormShape { rows, c } = shape;
        let target = self.target(ctx);
        let out = ctx.create_pooled(rows * c * 4);
        let mean = ctx.create_pooled(rows * 4);
        let rstd = ctx.create_pooled(rows * 4);
        let params = Params::new(rows, c, 0, 0);
        let held = held(ctx, target, c);
        let (kernel, grid) = match (target, forward_subgroups(ctx)) {
            (Target::Gpu, Some(rows_a_workgroup)) => {
                let kernel = held.as_ref().map_or(&FORWARD_SUBGROUPS, |h| &h.forward);
                (kernel, grid_1d(rows as u32, rows_a_workgroup))
            }
            (Target::Gpu, None) => (&FORWARD, row_grid(target, rows)),
            (Target::Cpu, _) => (&FORWARD_ROWS, row_grid(target, rows)),
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
            grid,
        );
        (out, mean, rstd)
    }

    /// Floats of pooled scratch the backward draws for its weight gradients: 0
    /// where the dinp pass sums them (GPUs, up to 4096 rows), else the partial sums
    /// of blocks of rows: `2 * ceil(rows / HELD_ROWS) * c` for the held backward (GPUs with
    /// subgroups), `2 * ceil(rows / 64) * c` for the two passes of its own.
    pub fn backward_scratch(&self, ctx: &WgpuContext, shape: LayerNormShape) -> usize {
        let LayerNormShape { rows, c } = shape;
        let target = self.target(ctx);
        if params_in_dinp(ctx, target, rows) {
            0
        } else {
            2 * rows.div_ceil(block_rows(ctx, target, rows, c)).max(1) * c
        }
    }

    /// The most scratch [`LayerNorm::backward_scratch`] gives for `rows` rows of `c`
    /// channels on any device (the held backward's partial sums), in u64 for the
    /// planner.
    pub fn most_scratch_floats(rows: u64, c: u64) -> u64 {
        2 * rows.div_ceil(HELD_ROWS as u64).max(1) * c
    }

    /// The gradients of [`LayerNorm::forward`] from `dout`.
    pub fn backward<'w>(
        &self,
        ctx: &WgpuContext,
        dout: &PooledBuffer,
        saved: LayerNormSaved,
        weight: impl Into<Slice<'w>>,
        shape: LayerNormShape,
    ) -> LayerNormGrads {
        let (dinp, masked, grads) = self.backward_to(ctx, dout, saved, weight.into(), shape, None);
        let (dweight, dbias) = grads.expect("made without destinations");
        LayerNormGrads {
            dinp,
            masked,
            dweight,
            dbias,
        }
    }

    /// [`LayerNorm::backward`] with dweight and dbias written into `dests` (ranges
    /// of `c` floats of the trainer's [`crate::kernels::GradArena`]): returns
    /// (dinp, masked).
    pub(crate) fn backward_into(
        &self,
        ctx: &WgpuContext,
        dout: &PooledBuffer,
        saved: LayerNormSaved,
        weight: Slice,
        shape: LayerNormShape,
        dests: [Slice; 2],
    ) -> (PooledBuffer, Option<PooledBuffer>) {
        let (dinp, masked, _) = self.backward_to(ctx, dout, saved, weight, shape, Some(dests));
        (dinp, masked)
    }

    /// The backward, with the weight gradients into `dests` where given, else
    /// into buffers of their own, returned.
    #[allow(clippy::type_complexity)]
    fn backward_to(
        &self,
        ctx: &WgpuContext,
        dout: &PooledBuffer,
        saved: LayerNormSaved,
        weight: Slice,
        shape: LayerNormShape,
        dests: Option<[Slice; 2]>,
    ) -> (
        PooledBuffer,
        Option<PooledBuffer>,
        Option<(PooledBuffer, PooledBuffer)>,
    ) {
        let LayerNormShape { rows, c } = shape;
        let LayerNormSaved { inp, mean, rstd } = saved;
        let (target, resid, mask) = (self.target(ctx), self.resid, self.mask);
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
        let held = held_backward(ctx, target, rows, c);
        let chunk_rows = block_rows(ctx, target, rows, c);
        let chunks = rows.div_ceil(chunk_rows).max(1);
        let mut params = Params::new(rows, c, chunks, chunk_rows);
        if let Some(resid) = resid {
            assert!(
                resid.size_class() >= rows * c * 4,
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
            weight,
            mean.into(),
            rstd.into(),
            (&dinp).into(),
            resid_or_any.into(),
            masked_or_any.into(),
        ];
        if let Some(kernel) = held {
            // Its partial sums take `scratch`, so without a mask `masked` is bound to a
            // stand-in of one vec4 of its own.
            let stand_in = masked.is_none().then(|| ctx.create_pooled(16));
            bound[7] = masked
                .as_ref()
                .or(stand_in.as_ref())
                .unwrap_or(&scratch)
                .into();
            bound.push((&scratch).into());
            ctx.dispatch_slices(&kernel, &params, &bound, grid_1d(chunks as u32, 1));
            let series_a_workgroup =
                forward_subgroups(ctx).expect("held kernels reduce by subgroups");
            ctx.dispatch_slices(
                &FINAL_HELD,
                &params,
                &[(&scratch).into(), dweight, dbias],
                grid_1d(2 * c as u32, series_a_workgroup),
            );
            return (dinp, masked, made);
        }
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
}

/// Every kernel of this op.
pub(super) fn catalog() -> Vec<Kernel> {
    vec![
        FORWARD,
        FORWARD_SUBGROUPS,
        FORWARD_ROWS,
        BACKWARD_DINP_ROWS,
        BACKWARD_DINP,
        BACKWARD_PARTIAL,
        BACKWARD_FINAL,
        BACKWARD_DINP_PARAMS,
        FINAL_HELD,
    ]
    .into_iter()
    .chain(HELD.iter().flat_map(|h| [h.forward, h.backward]))
    .collect()
}

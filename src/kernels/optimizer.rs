//! The optimizer on the GPU: gradient clipping by the global norm, then AdamW, over
//! every parameter tensor in a few dispatches ([`adamw_step`]), plus the sums that
//! the loss's mean shares ([`sum_into`]) and scaling in place.
//!
//! A step is three passes, each over many tensors a dispatch:
//! 1. `sumsq`: partial sums of squares of every gradient into one scratch buffer,
//!    up to [`TensorsPerDispatch::sumsq`] tensors a dispatch;
//! 2. `global_norm`: one workgroup adds the partials in a fixed order and writes
//!    `[norm, scale]` to the head of each chunk of the moments;
//! 3. `adamw`: up to [`TensorsPerDispatch::adamw`] tensors a dispatch, each with its
//!    own gradient buffer, the parameters and both moments in one chunk each of their
//!    arenas ([`ParamArena`], [`Moments`]).
//!
//! WGSL has no arrays of buffers, so a kernel for k tensors declares a binding for
//! each one's gradient; `optimizer_tensors.wgsl` is its template, stamped for each k
//! used.
//! The norm and scale never leave the GPU.

use std::fmt::Write;
use std::sync::Mutex;

use super::arena::{ArenaLayout, GradArena, ParamArena};
use super::target::Target;
use crate::error::Result;
use crate::gpu::{grid_1d, Kernel, PooledBuffer, Slice, WgpuContext};
pub use crate::reference::AdamW;

pub(super) const SOURCE: &str = with_prelude!("optimizer.wgsl");
const TEMPLATE: &str = include_str!("optimizer_tensors.wgsl");
use super::PRELUDE;

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
const GLOBAL_NORM: Kernel = Kernel {
    name: "optimizer_global_norm",
    source: SOURCE,
    entry: "global_norm",
    unchecked: false,
};
const GLOBAL_NORM_REPORT: Kernel = Kernel {
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

/// `Params` in optimizer.wgsl (the sums, the norm, the scaling).
#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    parts: u32,
    slot: u32,
    square: u32,
    mul: f32,
    max_norm: f32,
    _pad: [u32; 2],
}

/// Most tensors one dispatch takes, whatever the device allows: it bounds the
/// generated kernels (and the uniform's table) at a size that compiles quickly.
pub const MAX_TENSORS_PER_DISPATCH: usize = 32;
const MAX_K: usize = MAX_TENSORS_PER_DISPATCH;
// The table of splits packs four tensors a vec4.
const _: () = assert!(MAX_K.is_multiple_of(4));

/// `TensorsParams` in optimizer_tensors.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct TensorsParams {
    decay: u32,
    groups: u32,
    /// adamw: where v starts in the moments' buffer (the chunk's length).
    vbase: u32,
    _pad0: u32,
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    weight_decay: f32,
    bc1: f32,
    bc2: f32,
    _pad1: f32,
    tensors: [[u32; 4]; MAX_K],
    /// sumsq, adamw: tensor t's gradient is `splits[t / 4][t % 4]` split partials...
    splits: [[u32; 4]; MAX_K / 4],
    /// ...from float `grad_offsets[t / 4][t % 4]` of the gradients' chunk.
    grad_offsets: [[u32; 4]; MAX_K / 4],
}

const WG: u32 = 256;
/// Workgroups of the sum's first pass: at least 4 elements a thread, at most 256
/// partials for the one-workgroup second pass.
const MAX_PARTS: usize = 256;
/// Largest sum that CPU adapters do in one pass of one workgroup: a dispatch and a
/// reduction tree fewer, and at the sizes they train, no less parallel in practice.
const CPU_ONE_PASS_MAX: usize = 1 << 16;
/// The same on GPUs: up to 16 loads a thread, as short as the first of two passes
/// (the loss's mean of the page's presets: 512 and 2048 rows).
const GPU_ONE_PASS_MAX: usize = 16 * WG as usize;

/// Whether a sum of `n` floats on `target` (the loss's mean, [`crate::kernels::mean`]) runs
/// in one pass of one workgroup, drawing no scratch from the pool.
pub fn sum_in_one_pass(target: Target, n: usize) -> bool {
    n <= match target {
        Target::Cpu => CPU_ONE_PASS_MAX,
        Target::Gpu => GPU_ONE_PASS_MAX,
    }
}
/// Elements one AdamW workgroup updates: 4 a thread on GPUs (enough workgroups to
/// fill one, fewer to map to their tensors); 16 on CPU adapters, whose cost is per
/// workgroup more than per element.
const ADAMW_SPAN_GPU: u32 = 4 * WG;
const ADAMW_SPAN_CPU: u32 = 16 * WG;

/// `out[slot] = mul * sum(x[i])` (or of `x[i]^2` when `square`) over `n` floats, in
/// one or two passes with a fixed order, in the variant for `target`. Writes only
/// `out[slot]`. In two passes it draws one scratch buffer of `min(ceil(n/1024), 256)`
/// floats from the pool; in one ([`sum_in_one_pass`]: up to 4096 floats on GPUs, 65536
/// on CPU adapters) none.
#[allow(clippy::too_many_arguments)]
pub(crate) fn sum_into(
    ctx: &WgpuContext,
    target: Target,
    x: &PooledBuffer,
    n: usize,
    square: bool,
    mul: f32,
    out: &PooledBuffer,
    slot: usize,
) {
    if sum_in_one_pass(target, n) {
        let params = Params {
            n: n as u32,
            slot: slot as u32,
            square: square as u32,
            mul,
            ..Default::default()
        };
        ctx.dispatch(&REDUCE_ONE, &params, &[x, out], [1, 1, 1]);
        return;
    }
    let parts = n.div_ceil(4 * WG as usize).clamp(1, MAX_PARTS);
    let params = Params {
        n: n as u32,
        parts: parts as u32,
        slot: slot as u32,
        square: square as u32,
        mul,
        ..Default::default()
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

/// `x *= norm_scale[1]` over `n` floats, in place.
pub fn scale_in_place(ctx: &WgpuContext, x: &PooledBuffer, n: usize, norm_scale: &PooledBuffer) {
    let params = Params {
        n: n as u32,
        ..Default::default()
    };
    ctx.dispatch(&SCALE, &params, &[x, norm_scale], grid_1d(n as u32, WG));
}

// ---- the moments ------------------------------------------------------------------

/// AdamW's moments of every tensor, kept for the trainer's life, in the chunks of the
/// parameters' [`ArenaLayout`]: each chunk's buffer holds its m, then its v, a tensor
/// at the same offset in each as in the parameters' chunk. AdamW binds one buffer for
/// both. A new run's come zeroed from the pool; a resumed run's are uploads of
/// exactly their size (never recycled).
pub struct Moments {
    layout: ArenaLayout,
    /// Chunk c: `[m | v]`, `2 * layout.chunk_lens[c]` floats.
    mv: Vec<PooledBuffer>,
}

impl Moments {
    /// Zero moments for tensors of `lens` floats.
    pub fn zeroed(ctx: &WgpuContext, lens: &[usize]) -> Result<Moments> {
        Moments::zeroed_in(ctx, ArenaLayout::new(lens, ctx.max_binding_size())?)
    }

    /// Zero moments in `layout`.
    pub fn zeroed_in(ctx: &WgpuContext, layout: ArenaLayout) -> Result<Moments> {
        let mv = layout
            .chunk_lens
            .iter()
            .map(|&n| ctx.create_zeroed(2 * n * 4))
            .collect();
        Ok(Moments { layout, mv })
    }

    /// Moments with the given values (`m[i]` and `v[i]` of one length per tensor),
    /// as a checkpoint holds them, in `layout`.
    pub fn from_values_in(
        ctx: &WgpuContext,
        layout: ArenaLayout,
        m: &[Vec<f32>],
        v: &[Vec<f32>],
    ) -> Result<Moments> {
        layout.check(m, "AdamW's first moments")?;
        layout.check(v, "AdamW's second moments")?;
        // Written at creation: no staging chunk of the arena's size stays behind.
        let mv = layout
            .pack(2, &[m, v])
            .iter()
            .map(|host| ctx.upload(host))
            .collect();
        Ok(Moments { layout, mv })
    }

    /// Every tensor's `(m, v)`, downloaded (one read a chunk).
    pub async fn download(&self, ctx: &WgpuContext) -> Result<(Vec<Vec<f32>>, Vec<Vec<f32>>)> {
        let mut chunks = Vec::with_capacity(self.mv.len());
        for (buffer, &n) in self.mv.iter().zip(&self.layout.chunk_lens) {
            chunks.push(ctx.download::<f32>(buffer, 2 * n).await?);
        }
        Ok((
            self.layout.unpack(0, &chunks),
            self.layout.unpack(1, &chunks),
        ))
    }

    pub fn layout(&self) -> &ArenaLayout {
        &self.layout
    }

    /// Tensors whose moments these are.
    pub fn len(&self) -> usize {
        self.layout.len()
    }

    pub fn is_empty(&self) -> bool {
        self.layout.is_empty()
    }

    /// Buffers the moments are split into (1 unless the model passes half of the
    /// largest binding).
    pub fn chunks(&self) -> usize {
        self.layout.chunks()
    }

    /// The buffer whose first two floats are `[norm, scale]` of the latest
    /// [`adamw_step`]: the global gradient norm and the clipping scale.
    pub fn norm_scale(&self) -> &PooledBuffer {
        &self.mv[0]
    }
}

// ---- the step ----------------------------------------------------------------------

/// How many tensors one dispatch of each multi-tensor kernel takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorsPerDispatch {
    /// `sumsq` binds a chunk of the gradients and the partials, whatever the tensors.
    pub sumsq: usize,
    /// `adamw` binds a chunk of the gradients, of the parameters and of the moments.
    pub adamw: usize,
    /// `sum_splits` binds two a sum (partials, sum).
    pub sums: usize,
}

impl TensorsPerDispatch {
    /// As many as a shader stage may bind (`max_storage` storage buffers, `max_buffers`
    /// buffers of every kind, the uniform included), at most
    /// [`MAX_TENSORS_PER_DISPATCH`]: the optimizer's passes bind a few arenas, so
    /// they take that many on any device; sums of partials take half of what a
    /// stage binds (WebGPU's default of 8 storage buffers gives 4; Dawn on GPUs 16,
    /// 8; lavapipe 32, 16). Metal counts storage and uniform buffers against one
    /// limit (29 in wgpu).
    pub fn for_limits(max_storage: u32, max_buffers: u32) -> Self {
        let n = max_storage.min(max_buffers.saturating_sub(1)) as usize;
        TensorsPerDispatch {
            sumsq: MAX_K,
            adamw: MAX_K,
            sums: (n / 2).clamp(1, MAX_K),
        }
    }

    /// For the device of `ctx` (which asks for the adapter's own limits).
    pub fn of(ctx: &WgpuContext) -> Self {
        let l = ctx.limits();
        Self::for_limits(
            l.max_storage_buffers_per_shader_stage,
            l.max_buffers_and_acceleration_structures_per_shader_stage,
        )
    }

    /// What the `target` tuning uses of these. CPU adapters run every case of the
    /// sums' switch on the tensor under a lane mask, so each sum a dispatch costs
    /// every workgroup: they take at most 4 there (`CPU_SUMS_TENSORS`).
    pub fn for_target(self, target: Target) -> Self {
        match target {
            Target::Gpu => self,
            Target::Cpu => TensorsPerDispatch {
                sums: self.sums.min(CPU_SUMS_TENSORS),
                ..self
            },
        }
    }
}

/// Sums of split partials a dispatch on CPU adapters: the fastest on lavapipe of 1
/// to 15 for AdamW when it had a case a tensor (BENCHMARKS.md).
const CPU_SUMS_TENSORS: usize = 4;

/// Workgroups and elements a workgroup of the `sumsq` pass for a tensor of `len`.
fn sumsq_parts(target: Target, len: usize) -> (usize, usize) {
    let parts = match target {
        Target::Gpu => len.div_ceil(4 * WG as usize).clamp(1, MAX_PARTS),
        Target::Cpu => len.div_ceil(CPU_ONE_PASS_MAX).max(1),
    };
    let span = len
        .div_ceil(parts)
        .next_multiple_of(WG as usize)
        .max(WG as usize);
    (parts, span)
}

/// Floats of the scratch buffer [`adamw_step_on`] draws from the pool for tensors
/// of `lens` floats: the partial sums of squares.
pub fn scratch_floats(target: Target, lens: &[usize]) -> usize {
    lens.iter()
        .map(|&n| sumsq_parts(target, n).0)
        .sum::<usize>()
}

/// Clips the gradients to the global norm `max_norm` (0: no clipping) and applies
/// AdamW to every tensor of `params` in place, tensor `i` with its gradient in
/// `grads` (as many partials as [`GradArena::splits`] says, added as they are read,
/// in the order of the sums of [`crate::kernels::SplitSums`]: the same bits) and the
/// moments of `moments`' tensor `i`. Weight decay is `hp.weight_decay` where
/// `decay[i]` is set (matrices and embeddings, as nanoGPT), else 0. Afterwards
/// [`Moments::norm_scale`] holds `[norm, scale]`. The CPU specification is
/// [`crate::reference::clip_scale`] over the sums of
/// [`crate::reference::grad_sumsq`], then [`crate::reference::adamw_update`].
/// `report`: `(buffer, slot)` where `[norm, scale]` go too, at floats `slot` and
/// `slot + 1` (the trainer gathers a call's figures so, and copies them out once).
#[allow(clippy::too_many_arguments)]
pub fn adamw_step(
    ctx: &WgpuContext,
    params: &ParamArena,
    grads: &GradArena,
    decay: &[bool],
    moments: &Moments,
    hp: &AdamW,
    max_norm: f32,
    report: Option<(&PooledBuffer, usize)>,
) {
    let target = Target::of(ctx);
    let per = TensorsPerDispatch::of(ctx).for_target(target);
    let arenas = Arenas {
        params,
        grads,
        moments,
    };
    adamw_step_on(ctx, target, per, arenas, decay, hp, max_norm, report)
}

/// The three arenas of an optimizer step, of one layout.
#[derive(Clone, Copy)]
pub struct Arenas<'a> {
    pub params: &'a ParamArena,
    pub grads: &'a GradArena,
    pub moments: &'a Moments,
}

/// [`adamw_step`] in the variant for `target`, with at most `per` tensors a
/// dispatch.
#[allow(clippy::too_many_arguments)]
pub fn adamw_step_on(
    ctx: &WgpuContext,
    target: Target,
    per: TensorsPerDispatch,
    arenas: Arenas,
    decay: &[bool],
    hp: &AdamW,
    max_norm: f32,
    report: Option<(&PooledBuffer, usize)>,
) {
    let Arenas {
        params: weights,
        grads,
        moments,
    } = arenas;
    let layout = moments.layout();
    assert_eq!(
        weights.layout(),
        layout,
        "parameters and moments in one layout"
    );
    assert_eq!(grads.layout().len(), layout.len(), "a gradient a tensor");
    assert_eq!(decay.len(), layout.len(), "a decay flag a tensor");
    assert!((1..=MAX_K).contains(&per.sumsq) && (1..=MAX_K).contains(&per.adamw));
    let u = |x: usize| u32::try_from(x).expect("the plan keeps tensors under 2^32 floats");

    // Runs of at most `most` tensors, each in one chunk.
    let runs = |most: usize| {
        let mut runs = Vec::new();
        let mut start = 0;
        while start < layout.len() {
            let chunk = layout.slots[start].chunk;
            let mut end = start + 1;
            while end < layout.len() && end - start < most && layout.slots[end].chunk == chunk {
                end += 1;
            }
            runs.push((chunk, start..end));
            start = end;
        }
        runs
    };
    // The table of a dispatch over tensors `run`: `entry(i)` gives tensor i's
    // workgroups and (length, offset, span); first workgroups add up.
    let table = |run: std::ops::Range<usize>, entry: &mut dyn FnMut(usize) -> (u32, [u32; 3])| {
        let mut params: TensorsParams = bytemuck::Zeroable::zeroed();
        params.tensors = [[u32::MAX, 0, 0, 0]; MAX_K];
        for (k, i) in run.enumerate() {
            let (groups, [len, offset, span]) = entry(i);
            params.tensors[k] = [params.groups, len, offset, span];
            params.groups += groups;
            params.splits[k / 4][k % 4] = u(grads.splits(i));
            params.grad_offsets[k / 4][k % 4] = u(grads.offset(i));
        }
        params
    };

    // 1. Partial sums of squares of all gradients, tensor after tensor.
    let lens: Vec<usize> = layout.slots.iter().map(|s| s.len).collect();
    let partials = ctx.create_pooled(scratch_floats(target, &lens).max(1) * 4);
    let mut part_offset = 0;
    for (chunk, run) in runs(per.sumsq) {
        let params = table(run, &mut |i| {
            let (parts, span) = sumsq_parts(target, lens[i]);
            let offset = part_offset;
            part_offset += parts;
            (u(parts), [u(lens[i]), u(offset), u(span)])
        });
        let bound: [&wgpu::Buffer; 2] = [grads.chunk(chunk), &partials];
        let kernel = tensors_kernel(Pass::Sumsq, MAX_K);
        ctx.dispatch(&kernel, &params, &bound, grid_1d(params.groups, 1));
    }

    // 2. The norm and the clipping scale, into the head of every chunk of the
    //    moments (and the first one's dispatch into `report`).
    let mut params = Params {
        n: u(part_offset),
        max_norm,
        ..Default::default()
    };
    for (i, chunk) in moments.mv.iter().enumerate() {
        match report.filter(|_| i == 0) {
            Some((report, slot)) => {
                assert!(
                    report.len() >= (slot + 2) * 4,
                    "report slot {slot} of a {}-byte buffer",
                    report.len()
                );
                params.slot = u(slot);
                let bound: [&wgpu::Buffer; 3] = [&partials, chunk, report];
                ctx.dispatch(&GLOBAL_NORM_REPORT, &params, &bound, [1, 1, 1]);
            }
            None => ctx.dispatch(&GLOBAL_NORM, &params, &[&partials, chunk], [1, 1, 1]),
        }
    }

    // 3. AdamW over runs of tensors in one chunk.
    let span = match target {
        Target::Gpu => ADAMW_SPAN_GPU,
        Target::Cpu => ADAMW_SPAN_CPU,
    };
    let (bc1, bc2) = hp.bias_corrections();
    for (chunk, run) in runs(per.adamw) {
        let mut params = table(run.clone(), &mut |i| {
            let slot = &layout.slots[i];
            (
                u(slot.len).div_ceil(span),
                [u(slot.len), u(slot.offset), span],
            )
        });
        for (k, i) in run.enumerate() {
            params.decay |= (decay[i] as u32) << k;
        }
        params.vbase = u(layout.chunk_lens[chunk]);
        (params.lr, params.beta1, params.beta2, params.eps) = (hp.lr, hp.beta1, hp.beta2, hp.eps);
        (params.weight_decay, params.bc1, params.bc2) = (hp.weight_decay, bc1, bc2);
        let bound: [&wgpu::Buffer; 3] =
            [grads.chunk(chunk), weights.chunk(chunk), &moments.mv[chunk]];
        let kernel = tensors_kernel(Pass::Adamw, MAX_K);
        ctx.dispatch(&kernel, &params, &bound, grid_1d(params.groups, 1));
    }
}

// ---- sums of split partials ---------------------------------------------------------

/// One sum of split partials: `out[i] = sum over s of part[s * len + i]`.
pub struct SplitSum<'a> {
    pub part: Slice<'a>,
    /// `len` floats (several sums' outs may be ranges of one buffer: WebGPU lets a
    /// dispatch write disjoint ranges of a buffer through several bindings).
    pub out: Slice<'a>,
    pub len: usize,
    pub splits: usize,
}

/// Every sum of `sums`, `per.sums` a dispatch, each with the same bits as
/// matmul_reduce.wgsl's `sum_splits` alone.
pub fn sum_splits_together(ctx: &WgpuContext, per: TensorsPerDispatch, sums: &[SplitSum]) {
    assert!((1..=MAX_K).contains(&per.sums));
    let u = |x: usize| u32::try_from(x).expect("partials of a binding fit in u32");
    for group in sums.chunks(per.sums) {
        let mut params: TensorsParams = bytemuck::Zeroable::zeroed();
        let mut bound: Vec<Slice> = Vec::with_capacity(2 * group.len());
        for (entry, sum) in params.tensors.iter_mut().zip(group) {
            *entry = [params.groups, u(sum.len), u(sum.splits), 0];
            params.groups += u(sum.len.div_ceil(WG as usize));
            bound.extend([sum.part, sum.out]);
        }
        let kernel = tensors_kernel(Pass::SumSplits, group.len());
        ctx.dispatch_slices(&kernel, &params, &bound, grid_1d(params.groups, 1));
    }
}

// ---- the generated kernels ---------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pass {
    Sumsq,
    Adamw,
    SumSplits,
}

impl Pass {
    fn name(self) -> &'static str {
        match self {
            Pass::Sumsq => "sumsq",
            Pass::Adamw => "adamw",
            Pass::SumSplits => "sum_splits",
        }
    }
}

/// The generated kernels for one and for several tensors a dispatch (the naga test
/// compiles them with each prelude).
pub(super) fn generated_kernels() -> Vec<Kernel> {
    vec![
        tensors_kernel(Pass::Sumsq, MAX_K),
        tensors_kernel(Pass::Adamw, MAX_K),
        tensors_kernel(Pass::SumSplits, 1),
        tensors_kernel(Pass::SumSplits, 3),
    ]
}

/// Every kernel of the optimizer and of the sums of partials: the passes over
/// `MAX_K` tensors and the sums of 1 to `MAX_K`.
pub(super) fn catalog() -> Vec<Kernel> {
    let mut all = vec![
        REDUCE_PARTIAL,
        REDUCE_ONE,
        REDUCE_FINAL,
        GLOBAL_NORM,
        GLOBAL_NORM_REPORT,
        SCALE,
        tensors_kernel(Pass::Sumsq, MAX_K),
        tensors_kernel(Pass::Adamw, MAX_K),
    ];
    all.extend((1..=MAX_K).map(|k| tensors_kernel(Pass::SumSplits, k)));
    all
}

/// The kernel of `pass` for `k` tensors, generated on first use.
fn tensors_kernel(pass: Pass, k: usize) -> Kernel {
    assert!((1..=MAX_K).contains(&k), "{k} tensors a dispatch");
    // Each (pass, k) is generated once and leaked: `Kernel` and the pipeline cache
    // hold `&'static str`s, and k <= MAX_K bounds the whole set at 3 * MAX_K small
    // sources a process (a model uses a few).
    static MADE: Mutex<Vec<(Pass, usize, Kernel)>> = Mutex::new(Vec::new());
    let mut made = crate::gpu::lock(&MADE);
    if let Some((.., kernel)) = made.iter().find(|(p, n, _)| (*p, *n) == (pass, k)) {
        return *kernel;
    }
    let kernel = Kernel {
        name: Box::leak(
            match pass {
                Pass::SumSplits => format!("matmul_sum_splits_of_{k}"),
                _ => format!("optimizer_{}_{k}", pass.name()),
            }
            .into_boxed_str(),
        ),
        source: Box::leak(tensors_source(pass, k).into_boxed_str()),
        entry: pass.name(),
        unchecked: false,
    };
    made.push((pass, k, kernel));
    kernel
}

/// WGSL of `pass` for `k` tensors: the prelude, the bindings, and the template's
/// shared part and `pass`'s section with each `//#each` block copied `k` times.
fn tensors_source(pass: Pass, k: usize) -> String {
    let mut out = String::from(PRELUDE);
    let mut bind = |binding: usize, access: &str, name: String| {
        writeln!(
            out,
            "@group(0) @binding({binding}) var<storage, {access}> {name}: array<f32>;"
        )
        .expect("writing to a String");
    };
    match pass {
        Pass::Sumsq => {
            bind(1, "read", "grads".into());
            bind(2, "read_write", "partials".into());
        }
        Pass::Adamw => {
            bind(1, "read", "grads".into());
            bind(2, "read_write", "param".into());
            bind(3, "read_write", "mv".into());
        }
        Pass::SumSplits => {
            // The partials as `grad{i}`: the template's `grad_at_#` adds them.
            for i in 0..k {
                bind(1 + 2 * i, "read", format!("grad{i}"));
                bind(2 + 2 * i, "read_write", format!("out{i}"));
            }
        }
    }
    writeln!(out, "const K: u32 = {k}u;\nconst MAX_K: u32 = {MAX_K}u;")
        .expect("writing to a String");
    let mut skipping = false;
    let mut block: Option<Vec<&str>> = None;
    for line in TEMPLATE.lines() {
        match line.trim() {
            t if t.starts_with("//#if ") => {
                skipping = !t["//#if ".len()..]
                    .split_whitespace()
                    .any(|name| name == pass.name())
            }
            "//#endif" => skipping = false,
            _ if skipping => {}
            "//#each" => block = Some(Vec::new()),
            "//#end" => {
                let lines = block.take().expect("//#end closes an //#each");
                for i in 0..k {
                    for l in &lines {
                        out.push_str(&l.replace('#', &i.to_string()));
                        out.push('\n');
                    }
                }
            }
            _ => match &mut block {
                Some(lines) => lines.push(line),
                None => {
                    out.push_str(line);
                    out.push('\n');
                }
            },
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_kernels_bind_k_tensors() {
        let src = tensors_source(Pass::Adamw, MAX_K);
        assert!(src.contains("@binding(1) var<storage, read> grads: array<f32>;"));
        assert!(src.contains("@binding(2) var<storage, read_write> param: array<f32>;"));
        assert!(src.contains("@binding(3) var<storage, read_write> mv: array<f32>;"));
        assert!(src.contains("fn grad_at(") && src.contains("fn adamw("));
        assert!(!src.contains("fn sumsq") && !src.contains("fn sum_splits"));
        let src = tensors_source(Pass::Sumsq, MAX_K);
        assert!(src.contains("@binding(2) var<storage, read_write> partials"));
        assert!(src.contains("fn grad_at(") && !src.contains("fn adamw"));
        let src = tensors_source(Pass::SumSplits, 2);
        assert!(src.contains("@binding(4) var<storage, read_write> out1"));
        assert!(src.contains("case 1u: { out1[i] = grad_at_1("));
        assert!(
            !src.contains("case 2u") && !src.contains("fn adamw") && !src.contains("fn grad_at(")
        );
        assert!(
            !src.contains("_#") && !src.contains("#["),
            "placeholders replaced"
        );
    }

    #[test]
    fn tensors_per_dispatch_follow_the_binding_limit() {
        let per = |storage, all| {
            let t = TensorsPerDispatch::for_limits(storage, all);
            (t.sumsq, t.adamw, t.sums)
        };
        assert_eq!(per(8, u32::MAX), (MAX_K, MAX_K, 4));
        assert_eq!(per(10, u32::MAX), (MAX_K, MAX_K, 5));
        assert_eq!(per(16, u32::MAX), (MAX_K, MAX_K, 8));
        assert_eq!(per(32, u32::MAX), (MAX_K, MAX_K, 16));
        assert_eq!(per(1_000_000, u32::MAX), (MAX_K, MAX_K, MAX_K));
        // Metal: 29 buffers of all kinds, one of them the uniform.
        assert_eq!(per(29, 29), (MAX_K, MAX_K, 14));
        let lavapipe = TensorsPerDispatch::for_limits(32, u32::MAX);
        assert_eq!(lavapipe.for_target(Target::Gpu), lavapipe);
        let cpu = lavapipe.for_target(Target::Cpu);
        assert_eq!(
            (cpu.sumsq, cpu.adamw, cpu.sums),
            (MAX_K, MAX_K, CPU_SUMS_TENSORS)
        );
    }
}

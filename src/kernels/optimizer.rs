//! The optimizer on the GPU: gradient clipping by the global norm, then AdamW, over
//! every parameter tensor in a few dispatches ([`OptimizerStep`]), with AdamW's
//! moments ([`Moments`]) kept in chunks of the parameters' layout.
//!
//! A step is three passes, each over many tensors a dispatch:
//! 1. `sumsq` ([`super::multi_tensor`]): partial sums of squares of every gradient
//!    into one scratch buffer, up to [`TensorsPerDispatch::sumsq`] tensors a dispatch;
//! 2. `global_norm` ([`super::reduce`]): one workgroup adds the partials in a fixed
//!    order and writes `[norm, scale]` to the head of each chunk of the moments;
//! 3. `adamw` ([`super::multi_tensor`]): up to [`TensorsPerDispatch::adamw`] tensors
//!    a dispatch, each with its own gradient buffer, the parameters and both moments
//!    in one chunk each of their arenas ([`ParamArena`], [`Moments`]).
//!
//! The norm and scale never leave the GPU.

use super::arenas::{GradArena, ParamArena};
use super::multi_tensor::{tensors_kernel, Pass, TensorsParams, TensorsPerDispatch, MAX_K, WG};
use super::reduce::{Params, CPU_ONE_PASS_MAX, GLOBAL_NORM, GLOBAL_NORM_REPORT, MAX_PARTS};
use crate::arena::ArenaLayout;
use crate::error::Result;
use crate::gpu::{grid_1d, PooledBuffer, Slice, WgpuContext};
use crate::reference::AdamW;
use crate::tuning::Target;

/// Elements one AdamW workgroup updates: 4 a thread on GPUs (enough workgroups to
/// fill one, fewer to map to their tensors); 16 on CPU adapters, whose cost is per
/// workgroup more than per element.
const ADAMW_SPAN_GPU: u32 = 4 * WG;
const ADAMW_SPAN_CPU: u32 = 16 * WG;

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
    /// [`OptimizerStep`]: the global gradient norm and the clipping scale.
    pub fn norm_scale(&self) -> &PooledBuffer {
        &self.mv[0]
    }
}

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

/// Floats of the scratch buffer an [`OptimizerStep`] draws from the pool for tensors
/// of `lens` floats: the partial sums of squares.
pub fn scratch_floats(target: Target, lens: &[usize]) -> usize {
    lens.iter()
        .map(|&n| sumsq_parts(target, n).0)
        .sum::<usize>()
}

// ---- the step ----------------------------------------------------------------------

/// The three arenas of an optimizer step, of one layout.
#[derive(Clone, Copy)]
pub struct Arenas<'a> {
    pub params: &'a ParamArena,
    pub grads: &'a GradArena,
    pub moments: &'a Moments,
}

/// One optimizer step over every tensor of a model's arenas: clips the gradients
/// to the global norm `max_norm` (0: no clipping) and applies AdamW to each tensor
/// in place, tensor `i` with its gradient (as many partials as
/// [`GradArena::splits`] says, added as they are read, in the order of the sums of
/// [`crate::kernels::SplitSums`]: the same bits) and its moments. Weight decay is
/// `hp.weight_decay` where `decay[i]` is set (matrices and embeddings, as nanoGPT),
/// else 0. Afterwards [`Moments::norm_scale`] holds `[norm, scale]`. The CPU
/// specification is [`crate::reference::clip_scale`] over the sums of
/// [`crate::reference::grad_sumsq`], then [`crate::reference::adamw_update`].
#[derive(Clone, Copy, Debug)]
pub struct OptimizerStep<'a> {
    pub hp: AdamW,
    pub max_norm: f32,
    /// Per tensor: whether weight decay applies.
    pub decay: &'a [bool],
    /// `(buffer, slot)` where `[norm, scale]` go too, at floats `slot` and `slot +
    /// 1` (the trainer gathers a call's figures so, and copies them out once).
    pub report: Option<(&'a PooledBuffer, usize)>,
    /// The kernels' tuning (`None`: the context's).
    pub target: Option<Target>,
    /// Tensors a dispatch (`None`: as many as the device binds, for the tuning).
    pub per_dispatch: Option<TensorsPerDispatch>,
}

impl OptimizerStep<'_> {
    /// Records the step's dispatches into the context's scope.
    pub fn run(&self, ctx: &WgpuContext, arenas: Arenas) {
        let target = self.target.unwrap_or(ctx.kernel_target());
        let per = self
            .per_dispatch
            .unwrap_or_else(|| TensorsPerDispatch::of(ctx).for_target(target));
        let (hp, max_norm, decay, report) = (&self.hp, self.max_norm, self.decay, self.report);
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
        let table = |run: std::ops::Range<usize>,
                     entry: &mut dyn FnMut(usize) -> (u32, [u32; 3])| {
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
            let bound: [Slice; 2] = [grads.chunk(chunk).into(), (&partials).into()];
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
                    let bound: [Slice; 3] = [(&partials).into(), chunk.into(), report.into()];
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
            (params.lr, params.beta1, params.beta2, params.eps) =
                (hp.lr, hp.beta1, hp.beta2, hp.eps);
            (params.weight_decay, params.bc1, params.bc2) = (hp.weight_decay, bc1, bc2);
            let bound: [Slice; 3] = [
                grads.chunk(chunk).into(),
                weights.chunk(chunk).into(),
                (&moments.mv[chunk]).into(),
            ];
            let kernel = tensors_kernel(Pass::Adamw, MAX_K);
            ctx.dispatch(&kernel, &params, &bound, grid_1d(params.groups, 1));
        }
    }
}

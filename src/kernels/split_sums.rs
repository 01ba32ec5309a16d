//! Weight gradients summed from split partials: a kernel that splits a gradient's
//! reduction (over rows) writes `[splits, len]` partials, and one multi-tensor pass
//! (`sum_splits` in optimizer_tensors.wgsl) adds them, now or, through
//! [`SplitSums`], together with the rest of the backward pass's at its end; or the
//! optimizer adds them as it reads them ([`SplitSums::for_optimizer`]).

use super::optimizer::{sum_splits_together, SplitSum, TensorsPerDispatch};
use super::target::Target;
use crate::gpu::{PooledBuffer, WgpuContext};

/// Weight gradients of several `matmul_backward`s whose split partials are still to
/// be added: each gradient's sum costs a dispatch of its own where they are added
/// as they come, while here they go out together, as many a dispatch as the device
/// binds ([`TensorsPerDispatch::sums`]: all of a tiny model's in one natively).
/// A steady step holds the same partials in the same order every step, so its
/// bind groups come back.
///
/// The gradients it returns hold their values only after [`SplitSums::finish`]:
/// nothing may read them before, and they must live until then (a gradient let go
/// would go back to the pool, and the sum would land in whatever took it).
/// Partials are held up to [`SplitSums::MAX_BYTES`]; past it a gradient is summed at
/// once as before.
///
/// [`SplitSums::for_optimizer`] adds none of those with up to
/// [`SplitSums::OPTIMIZER_SPLITS`] partials: such a gradient comes back as its
/// partials, which the optimizer's passes add as they read them
/// ([`crate::kernels::StepTensor::splits`], [`SplitSums::splits_of`]). That saves the
/// sums' dispatches (three a tiny step where WebGPU binds 16 buffers a stage) and
/// their buffers.
pub struct SplitSums {
    pending: Vec<(PooledBuffer, wgpu::Buffer, usize, usize)>,
    /// For the optimizer: the partials handed out as gradients, and their splits.
    left: Option<Vec<(wgpu::Buffer, usize)>>,
    bytes: u64,
}

impl Default for SplitSums {
    fn default() -> Self {
        SplitSums::new()
    }
}

impl SplitSums {
    /// Bytes of partials held at once, at most: all of tiny's (about 3 MiB) wait;
    /// of small's (about 100 MiB) the first few, and none of shakespeare's (tens of
    /// MiB a gradient), which are summed as they come, holding no more memory than
    /// before.
    pub const MAX_BYTES: u64 = 16 << 20;

    /// Most partials a gradient left to the optimizer may have: past it the sum is
    /// made here as before. Both optimizer passes read every partial, each thread a
    /// few elements' worth in turn, where the sum's pass reads them once with a
    /// thread an element: on the H200 tiny's 8 splits cost nothing measurable, and
    /// small's 32 cost more than the sums' pass saved (BENCHMARKS.md, round fifteen).
    pub const OPTIMIZER_SPLITS: usize = 8;

    pub fn new() -> Self {
        SplitSums {
            pending: Vec::new(),
            left: None,
            bytes: 0,
        }
    }

    /// Gradients whose partials are left to the optimizer (see [`SplitSums`]): only
    /// for gradients that nothing reads before [`crate::kernels::adamw_step`] (or a
    /// kernel that adds partials itself, as the embedding backward does the head's).
    pub fn for_optimizer() -> Self {
        SplitSums {
            pending: Vec::new(),
            left: Some(Vec::new()),
            bytes: 0,
        }
    }

    /// How many partials `grad` holds (`[splits, len]`, to be added); 1 for a
    /// gradient that holds its value. Asked of the gradients this handed out, while
    /// they live (a buffer let go may come back from the pool as anything).
    pub fn splits_of(&self, grad: &wgpu::Buffer) -> usize {
        self.left
            .iter()
            .flatten()
            .find(|(buffer, _)| buffer == grad)
            .map_or(1, |&(_, splits)| splits)
    }

    /// Sums of partials waiting.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// `dweight` and `dbias`: their sums waiting here when `sums` is given and they
    /// fit under its cap, else added now.
    pub(crate) fn defer_or_finish(
        sums: Option<&mut SplitSums>,
        ctx: &WgpuContext,
        dweight: Partials,
        dbias: Option<Partials>,
    ) -> (PooledBuffer, Option<PooledBuffer>) {
        let Some(sums) = sums else {
            return finish_grads(ctx, dweight, dbias);
        };
        let (dweight, dbias) = if sums.takes(&dweight, dbias.as_ref()) {
            let dweight = sums.defer(dweight, ctx);
            (dweight, dbias.map(|b| sums.defer(b, ctx)))
        } else {
            let (dweight, dbias) = finish_grads(ctx, dweight, dbias);
            ((dweight, 1), dbias.map(|b| (b, 1)))
        };
        sums.handed_out(&dweight.0, dweight.1);
        if let Some((b, splits)) = &dbias {
            sums.handed_out(b, *splits);
        }
        (dweight.0, dbias.map(|(b, _)| b))
    }

    /// Notes what `grad` holds for [`SplitSums::splits_of`]. A buffer can come back
    /// from the pool as a later gradient: what was noted of it before goes.
    fn handed_out(&mut self, grad: &wgpu::Buffer, splits: usize) {
        if let Some(left) = &mut self.left {
            left.retain(|(buffer, _)| buffer != grad);
            if splits > 1 {
                left.push((grad.clone(), splits));
            }
        }
    }

    /// Whether the partials of `dweight` and `dbias` fit under the cap.
    fn takes(&self, dweight: &Partials, dbias: Option<&Partials>) -> bool {
        let bytes = |p: &Partials| match p {
            Partials::Done(_) => 0,
            Partials::Pending { part, .. } => part.len() as u64,
        };
        self.bytes + bytes(dweight) + dbias.map_or(0, bytes) <= Self::MAX_BYTES
    }

    /// `p`'s sum, waiting here when it has partials; or for the optimizer, the
    /// partials themselves.
    /// With the splits it is left as (1: it holds its value).
    fn defer(&mut self, p: Partials, ctx: &WgpuContext) -> (PooledBuffer, usize) {
        let (part, len, splits) = match p {
            Partials::Done(grad) => return (grad, 1),
            Partials::Pending { part, len, splits } => (part, len, splits),
        };
        self.bytes += part.len() as u64;
        if self.left.is_some() && splits <= Self::OPTIMIZER_SPLITS {
            return (part, splits);
        }
        let out = ctx.create_pooled(len * 4);
        self.pending.push((part, (*out).clone(), len, splits));
        (out, 1)
    }

    /// Adds every waiting sum into its gradient, and lets the partials go.
    pub fn finish(&mut self, ctx: &WgpuContext) {
        if self.pending.is_empty() {
            return;
        }
        let per = TensorsPerDispatch::of(ctx).for_target(Target::of(ctx));
        let sums: Vec<SplitSum> = self
            .pending
            .iter()
            .map(|(part, out, len, splits)| SplitSum {
                part,
                out,
                len: *len,
                splits: *splits,
            })
            .collect();
        sum_splits_together(ctx, per, &sums);
        drop(sums);
        self.pending.clear();
        self.bytes = 0;
    }
}

impl Drop for SplitSums {
    /// Sums still waiting here would never reach their gradients: a bug of the
    /// caller's (a panic unwinding through the backward pass aside).
    fn drop(&mut self) {
        if !std::thread::panicking() {
            debug_assert!(self.pending.is_empty(), "SplitSums dropped before finish");
        }
    }
}

/// dweight's and dbias's sums now: in one dispatch where both were split.
pub(crate) fn finish_grads(
    ctx: &WgpuContext,
    dweight: Partials,
    dbias: Option<Partials>,
) -> (PooledBuffer, Option<PooledBuffer>) {
    match dbias {
        None => (dweight.finish(ctx), None),
        Some(dbias) => {
            let (dweight, dbias) = dweight.finish_pair(dbias, ctx);
            (dweight, Some(dbias))
        }
    }
}

/// A gradient as a kernel left it: whole, or as split partials still to add (by
/// [`Partials::finish`], or paired with another's in one dispatch by
/// [`Partials::finish_pair`]). The sum's buffer is drawn only when it is made.
pub(crate) enum Partials {
    Done(PooledBuffer),
    /// `part`: `[splits, len]`.
    Pending {
        part: PooledBuffer,
        len: usize,
        splits: usize,
    },
}

impl Partials {
    /// What a kernel writing `len` floats split `splits` ways writes into.
    pub fn new(ctx: &WgpuContext, len: usize, splits: usize) -> Self {
        match splits {
            1 => Partials::Done(ctx.create_pooled(len * 4)),
            _ => Partials::Pending {
                part: ctx.create_pooled(splits * len * 4),
                len,
                splits,
            },
        }
    }

    /// The buffer the kernel writes.
    pub fn target(&self) -> &PooledBuffer {
        match self {
            Partials::Done(grad) => grad,
            Partials::Pending { part, .. } => part,
        }
    }

    pub fn finish(self, ctx: &WgpuContext) -> PooledBuffer {
        match self {
            Partials::Done(grad) => grad,
            Partials::Pending { part, len, splits } => {
                let out = ctx.create_pooled(len * 4);
                sum_splits(ctx, &part, &out, len, splits);
                out
            }
        }
    }

    /// Both sums in one dispatch when both are pending (a weight gradient and its
    /// bias's: one dispatch fewer a layer with a bias).
    pub fn finish_pair(self, other: Partials, ctx: &WgpuContext) -> (PooledBuffer, PooledBuffer) {
        match (self, other) {
            (
                Partials::Pending { part, len, splits },
                Partials::Pending {
                    part: part_b,
                    len: len_b,
                    splits: splits_b,
                },
            ) => {
                let (out, out_b) = (ctx.create_pooled(len * 4), ctx.create_pooled(len_b * 4));
                let sums = [
                    SplitSum {
                        part: &part,
                        out: &out,
                        len,
                        splits,
                    },
                    SplitSum {
                        part: &part_b,
                        out: &out_b,
                        len: len_b,
                        splits: splits_b,
                    },
                ];
                sum_splits_together(ctx, TensorsPerDispatch::of(ctx), &sums);
                (out, out_b)
            }
            (a, b) => (a.finish(ctx), b.finish(ctx)),
        }
    }
}

/// `out[i] = sum_s part[s * len + i]` (the multi-tensor kernel with one tensor).
pub(crate) fn sum_splits(
    ctx: &WgpuContext,
    part: &PooledBuffer,
    out: &PooledBuffer,
    len: usize,
    splits: usize,
) {
    let sum = SplitSum {
        part,
        out,
        len,
        splits,
    };
    sum_splits_together(ctx, TensorsPerDispatch::of(ctx), &[sum]);
}

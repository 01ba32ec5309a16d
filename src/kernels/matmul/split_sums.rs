//! Weight gradients summed from split partials: a kernel that splits a gradient's
//! reduction (over rows) writes `[splits, len]` partials, and one multi-tensor pass
//! (`sum_splits` in multi_tensor.wgsl) adds them, now or, through
//! [`SplitSums`], together with the rest of the backward pass's at its end; or the
//! optimizer adds them as it reads them ([`SplitSums::for_optimizer`]).
//!
//! A gradient may have a destination ([`GradDest`]: its slot in the trainer's
//! [`crate::kernels::GradArena`]): a kernel then writes it there, as its value or as
//! partials where the slot has room for them, and sums go there.

use std::num::NonZeroU64;

use crate::gpu::{PooledBuffer, Slice, WgpuContext};
use crate::kernels::arenas::GradDest;
use crate::kernels::multi_tensor::{sum_splits_together, SplitSum, TensorsPerDispatch};

/// A weight gradient as a launcher leaves it.
#[derive(Debug)]
pub enum WeightGrad {
    /// In a buffer of its own: its value, or for [`SplitSums::for_optimizer`] maybe
    /// partials ([`SplitSums::splits_of`]).
    Buffer(PooledBuffer),
    /// In its [`GradDest`]: `splits` partials there (1: its value). Its sum, when
    /// deferred, lands there at [`SplitSums::finish`].
    InDest { splits: usize },
}

impl WeightGrad {
    /// The buffer of a gradient made without a destination.
    pub fn into_buffer(self) -> PooledBuffer {
        match self {
            WeightGrad::Buffer(b) => b,
            WeightGrad::InDest { .. } => panic!("a gradient with a destination has no buffer"),
        }
    }

    /// Partials it was left as (1: its value); for one in a buffer, 1.
    pub fn splits(&self) -> usize {
        match self {
            WeightGrad::Buffer(_) => 1,
            WeightGrad::InDest { splits } => *splits,
        }
    }
}

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
/// once.
///
/// [`SplitSums::for_optimizer`] adds none of those with up to
/// [`SplitSums::OPTIMIZER_SPLITS`] partials: such a gradient comes back as its
/// partials ([`SplitSums::splits_of`]), for a kernel that adds them as it reads
/// them (the embedding's backward the head's). That saves the sums' dispatches and
/// their buffers. A gradient with a destination ([`GradDest`]) is left there as its
/// partials where the destination has room for them (the optimizer adds those:
/// [`crate::kernels::GradArena`]); else its sum goes there.
pub struct SplitSums {
    pending: Vec<PendingSum>,
    /// For the optimizer: the partials handed out as gradients, and their splits.
    /// A gradient is its buffer and offset: planned ranges share an arena.
    left: Option<Vec<((wgpu::Buffer, u64), usize)>>,
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
    /// made here. Both optimizer passes read every partial, each thread a
    /// few elements' worth in turn, where the sum's pass reads them once with a
    /// thread an element: on the H200 tiny's 8 splits cost nothing measurable, and
    /// small's 32 cost more than the sums' pass saved (BENCHMARKS.md: split weight gradients read by
    /// the optimizer).
    pub const OPTIMIZER_SPLITS: usize = 8;

    pub fn new() -> Self {
        SplitSums {
            pending: Vec::new(),
            left: None,
            bytes: 0,
        }
    }

    /// Gradients whose partials are left to the optimizer (see [`SplitSums`]): only
    /// for gradients that nothing reads before [`crate::kernels::OptimizerStep`] (or a
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
    pub fn splits_of<'g>(&self, grad: impl Into<Slice<'g>>) -> usize {
        let grad: Slice = grad.into();
        self.left
            .iter()
            .flatten()
            .find(|((buffer, at), _)| buffer == grad.buffer() && *at == grad.offset())
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
    ) -> (WeightGrad, Option<WeightGrad>) {
        let Some(sums) = sums else {
            return finish_grads(ctx, dweight, dbias);
        };
        let (dweight, dbias) = if sums.takes(&dweight, dbias.as_ref()) {
            let dweight = sums.defer(dweight, ctx);
            (dweight, dbias.map(|b| sums.defer(b, ctx)))
        } else {
            let (dweight, dbias) = finish_grads(ctx, dweight, dbias);
            let with_one = |g: WeightGrad| (g, 1);
            (with_one(dweight), dbias.map(with_one))
        };
        for (grad, splits) in [Some(&dweight), dbias.as_ref()].into_iter().flatten() {
            if let WeightGrad::Buffer(buffer) = grad {
                sums.handed_out(buffer.slice(), *splits);
            }
        }
        (dweight.0, dbias.map(|(b, _)| b))
    }

    /// Notes what `grad` holds for [`SplitSums::splits_of`]. A buffer can come back
    /// from the pool as a later gradient: what was noted of it before goes.
    fn handed_out(&mut self, grad: Slice, splits: usize) {
        if let Some(left) = &mut self.left {
            let key = (grad.buffer(), grad.offset());
            left.retain(|((buffer, at), _)| (buffer, *at) != key);
            if splits > 1 {
                left.push(((grad.buffer().clone(), grad.offset()), splits));
            }
        }
    }

    /// Whether the partials of `dweight` and `dbias` fit under the cap.
    fn takes(&self, dweight: &Partials, dbias: Option<&Partials>) -> bool {
        let bytes = |p: &Partials| match p {
            Partials::Done(_) | Partials::InDest { .. } => 0,
            Partials::Pending { part, .. } | Partials::PendingInto { part, .. } => {
                part.len() as u64
            }
        };
        self.bytes + bytes(dweight) + dbias.map_or(0, bytes) <= Self::MAX_BYTES
    }

    /// `p`'s sum, waiting here when it has partials; or for the optimizer, the
    /// partials themselves.
    /// With the splits it is left as (1: it holds its value).
    fn defer(&mut self, p: Partials, ctx: &WgpuContext) -> (WeightGrad, usize) {
        let leaves = |splits: usize| self.left.is_some() && splits <= Self::OPTIMIZER_SPLITS;
        match p {
            Partials::Pending { part, splits, .. } if leaves(splits) => {
                self.bytes += part.len() as u64;
                (WeightGrad::Buffer(part), splits)
            }
            p => {
                let (grad, sum) = p.sum(ctx);
                let splits = grad.splits();
                if let Some(sum) = sum {
                    self.bytes += sum.part.len() as u64;
                    self.pending.push(sum);
                }
                (grad, splits)
            }
        }
    }

    /// Adds every waiting sum into its gradient, and lets the partials go.
    pub fn finish(&mut self, ctx: &WgpuContext) {
        if self.pending.is_empty() {
            return;
        }
        let per = TensorsPerDispatch::of(ctx).for_target(ctx.kernel_target());
        let sums: Vec<SplitSum> = self.pending.iter().map(PendingSum::as_split_sum).collect();
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
) -> (WeightGrad, Option<WeightGrad>) {
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
pub(crate) enum Partials<'d> {
    Done(PooledBuffer),
    /// `part`: `[splits, len]`.
    Pending {
        part: PooledBuffer,
        len: usize,
        splits: usize,
    },
    /// Written into its destination: `splits` partials there (1: its value).
    InDest {
        dest: GradDest<'d>,
        splits: usize,
    },
    /// Partials in a buffer of their own, to be added into `dest`, which has no room
    /// for them.
    PendingInto {
        part: PooledBuffer,
        splits: usize,
        dest: GradDest<'d>,
    },
}

impl<'d> Partials<'d> {
    /// What a kernel writing `len` floats split `splits` ways writes into: `dest`
    /// where given and it has room for that many partials.
    pub(super) fn new(
        ctx: &WgpuContext,
        len: usize,
        splits: usize,
        dest: Option<GradDest<'d>>,
    ) -> Self {
        match (dest, splits) {
            (Some(dest), _) => {
                assert_eq!(dest.len, len, "a destination of another tensor's length");
                if splits <= dest.room {
                    Partials::InDest { dest, splits }
                } else {
                    Partials::PendingInto {
                        part: ctx.create_pooled(splits * len * 4),
                        splits,
                        dest,
                    }
                }
            }
            (None, 1) => Partials::Done(ctx.create_pooled(len * 4)),
            (None, _) => Partials::Pending {
                part: ctx.create_pooled(splits * len * 4),
                len,
                splits,
            },
        }
    }

    /// The range the kernel writes.
    pub fn target(&self) -> Slice<'_> {
        match self {
            Partials::Done(grad) => grad.into(),
            Partials::Pending { part, .. } | Partials::PendingInto { part, .. } => part.into(),
            Partials::InDest { dest, splits } => dest.first(*splits),
        }
    }

    /// The sum made where it has nowhere to wait: in a new buffer, or in the
    /// destination that had no room for the partials. Partials in a destination
    /// with room for them stay (the optimizer adds them).
    pub fn finish(self, ctx: &WgpuContext) -> WeightGrad {
        match self.sum(ctx) {
            (grad, None) => grad,
            (grad, Some(sum)) => {
                sum_splits_together(ctx, TensorsPerDispatch::of(ctx), &[sum.as_split_sum()]);
                grad
            }
        }
    }

    /// Both sums in one dispatch when both are pending (a weight gradient and its
    /// bias's: one dispatch fewer a layer with a bias).
    pub fn finish_pair(self, other: Partials, ctx: &WgpuContext) -> (WeightGrad, WeightGrad) {
        let (a, sum_a) = self.sum(ctx);
        let (b, sum_b) = other.sum(ctx);
        let sums: Vec<SplitSum> = [&sum_a, &sum_b]
            .into_iter()
            .flatten()
            .map(PendingSum::as_split_sum)
            .collect();
        if !sums.is_empty() {
            sum_splits_together(ctx, TensorsPerDispatch::of(ctx), &sums);
        }
        (a, b)
    }

    /// The gradient as it will be, and the sum that makes it so, if one is due.
    /// (In a new buffer for a gradient without a destination.)
    fn sum(self, ctx: &WgpuContext) -> (WeightGrad, Option<PendingSum>) {
        match self {
            Partials::Done(grad) => (WeightGrad::Buffer(grad), None),
            Partials::InDest { splits, .. } => (WeightGrad::InDest { splits }, None),
            Partials::Pending { part, len, splits } => {
                let out = ctx.create_pooled(len * 4);
                let sum = PendingSum {
                    part,
                    out: out.slice().buffer().clone(),
                    at: out.offset(),
                    len,
                    splits,
                };
                (WeightGrad::Buffer(out), Some(sum))
            }
            Partials::PendingInto { part, splits, dest } => {
                let sum = PendingSum {
                    part,
                    out: dest.range.buffer().clone(),
                    at: dest.range.offset(),
                    len: dest.len,
                    splits,
                };
                (WeightGrad::InDest { splits: 1 }, Some(sum))
            }
        }
    }
}

/// A sum still to make: `splits` partials of `len` floats, into `len` floats of
/// `out` from byte `at`.
struct PendingSum {
    part: PooledBuffer,
    out: wgpu::Buffer,
    at: u64,
    len: usize,
    splits: usize,
}

impl PendingSum {
    fn as_split_sum(&self) -> SplitSum<'_> {
        let bytes = NonZeroU64::new(self.len.max(1) as u64 * 4).expect("non-zero");
        SplitSum {
            part: (&self.part).into(),
            out: Slice::range(&self.out, self.at, bytes),
            len: self.len,
            splits: self.splits,
        }
    }
}

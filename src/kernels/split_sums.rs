//! Weight gradients summed from split partials: a kernel that splits a gradient's
//! reduction (over rows) writes `[splits, len]` partials, and one multi-tensor pass
//! (`sum_splits` in optimizer_tensors.wgsl) adds them, now or, through
//! [`SplitSums`], together with the rest of the backward pass's at its end.

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
pub struct SplitSums {
    pending: Vec<(PooledBuffer, wgpu::Buffer, usize, usize)>,
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

    pub fn new() -> Self {
        SplitSums {
            pending: Vec::new(),
            bytes: 0,
        }
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
        match sums {
            Some(sums) if sums.takes(&dweight, dbias.as_ref()) => {
                let dbias = dbias.map(|b| sums.defer(b));
                (sums.defer(dweight), dbias)
            }
            _ => finish_grads(ctx, dweight, dbias),
        }
    }

    /// Whether the partials of `dweight` and `dbias` fit under the cap.
    fn takes(&self, dweight: &Partials, dbias: Option<&Partials>) -> bool {
        let bytes = |p: &Partials| p.pending.as_ref().map_or(0, |(part, ..)| part.len() as u64);
        self.bytes + bytes(dweight) + dbias.map_or(0, bytes) <= Self::MAX_BYTES
    }

    /// `p`'s sum, waiting here when it has partials.
    fn defer(&mut self, p: Partials) -> PooledBuffer {
        if let Some((part, len, splits)) = p.pending {
            self.bytes += part.len() as u64;
            self.pending.push((part, (*p.out).clone(), len, splits));
        }
        p.out
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

/// A gradient recorded up to its split partials: `out`, and where the rows were
/// split, the partials still to add into it (by [`Partials::finish`], or paired with
/// another's in one dispatch by [`Partials::finish_pair`]).
pub(crate) struct Partials {
    pub out: PooledBuffer,
    /// (partials `[splits, len]`, len, splits)
    pub pending: Option<(PooledBuffer, usize, usize)>,
}

impl Partials {
    pub fn finish(self, ctx: &WgpuContext) -> PooledBuffer {
        if let Some((part, len, splits)) = &self.pending {
            sum_splits(ctx, part, &self.out, *len, *splits);
        }
        self.out
    }

    /// Both sums in one dispatch when both are pending (a weight gradient and its
    /// bias's: one dispatch fewer a layer with a bias).
    pub fn finish_pair(self, other: Partials, ctx: &WgpuContext) -> (PooledBuffer, PooledBuffer) {
        match (&self.pending, &other.pending) {
            (Some((part, len, splits)), Some((part_b, len_b, splits_b))) => {
                let sums = [
                    SplitSum {
                        part,
                        out: &self.out,
                        len: *len,
                        splits: *splits,
                    },
                    SplitSum {
                        part: part_b,
                        out: &other.out,
                        len: *len_b,
                        splits: *splits_b,
                    },
                ];
                sum_splits_together(ctx, TensorsPerDispatch::of(ctx), &sums);
                (self.out, other.out)
            }
            _ => (self.finish(ctx), other.finish(ctx)),
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

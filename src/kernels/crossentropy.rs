//! Softmax + cross-entropy with its gradient (fused). The mean of the losses is
//! [`super::Mean`].
//!
//! A row of at most [`CHUNK`] logits runs in one pass (crossentropy.wgsl); a wider
//! one in two (crossentropy_wide.wgsl), so that no invocation loops over more than a
//! chunk: a driver may cut a long loop short without an error (lavapipe did, and
//! vocabularies past about 21,800 characters trained wrongly).

use crate::gpu::{grid_1d, Kernel, PooledBuffer, Slice, WgpuContext};
pub use crate::reference::CrossEntropyShape;
use crate::tuning::Target;

pub(super) const SOURCE: &str = with_prelude!("crossentropy.wgsl");
const WIDE_SOURCE: &str = with_prelude!("crossentropy_wide.wgsl");

/// Columns of a row one invocation covers (`CHUNK` in crossentropy_wide.wgsl).
pub const CHUNK: usize = 1024;

const FORWARD: Kernel = Kernel {
    name: "crossentropy_forward",
    source: SOURCE,
    entry: "forward",
    unchecked: false,
};
const FORWARD_ROWS: Kernel = Kernel {
    name: "crossentropy_forward_rows",
    source: SOURCE,
    entry: "forward_rows",
    unchecked: false,
};
const CHUNK_STATS: Kernel = Kernel {
    name: "crossentropy_chunk_stats",
    source: WIDE_SOURCE,
    entry: "chunk_stats",
    unchecked: false,
};
const CHUNK_STATS_ROWS: Kernel = Kernel {
    name: "crossentropy_chunk_stats_rows",
    source: WIDE_SOURCE,
    entry: "chunk_stats_rows",
    unchecked: false,
};
const FINISH: Kernel = Kernel {
    name: "crossentropy_finish",
    source: WIDE_SOURCE,
    entry: "finish",
    unchecked: false,
};
const FINISH_ROWS: Kernel = Kernel {
    name: "crossentropy_finish_rows",
    source: WIDE_SOURCE,
    entry: "finish_rows",
    unchecked: false,
};

/// Workgroup size of every entry point (`WG` in crossentropy.wgsl).
const WG: u32 = 128;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    v: u32,
    scale: f32,
    /// Chunks a row has (the wide passes; unused by the one-pass kernels).
    chunks: u32,
}

/// Softmax cross-entropy of each row of `v` logits against its target, with its
/// gradient in the same pass: one workgroup a row (GPUs) or one thread a row (CPU
/// adapters), a row wider than [`CHUNK`] split into chunks.
#[derive(Clone, Copy, Debug, Default)]
pub struct CrossEntropy {
    /// The kernels' tuning (`None`: the context's).
    pub target: Option<Target>,
}

impl CrossEntropy {
    /// Losses (`rows`) and `dlogits = (softmax - onehot(targets)) * dloss` (`rows*v`)
    /// of `logits` (`rows*v`) against `targets` (`rows` u32): the gradient of
    /// `dloss * sum(losses)` (`dloss = 1/rows` for the mean loss), so the gradient
    /// needs no kernel of its own.
    pub fn forward<'a>(
        &self,
        ctx: &WgpuContext,
        logits: &PooledBuffer,
        targets: impl Into<Slice<'a>>,
        shape: CrossEntropyShape,
        dloss: f32,
    ) -> (PooledBuffer, PooledBuffer) {
        let CrossEntropyShape { rows, v } = shape;
        let losses = ctx.create_pooled(rows * 4);
        let dlogits = ctx.create_pooled(rows * v * 4);
        let chunks = v.div_ceil(CHUNK);
        let params = Params {
            rows: rows as u32,
            v: v as u32,
            scale: dloss,
            chunks: chunks as u32,
        };
        let target = self.target.unwrap_or(ctx.kernel_target());
        let targets = targets.into();
        if chunks <= 1 {
            let (kernel, grid) = match target {
                Target::Gpu => (&FORWARD, grid_1d(rows as u32, 1)),
                Target::Cpu => (&FORWARD_ROWS, grid_1d(rows as u32, WG)),
            };
            let bound = [logits.into(), targets, (&losses).into(), (&dlogits).into()];
            ctx.dispatch_slices(kernel, &params, &bound, grid);
            return (losses, dlogits);
        }
        let partials = ctx.create_pooled(Self::scratch_floats(rows as u64, v as u64) as usize * 4);
        let pairs = (rows * chunks) as u32;
        let (stats, finish, grid) = match target {
            Target::Gpu => (&CHUNK_STATS, &FINISH, grid_1d(pairs, 1)),
            Target::Cpu => (&CHUNK_STATS_ROWS, &FINISH_ROWS, grid_1d(pairs, WG)),
        };
        ctx.dispatch_slices(stats, &params, &[logits.into(), (&partials).into()], grid);
        let bound = [
            logits.into(),
            (&partials).into(),
            targets,
            (&losses).into(),
            (&dlogits).into(),
        ];
        ctx.dispatch_slices(finish, &params, &bound, grid);
        (losses, dlogits)
    }

    /// Floats of scratch a forward of `rows` x `v` logits takes from the pool (the
    /// chunks' maxima and sums; 0 when a row is one chunk).
    pub fn scratch_floats(rows: u64, v: u64) -> u64 {
        match v.div_ceil(CHUNK as u64) {
            0 | 1 => 0,
            chunks => rows.saturating_mul(chunks).saturating_mul(2),
        }
    }

    /// Workgroups a forward of `rows` x `v` logits launches in one dispatch (spread
    /// over x and y by [`grid_1d`]).
    pub fn workgroups(target: Target, rows: u64, v: u64) -> u64 {
        let chunks = v.div_ceil(CHUNK as u64).max(1);
        let threads_a_group = match target {
            Target::Gpu => 1,
            Target::Cpu => u64::from(WG),
        };
        rows.saturating_mul(chunks).div_ceil(threads_a_group)
    }
}

/// Every kernel of this op.
pub(super) fn catalog() -> Vec<Kernel> {
    vec![
        FORWARD,
        FORWARD_ROWS,
        CHUNK_STATS,
        CHUNK_STATS_ROWS,
        FINISH,
        FINISH_ROWS,
    ]
}

//! Softmax + cross-entropy with its gradient (fused). The mean of the losses is
//! [`super::Mean`].

use crate::gpu::{grid_1d, Kernel, PooledBuffer, Slice, WgpuContext};
pub use crate::reference::CrossEntropyShape;
use crate::tuning::Target;

pub(super) const SOURCE: &str = with_prelude!("crossentropy.wgsl");

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

/// Workgroup size of every entry point (`WG` in crossentropy.wgsl).
const WG: u32 = 128;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    v: u32,
    scale: f32,
    _pad: u32,
}

/// Softmax cross-entropy of each row of `v` logits against its target, with its
/// gradient in the same pass: one workgroup a row (GPUs) or one thread a row (CPU
/// adapters).
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
        let params = Params {
            rows: rows as u32,
            v: v as u32,
            scale: dloss,
            _pad: 0,
        };
        let (kernel, grid) = match self.target.unwrap_or(ctx.kernel_target()) {
            Target::Gpu => (&FORWARD, grid_1d(rows as u32, 1)),
            Target::Cpu => (&FORWARD_ROWS, grid_1d(rows as u32, WG)),
        };
        ctx.dispatch_slices(
            kernel,
            &params,
            &[
                logits.into(),
                targets.into(),
                (&losses).into(),
                (&dlogits).into(),
            ],
            grid,
        );
        (losses, dlogits)
    }
}

/// Every kernel of this op.
pub(super) fn catalog() -> Vec<Kernel> {
    vec![FORWARD, FORWARD_ROWS]
}

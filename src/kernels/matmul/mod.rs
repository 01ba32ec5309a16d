//! Matrix products of a `Linear` layer, forward and backward, as GEMMs in one of
//! several variants ([`MatmulVariant`]).
//!
//! - `variant`: which variant computes a product and what it needs (tiles, grid,
//!   splits of the reduction, workgroup memory), also for the planner.
//! - `choice`: the f32 variant of each class of shapes on GPUs, a table
//!   ([`GPU_CHOICE`]) that measurements fill.
//! - `source`: the WGSL of each variant's kernels: a core after one prelude per
//!   operand layout ([`Layout`]: `matmul_nt` / `_nn` / `_tn.wgsl`), specialised to
//!   a launch's fusions. The cores come from three templates: `matmul_tiled.wgsl`
//!   (`Tiled`, `F16`, `Narrow`), `matmul_coop.wgsl` (`Coop`, `Coop2`),
//!   `matmul_coop3.wgsl` (`Coop3`) and `matmul_cpu.wgsl` (`Cpu16`, `Cpu32`).
//! - `launch`: the dispatches, and for split reductions the fixed-order sums
//!   (`matmul_reduce.wgsl`).
//! - `split_sums`: weight gradients whose split partials are added later,
//!   together ([`SplitSums`]), or by the optimizer.
//!
//! The op is [`Matmul`]: a launch description (variant, fusions) with one entry
//! point a product, each taking the layer's operands ([`Linear`]) and its shape
//! ([`MatmulShape`]).

mod choice;
mod launch;
mod operands;
mod source;
mod split_sums;
mod variant;

use launch::WeightDests;
use split_sums::finish_grads;

pub use choice::{ShapeClass, GPU_CHOICE};
pub use operands::{Fusion, Layout, Linear};
pub use source::GRAD_SCALE;
pub use split_sums::{SplitSums, WeightGrad};
pub use variant::{coop2_supported, coop3_supported, coop_supported, is_f16_16x16, MatmulVariant};

use crate::config::Precision;
use crate::gpu::{Kernel, PooledBuffer, WgpuContext};
use crate::kernels::arenas::GradDest;
pub use crate::reference::MatmulShape;
use crate::tuning::Target;

/// A `Linear` layer's products on the GPU: `out = resid + dropout(act(inp) ·
/// weightᵀ + bias)` and its gradients. The weight gradients reduce over all rows in
/// parallel splits whose partial sums are then added in a fixed order: no atomics,
/// the same bits every run.
#[derive(Clone, Copy, Debug, Default)]
pub struct Matmul<'a> {
    /// The variant of every product (`None`: [`MatmulVariant::choose`] for each
    /// product's shape on the context).
    pub variant: Option<MatmulVariant>,
    pub fusion: Fusion<'a>,
}

impl Matmul<'_> {
    fn variant(&self, ctx: &WgpuContext, layout: Layout, shape: MatmulShape) -> MatmulVariant {
        self.variant.unwrap_or_else(|| {
            let (m, n, k) = layout.gemm(shape);
            MatmulVariant::choose(ctx, layout, m, n, k)
        })
    }

    /// `out` `[rows, n]`.
    pub fn forward(&self, ctx: &WgpuContext, x: Linear, shape: MatmulShape) -> PooledBuffer {
        assert_not_empty(shape, "matmul forward");
        let variant = self.variant(ctx, Layout::Forward, shape);
        launch::forward(ctx, variant, x, shape, &self.fusion)
    }

    /// The gradients from `dout` `[rows, n]`: `dinp` `[rows, k]`, `dweight` `[n,
    /// k]` and, where `x` has a bias, `dbias` `[n]`.
    pub fn backward(
        &self,
        ctx: &WgpuContext,
        dout: &PooledBuffer,
        x: Linear,
        shape: MatmulShape,
    ) -> (PooledBuffer, PooledBuffer, Option<PooledBuffer>) {
        self.backward_deferred(ctx, dout, x, shape, None)
    }

    /// [`Matmul::backward`] with its weight gradients' split partials left in
    /// `sums` (when given and under its cap), to be added by [`SplitSums::finish`]
    /// together with the other layers'.
    pub fn backward_deferred(
        &self,
        ctx: &WgpuContext,
        dout: &PooledBuffer,
        x: Linear,
        shape: MatmulShape,
        sums: Option<&mut SplitSums>,
    ) -> (PooledBuffer, PooledBuffer, Option<PooledBuffer>) {
        let dests = WeightDests {
            dweight: None,
            bias: x.bias.map(|_| None),
        };
        let (dinp, dweight, dbias) = self.backward_to(ctx, dout, x, shape, dests, sums);
        (
            dinp,
            dweight.into_buffer(),
            dbias.map(WeightGrad::into_buffer),
        )
    }

    /// [`Matmul::backward_deferred`] with the weight gradient written into
    /// `dweight` and the bias gradient into `dbias` (slots of the trainer's
    /// [`crate::kernels::GradArena`]); `x` has a bias.
    pub(crate) fn backward_into<'d>(
        &self,
        ctx: &WgpuContext,
        dout: &PooledBuffer,
        x: Linear,
        shape: MatmulShape,
        [dweight, dbias]: [GradDest<'d>; 2],
        sums: &mut SplitSums,
    ) -> (PooledBuffer, WeightGrad, Option<WeightGrad>) {
        assert!(x.bias.is_some(), "a layer with a bias");
        let dests = WeightDests {
            dweight: Some(dweight),
            bias: Some(Some(dbias)),
        };
        self.backward_to(ctx, dout, x, shape, dests, Some(sums))
    }

    fn backward_to(
        &self,
        ctx: &WgpuContext,
        dout: &PooledBuffer,
        x: Linear,
        shape: MatmulShape,
        dests: WeightDests,
        sums: Option<&mut SplitSums>,
    ) -> (PooledBuffer, WeightGrad, Option<WeightGrad>) {
        assert_not_empty(shape, "matmul backward");
        let gelu_of = self.fusion.gelu_inp.then_some(x.inp);
        let variant = self.variant(ctx, Layout::Dinp, shape);
        let dinp = launch::dinp(ctx, variant, dout, (x.weight, x.weight_f16), shape, gelu_of);
        let variant = self.variant(ctx, Layout::Dweight, shape);
        let inp = (x.inp, self.fusion.gelu_inp);
        let (dweight, dbias) = launch::weight_partials(ctx, variant, dout, inp, shape, dests);
        let (dweight, dbias) = SplitSums::defer_or_finish(sums, ctx, dweight, dbias);
        (dinp, dweight, dbias)
    }

    /// `dinp` alone: the input half of [`Matmul::backward`].
    pub fn dinp(
        &self,
        ctx: &WgpuContext,
        dout: &PooledBuffer,
        x: Linear,
        shape: MatmulShape,
    ) -> PooledBuffer {
        assert_not_empty(shape, "matmul dinp");
        let gelu_of = self.fusion.gelu_inp.then_some(x.inp);
        let variant = self.variant(ctx, Layout::Dinp, shape);
        launch::dinp(ctx, variant, dout, (x.weight, x.weight_f16), shape, gelu_of)
    }

    /// The weight gradients alone: `dweight` and, where `x` has a bias, `dbias`,
    /// both sums of partials in one dispatch where both were split.
    pub fn weight_grads(
        &self,
        ctx: &WgpuContext,
        dout: &PooledBuffer,
        x: Linear,
        shape: MatmulShape,
    ) -> (PooledBuffer, Option<PooledBuffer>) {
        assert_not_empty(shape, "matmul dweight");
        let variant = self.variant(ctx, Layout::Dweight, shape);
        let inp = (x.inp, self.fusion.gelu_inp);
        let dests = WeightDests {
            dweight: None,
            bias: x.bias.map(|_| None),
        };
        let (dweight, dbias) = launch::weight_partials(ctx, variant, dout, inp, shape, dests);
        let (dweight, dbias) = finish_grads(ctx, dweight, dbias);
        (dweight.into_buffer(), dbias.map(WeightGrad::into_buffer))
    }
}

#[track_caller]
fn assert_not_empty(shape: MatmulShape, what: &str) {
    let MatmulShape { rows, k, n } = shape;
    assert!(rows > 0 && k > 0 && n > 0, "{what} of an empty matrix");
}

/// Whether the f16 products on `ctx` read an f16 copy of the weights where a
/// [`Linear`] gives one ([`crate::gpu::ContextOptions::f16_weights`], and a core
/// that reads one: `Coop2`, the fallback): what [`crate::kernels::ParamArena`] keeps
/// one for.
pub fn reads_f16_weights(ctx: &WgpuContext) -> bool {
    if ctx.precision() != Precision::F16 || !ctx.f16_weights() {
        return false;
    }
    let tile = variant::TILE;
    source::reads_f16_weights(MatmulVariant::choose(
        ctx,
        Layout::Forward,
        tile,
        tile,
        tile,
    ))
}

/// How many partials the weight gradients of a `Linear` of `shape` are split into
/// on `ctx`: (dweight's, dbias's).
pub(crate) fn weight_grad_splits(ctx: &WgpuContext, shape: MatmulShape) -> (usize, usize) {
    let (m, n, k) = Layout::Dweight.gemm(shape);
    let variant = MatmulVariant::choose(ctx, Layout::Dweight, m, n, k);
    variant.weight_grad_splits(shape.rows, shape.k, shape.n)
}

/// What one product of a `Linear` needs of a device, as the launchers will run it
/// on adapters of `target` under `precision` (f16 on the fallback core, which
/// tiles and splits as the tensor-core ones do).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProductNeeds {
    pub variant: MatmulVariant,
    /// Workgroups along x (the output's columns), y (its rows) and z (splits).
    pub grid: [u64; 3],
    /// Floats of the split partials it writes before they are added (0: none).
    pub partial_floats: u64,
    /// Floats of the bias gradient's partials (dweight of a layer with a bias).
    pub bias_partial_floats: u64,
    pub workgroup_bytes: u64,
}

/// [`ProductNeeds`] of `layout`'s product for a `Linear` of `shape`.
pub fn needs(
    target: Target,
    precision: Precision,
    layout: Layout,
    shape: MatmulShape,
) -> ProductNeeds {
    let MatmulShape { rows, k, n } = shape;
    let (m, gn, gk) = layout.gemm(shape);
    let variant = MatmulVariant::choose_for(target, precision, layout, m, gn, gk);
    let splits = variant.split_of(layout, rows, k, n).1;
    let bias_splits = match layout {
        Layout::Dweight => variant.weight_grad_splits(rows, k, n).1,
        _ => 1,
    };
    // In u64: wasm32's usize is 32 bits.
    let partials = |splits: usize, len: u64| if splits > 1 { splits as u64 * len } else { 0 };
    ProductNeeds {
        variant,
        grid: variant.grid(m, gn, splits),
        partial_floats: partials(splits, m as u64 * gn as u64),
        bias_partial_floats: partials(bias_splits, n as u64),
        workgroup_bytes: variant.workgroup_bytes(),
    }
}

/// Every GEMM kernel as launched (see [`crate::kernels::catalog`]).
pub(super) fn catalog() -> Vec<Kernel> {
    source::catalog()
}

//! GPU kernels: every op of GPT training in WGSL, each with a launch description.
//!
//! An op is a small value saying how to launch it ([`Matmul`], [`LayerNorm`],
//! [`Attention`], [`Embedding`], [`CrossEntropy`], [`Mean`], [`OptimizerStep`]: the
//! variant or tuning, the fusions) with one entry point a pass (`forward`,
//! `backward`, ...) taking the operands and a shape value. A launch records its
//! dispatches into the context's current scope and returns its outputs as
//! `PooledBuffer`s drawn from the pool. Every kernel writes every element of its
//! output (rule 2 in [`crate::gpu`]); its CPU specification is the function of the
//! same name in [`crate::reference`], and its parity test is `tests/ops/<op>.rs`.
//!
//! Where a kernel has a variant for CPU adapters ([`Target`]), the context's choice
//! runs ([`crate::gpu::WgpuContext::kernel_target`]) unless the launch names one.
//! How the WGSL is put together and specialised is written down in
//! `src/kernels/README.md`.
//!
//! Modules import downwards only: the ops use `wgsl` (source assembly), the
//! arenas and the multi-tensor kernels; the optimizer uses those; nothing here
//! imports the model.

#[macro_use]
mod wgsl;

mod arenas;
mod attention;
mod attention_coop;
mod attention_tiled;
mod bounds;
mod crossentropy;
mod embedding;
mod gelu;
mod layernorm;
pub mod matmul;
mod multi_tensor;
mod optimizer;
mod reduce;
mod residual;

pub use crate::gpu::{source_for, MAX_SUBGROUP_WIDTH};
pub use crate::tuning::{F16Core, Target};
pub use arenas::{F16Weights, GradArena, GradDest, ParamArena};
pub use attention::{
    attention_subgroups, Attention, AttentionSaved, AttentionShape, GpuAttention, GPU_ATTENTION,
    GPU_ATTENTION_BACKWARD, SHUFFLE_ROW_THREADS,
};
pub use attention_tiled::DSUM_ROWS as ATTENTION_DSUM_ROWS;
pub use crossentropy::{CrossEntropy, CrossEntropyShape, CHUNK as CROSSENTROPY_CHUNK};
pub use embedding::{token_index, Embedding, EmbeddingShape, ExtraGrad, TokenIndex};
pub use gelu::gelu_forward;
pub use layernorm::{LayerNorm, LayerNormGrads, LayerNormSaved, LayerNormShape};
pub use matmul::{
    coop2_supported, coop3_supported, coop_supported, is_f16_16x16, Fusion, Layout, Linear, Matmul,
    MatmulShape, MatmulVariant, ShapeClass, SplitSums, WeightGrad, GPU_CHOICE, GRAD_SCALE,
};
pub use multi_tensor::{
    sum_splits_together, SplitSum, TensorsPerDispatch, MAX_TENSORS_PER_DISPATCH,
};
pub use optimizer::{scratch_floats, Arenas, Moments, OptimizerStep};
pub use reduce::{scale_in_place, sum_in_one_pass, Mean};
pub use residual::residual_forward;

use crate::gpu::Kernel;

/// The largest workgroup any kernel declares: the GEMMs', the embedding's, the
/// sums' and the optimizer's 256 threads.
pub const MAX_WORKGROUP_SIZE: u64 = 256;

/// The most storage buffers one dispatch binds: the layernorm backward's dinp pass
/// (its variant that also sums the weight gradients binds 10, and runs only where
/// the device binds that many; the multi-tensor sums take as many tensors as the
/// device binds).
pub const MAX_STORAGE_BUFFERS: u64 = 8;

/// Every kernel the launchers can dispatch, each specialization included, with the
/// source a context compiles for it without subgroups (tests compile them all and
/// compare them across changes): `compact` gives the browser's form of kernels
/// whose native form writes loops out.
#[doc(hidden)]
pub fn catalog(compact: bool) -> Vec<Kernel> {
    let mut all = Vec::new();
    all.extend(residual::catalog());
    all.extend(gelu::catalog());
    all.extend(layernorm::catalog());
    all.extend(crossentropy::catalog());
    all.extend(embedding::catalog());
    all.extend(matmul::catalog());
    all.extend(attention::catalog(compact));
    all.extend(reduce::catalog());
    all.extend(multi_tensor::catalog());
    all.extend(arenas::catalog());
    all
}

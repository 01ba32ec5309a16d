//! GPU kernels: one `.wgsl` per op, with a typed launcher each.
//!
//! A launcher takes `PooledBuffer`s and shapes, records its dispatch into the
//! context's current scope, and returns its output as a `PooledBuffer` drawn from the
//! pool. Every kernel writes every element of its output (rule 2 in [`crate::gpu`]);
//! its CPU specification is the function of the same name in [`crate::reference`].

/// A kernel's WGSL with the shared helpers of `prelude.wgsl` joined in front.
macro_rules! with_prelude {
    ($file:literal) => {
        concat!(include_str!("prelude.wgsl"), include_str!($file))
    };
}

/// An attention kernel's WGSL with the dropout mask's hash and `keep` joined in front
/// (one copy for the four kernels, GPU and CPU tunings).
macro_rules! with_dropout_mask {
    ($file:literal) => {
        concat!(
            include_str!("hash.wgsl"),
            include_str!("attention_mask.wgsl"),
            include_str!($file)
        )
    };
}

mod target;

pub use target::{force, Target};

// ---- elementwise: residual add, GELU (for the CPU-adapter matmuls) ----
// Dropout has no kernel of its own: the mask (hash.wgsl) is applied inside the
// embedding, matmul-epilogue, layernorm-backward and attention kernels.
mod gelu;
mod residual;

pub use gelu::gelu_forward;
pub use residual::residual_forward;

// ---- row reductions: layernorm, cross-entropy ----
mod crossentropy;
mod layernorm;

pub use crossentropy::{
    crossentropy_backward, crossentropy_forward, crossentropy_forward_on, mean,
};
pub use layernorm::{
    layernorm_backward, layernorm_backward_fused, layernorm_backward_fused_on,
    layernorm_backward_on, layernorm_forward, layernorm_forward_on,
};

// ---- embedding ----
mod embedding;

pub use embedding::{encoder_backward, encoder_forward, encoder_forward_dropout, token_index};

// ---- matmul ----
mod matmul;
mod matmul_coop;

pub use matmul_coop::{
    coop2_supported, coop_supported, is_f16_16x16, GRAD_SCALE, KERNELS as F16_KERNELS,
};

pub use matmul::{
    matmul_backward, matmul_backward_fused, matmul_dinp, matmul_dinp_fused_variant,
    matmul_dinp_variant, matmul_dweight, matmul_dweight_fused_variant, matmul_dweight_variant,
    matmul_forward, matmul_forward_fused, matmul_forward_fused_variant, matmul_forward_variant,
    ForwardFusion, MatmulVariant,
};

// ---- attention ----
mod attention;

pub use attention::{
    attention_backward, attention_backward_on, attention_forward, attention_forward_on,
};

// ---- optimizer: gradient norms, clipping, AdamW ----
mod optimizer;

pub use optimizer::{
    adamw_step, adamw_step_on, scale_in_place, scratch_floats, AdamW, Moments, StepTensor,
    TensorsPerDispatch, MAX_TENSORS_PER_DISPATCH,
};

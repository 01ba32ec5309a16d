//! The CPU reference of every op: plain Rust written for clarity, the specification
//! the GPU kernels must meet. Sums accumulate in f64 where order matters.
//!
//! One file an op, named as its kernel (`src/kernels/<op>.rs`) and its parity test
//! (`tests/ops/<op>.rs`); the fused ops' references are compositions of the plain
//! ones, beside them. Shapes follow llm.c: `b` batch, `t` time (context), `c`
//! channels, `v` vocab, `heads`; tensors are row-major `Vec<f32>`. Each op's shape
//! value is defined here and shared by its kernel.

mod attention;
mod crossentropy;
mod dropout;
mod embedding;
mod gelu;
mod layernorm;
mod matmul;
mod optimizer;
mod residual;

pub use attention::{attention_backward, attention_forward, AttentionShape};
pub use crossentropy::{crossentropy_backward, crossentropy_forward, CrossEntropyShape};
pub use dropout::{
    attn_dropout_index, dropout, dropout_mask_params, dropout_seed, AttnDropout, DropoutMask,
};
pub use embedding::{encoder_backward, encoder_forward, encoder_forward_dropout, EmbeddingShape};
pub use gelu::{gelu_backward, gelu_forward};
pub use layernorm::{
    layernorm_backward, layernorm_backward_residual, layernorm_forward, LayerNormShape,
    LAYERNORM_EPS,
};
pub use matmul::{
    matmul_backward, matmul_backward_act, matmul_forward, matmul_forward_act,
    residual_branch_forward, MatmulShape,
};
pub use optimizer::{adamw_update, clip_scale, grad_sumsq, mean, scale_in_place, AdamW};
pub use residual::residual_forward;

fn to_f32(x: &[f64]) -> Vec<f32> {
    x.iter().map(|&y| y as f32).collect()
}

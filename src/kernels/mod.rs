//! GPU kernels: one `.wgsl` per op, with a typed launcher each.
//!
//! A launcher takes `PooledBuffer`s and shapes, records its dispatch into the
//! context's current scope, and returns its output as a `PooledBuffer` drawn from the
//! pool. Every kernel writes every element of its output (rule 2 in [`crate::gpu`]);
//! its CPU specification is the function of the same name in [`crate::reference`].

mod residual;

pub use residual::residual_forward;

// ---- kernels-a: embedding, layernorm, gelu, cross-entropy, optimizer ----
mod crossentropy;
mod embedding;
mod gelu;
mod layernorm;
mod optimizer;

pub use crossentropy::{crossentropy_backward, crossentropy_forward, mean};
pub use embedding::{encoder_backward, encoder_forward, token_index};
pub use gelu::{gelu_backward, gelu_forward};
pub use layernorm::{layernorm_backward, layernorm_forward};
pub use optimizer::{adamw_update, global_norm_scale, grad_sumsq_into, scale_in_place, AdamW};

// ---- matmul / attention (kernels-b) ----
mod attention;
mod matmul;

pub use attention::{attention_backward, attention_forward};
pub use matmul::{matmul_backward, matmul_dinp, matmul_dweight, matmul_forward};

// ---- dropout ----
mod dropout;

pub use dropout::dropout;

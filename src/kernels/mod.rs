//! GPU kernels: one `.wgsl` per op, with a typed launcher each.
//!
//! A launcher takes `PooledBuffer`s and shapes, records its dispatch into the
//! context's current scope, and returns its output as a `PooledBuffer` drawn from the
//! pool. Every kernel writes every element of its output (rule 2 in [`crate::gpu`]);
//! its CPU specification is the function of the same name in [`crate::reference`].

mod residual;

pub use residual::residual_forward;

// ---- matmul / attention (kernels-b) ----
mod attention;
mod matmul;

pub use attention::{attention_backward, attention_forward};
pub use matmul::{matmul_backward, matmul_dinp, matmul_dweight, matmul_forward};

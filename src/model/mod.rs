//! The GPT: configuration, parameters, and the forward and backward passes.
//!
//! The architecture is written once, generic over [`Ops`]: [`GpuOps`] runs every op
//! as a kernel on pooled buffers, [`CpuOps`] runs the CPU reference. The trainer uses
//! the first; the step-parity test runs both from the same seed and compares losses
//! and gradients (llm.c's check, with our own reference standing in for PyTorch).
//!
//! GPT-2 layout: token + position embedding, `layers` pre-LN blocks (causal
//! multi-head attention, GELU MLP 4x wide, residual adds), a final layernorm, and an
//! output head tied to the token embedding.
//!
//! - [`config`](GptConfig): the shape and the parameter specs;
//! - `params`: every tensor by name ([`GptParams`]);
//! - `ops`: the [`Ops`] trait; `cpu` and `gpu`: its two backends;
//! - `dropout`: each site's mask ([`Dropout`]);
//! - `pass`: [`forward`] and [`backward`].

mod config;
mod cpu;
mod dropout;
mod gpu;
mod ops;
mod params;
mod pass;

pub use config::{GptConfig, Init, ParamSpec};
pub use cpu::{CpuBatch, CpuOps};
pub use dropout::Dropout;
pub use gpu::{grad_rooms, GpuBatch, GpuOps, HeldBatch};
pub use ops::Ops;
pub use params::{BlockParams, GptParams};
pub use pass::{backward, forward, forward_with, mean_loss, Activations, Shapes};

/// Where dropout applies: a setting of the run, defined with the others.
pub use crate::config::DropoutPlacement;

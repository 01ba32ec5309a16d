//! tidepool: watch, measure and use GPU memory reuse in ML training.
//!
//! A small GPT trains on the GPU through wgpu with one pool of reusable buffers
//! under every kernel, natively (Vulkan, Metal, DX12) and in the browser (WebGPU).
//!
//! - [`pool`]: [`BufferPool`], the size-bucketed free list (pure bookkeeping).
//! - [`gpu`]: [`WgpuContext`] and [`PooledBuffer`], and why recycling is safe.
//! - [`kernels`]: every op of GPT training in WGSL; [`reference`]: the same on the CPU.
//! - [`model`]: the GPT, written once over [`model::Ops`] for both.
//! - [`train`]: the GPU [`train::Trainer`]; [`reference_train`]: its CPU twin.
//! - [`trace`]: the allocation trace of a step; [`replay`]: what other size
//!   policies and an offline offset plan would have made of it, without the GPU.
//! - [`data`]: the char tokenizer and the built-in corpus; `web`: the wasm API.

pub mod bench;
pub mod data;
pub mod error;
pub mod gpu;
pub mod kernels;
pub mod model;
pub mod pool;
pub mod reference;
pub mod reference_train;
pub mod replay;
pub mod rng;
pub mod trace;
pub mod train;
#[cfg(target_arch = "wasm32")]
pub mod web;

pub use error::{Error, Result};
pub use gpu::{ContextCounters, ContextOptions, PooledBuffer, WgpuContext};
pub use pool::{BufferPool, BufferPoolConfig, BufferPoolStats, SizePolicy};

/// What to tell a user whose browser has no WebGPU.
pub const NO_WEBGPU: &str = "this browser has no WebGPU. Use Chrome or Edge 113+ \
(on Linux start it with --enable-unsafe-webgpu --enable-features=Vulkan), \
Safari 26+, or Firefox 141+ on Windows (elsewhere set dom.webgpu.enabled in about:config)";

/// `1536` -> `"1.5 KiB"`: sizes for messages and tables.
pub fn fmt_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

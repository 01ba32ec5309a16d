//! tidepool: watch, measure and use GPU memory reuse in ML training.
//!
//! A small GPT trains on the GPU through wgpu with one pool of reusable buffers
//! under every kernel, natively (Vulkan, Metal, DX12) and in the browser (WebGPU).
//!
//! # The public surface
//!
//! - [`pool`]: [`BufferPool`], the size-bucketed free list (pure bookkeeping).
//! - [`gpu`]: [`WgpuContext`] and [`PooledBuffer`], and why recycling is safe;
//!   [`gpu::Kernel`] for WGSL kernels of your own on pooled buffers.
//! - [`kernels`]: every op of GPT training in WGSL; [`reference`](mod@reference):
//!   the same on the CPU, the specification the kernels meet; [`tuning`]: the
//!   kernel variants a [`gpu::ContextOptions`] may force; [`arena`]: how the
//!   parameters, gradients and moments lie in their arenas.
//! - [`model`]: the GPT, written once over [`model::Ops`] for both.
//! - [`config`]: a run's settings ([`config::TrainConfig`], presets, the
//!   [`config::Overrides`] a user gives); [`plan`]: whether they fit a device.
//! - [`train`]: the GPU [`train::Trainer`], and the [`train::Schedule`] that cuts a
//!   run into calls.
//! - [`checkpoint`]: save, resume and export a run (safetensors).
//! - [`planner`]: the memory plan of a training step (the `planned` policy's
//!   ranges of arenas, greedy by size).
//! - [`trace`]: the allocation trace of a step; [`replay`]: what other size
//!   policies and an offline offset plan would have made of it, without the GPU.
//! - [`snapshot`]: PyTorch memory snapshots and tidepool's traces read into one
//!   model, the repeating step found, and the report of every policy on it.
//! - [`data`]: the char tokenizer and corpora; [`error`]: one [`Error`] whose
//!   `kind()` code can branch on.
//! - `web` (wasm32 only): the API the page's worker drives.
//!
//! Not part of it, public for the crate's own tests, CLI and benchmarks, and hidden
//! from these docs: `rng` (the seeded generator), `reference_train` (the CPU twin of
//! the trainer), `bench` (the measurements behind BENCHMARKS.md; with the features
//! `cli` or `bench`) and `files` (the CLI's file checks). They may change in any
//! release.
//!
//! # The module map
//!
//! Imports run one way, from the leaves up:
//!
//! ```text
//! error, pool, rng, reference  leaves (reference: every op on the CPU)
//! arena, tuning, planner       leaves: the arenas' layout; which kernel variants run;
//!                              a step's memory plan
//! data, config, trace          corpora; a run's settings; the trace's types
//! gpu                          device, recorder, pipelines, memory (config, pool, trace,
//!                              tuning, planner)
//! kernels, model               the ops and the GPT on the GPU (gpu, arena, reference)
//! plan                         does a config fit a device (config, kernels, model)
//! train                        trainer, steps, evaluation, sampling, schedule
//! checkpoint, reference_train  save and resume; the CPU twin (train)
//! replay, snapshot             traces replayed; PyTorch snapshots beside them (trace)
//! bench                        measurements (train)
//! web                          the wasm API (wasm32)
//! ```
//!
//! No module reaches back to one that reaches it, at the top level or inside any
//! folder: `cargo test --test architecture` reads `src/` and names each circle with
//! the line that closes it.
//!
//! # Depending on it
//!
//! The default feature `cli` builds the `tidepool` binary (clap, indicatif,
//! pollster). A library user needs none of it:
//!
//! ```toml
//! [dependencies]
//! tidepool = { version = "0.1", default-features = false }
//! ```
//!
//! The feature `bench` builds the measurements behind BENCHMARKS.md into the wasm
//! (`benchPool`, `benchStep`, `benchKernels`, `benchPolicies`, for the runners in
//! `scripts/`: `wasm-pack build ... -- --features bench`); the page's wasm has none.
//!
//! # The pool under a kernel
//!
//! Every buffer a kernel returns comes from the context's pool and goes back to it
//! when dropped; the next request of that size class reuses it instead of creating a
//! GPU buffer. (Every async call here is awaited; natively `pollster::block_on` runs
//! it, in the browser `wasm_bindgen_futures`.)
//!
//! ```
//! # // Natively (the browser build of the doctests has no pollster: an empty main).
//! # #[cfg(target_arch = "wasm32")] fn main() {}
//! # #[cfg(not(target_arch = "wasm32"))] fn main() {
//! # pollster::block_on(async {
//! use tidepool::{kernels, WgpuContext};
//!
//! let ctx = WgpuContext::new().await?;
//! let data = [-1.0f32, 0.0, 1.0, 2.0, 3.0];
//! for _ in 0..2 {
//!     let x = ctx.upload_pooled(&data);
//!     let y = kernels::residual_forward(&ctx, &x, &x, data.len());
//!     let out: Vec<f32> = ctx.download(&y, data.len()).await?;
//!     assert_eq!(out[2], 2.0); // 1 + 1
//! } // x and y go back to the pool here
//! assert!(ctx.pool_stats().hits > 0, "the second round reused the first one's buffers");
//! # Ok::<(), tidepool::Error>(())
//! # }).unwrap();
//! # }
//! ```
//!
//! # Training
//!
//! ```
//! # // Natively (the browser build of the doctests has no pollster: an empty main).
//! # #[cfg(target_arch = "wasm32")] fn main() {}
//! # #[cfg(not(target_arch = "wasm32"))] fn main() {
//! # pollster::block_on(async {
//! use tidepool::data::Corpus;
//! use tidepool::train::{TrainConfig, Trainer};
//!
//! let corpus = Corpus::from_text("abc", &"abcabcabd".repeat(50))?;
//! let config = TrainConfig { context: 8, batch: 2, ..TrainConfig::preset("tiny")? };
//! let mut trainer = Trainer::new(config, corpus).await?;
//! for _ in 0..3 {
//!     let stats = trainer.step().await?;
//!     assert!(stats.loss.is_finite());
//! }
//! println!("{}", trainer.sample("ab", 10, 0.8, 0).await?);
//! # Ok::<(), tidepool::Error>(())
//! # }).unwrap();
//! # }
//! ```
//!
//! More in `examples/`: `pool_in_wgpu.rs` (a WGSL kernel of your own on pooled
//! buffers) and `train_custom_corpus.rs` (training on your own text).

pub mod arena;
#[cfg(any(feature = "bench", all(feature = "cli", not(target_arch = "wasm32"))))]
#[doc(hidden)]
pub mod bench;
pub mod checkpoint;
pub mod config;
pub mod data;
pub mod error;
#[cfg(not(target_arch = "wasm32"))]
#[doc(hidden)]
pub mod files;
pub mod gpu;
pub mod kernels;
pub mod model;
pub mod plan;
pub mod planner;
pub mod pool;
pub mod reference;
#[doc(hidden)]
pub mod reference_train;
pub mod replay;
#[doc(hidden)]
pub mod rng;
pub mod snapshot;
pub mod trace;
pub mod train;
pub mod tuning;
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

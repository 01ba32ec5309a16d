//! Measurements behind BENCHMARKS.md, shared by the native CLI (`tidepool bench`)
//! and the wasm build (the browser and Dawn runners in `scripts/`), so every target
//! runs the same code.
//!
//! - [`pool_latency`]: what a pooled buffer costs against a fresh one.
//! - [`step_variants`]: ms a training step with the pool, without it, and with the
//!   plain uploads (`WgpuContext::upload`) instead of the staging belt.
//! - [`policies`]: memory reserved against memory requested for each size policy.
//! - [`kernel_times`]: where a step's GPU time goes, kernel by kernel.
//! - [`soak`]: what a long run holds, row by row.

mod kernels;
mod memory;
mod pool;
mod step;

pub use kernels::{kernel_times, KernelRow};
pub use memory::{host_rss_bytes, policies, policy_set, soak, PolicyRow, SoakRow};
pub use pool::{pool_latency, PoolLatencyRow};
pub use step::{at_once_variants, step_variants, submit_variants, StepRow, STEP_VARIANTS};

use crate::gpu::ContextOptions;
use crate::train::now_ms;

/// How a run bound its storage operands: `read_write` where forced
/// ([`ContextOptions::read_write_bindings`]), else `declared` (under the planned
/// policy a dispatch that reads from an arena it writes binds `read_write`; the
/// plan keeps the GEMMs' and attention's operands from doing so).
fn bindings(options: &ContextOptions) -> &'static str {
    if options.read_write_bindings {
        "read_write"
    } else {
        "declared"
    }
}

/// Median and 99th percentile of `samples`.
fn median_p99(samples: &mut [f64]) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

/// Times `op` in batches and returns ns a call for each batch. A batch grows (from
/// 16, doubling) until it takes at least 2 ms, because browsers round
/// `performance.now()` to 0.1 ms; `max_per_batch` bounds it.
fn time_batches(batches: usize, max_per_batch: usize, mut op: impl FnMut()) -> Vec<f64> {
    let mut per_batch = 16.min(max_per_batch).max(1);
    loop {
        let start = now_ms();
        for _ in 0..per_batch {
            op();
        }
        if now_ms() - start >= 2.0 || per_batch >= max_per_batch {
            break;
        }
        per_batch = (per_batch * 2).min(max_per_batch);
    }
    (0..batches)
        .map(|_| {
            let start = now_ms();
            for _ in 0..per_batch {
                op();
            }
            (now_ms() - start) * 1e6 / per_batch as f64
        })
        .collect()
}

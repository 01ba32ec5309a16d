//! [`BufferPoolConfig`]: the limits on what a pool keeps, and how far it fits a
//! request into a larger free buffer.

use super::policy::{SizePolicy, MAX_SUBDIVISIONS, SIZE_ALIGNMENT};

/// Limits on what the pool keeps. A release that would break one is rejected and
/// the caller destroys the buffer.
///
/// The defaults are sized for training, not for a benchmark loop of a few buffers: one
/// training step of the `shakespeare` preset holds about a hundred activations and
/// gradients alive at once, several dozen of them in the same bucket, and every one
/// of them must come back to the pool for the next step to create nothing. Caps of
/// 8 a bucket, 64 in all, 64 MiB would reject most of them.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct BufferPoolConfig {
    /// Free buffers kept per size class. Default 256.
    pub max_buffers_per_bucket: usize,
    /// Free buffers kept in all. Default 2048.
    pub max_total_buffers: usize,
    /// Largest size class pooled, in bytes; larger requests always miss and larger
    /// releases are rejected. Default 1 GiB (WebGPU's usual largest storage binding).
    pub max_buffer_size: usize,
    /// Byte budget for the free buffers the pool holds. Default 8 GiB: the
    /// shakespeare preset's whole working set at batch 64 is about 4.5 GiB held.
    /// (u64: GPU memory is not bounded by wasm32's address space.)
    pub max_bytes: u64,
    /// How requests are rounded to size classes. Default: powers of two.
    pub policy: SizePolicy,
    /// Free buffers not reused for this many ticks (the context ticks once a submit)
    /// are destroyed by [`BufferPool::evict_idle`](super::BufferPool::evict_idle).
    /// `None`: never by age. Default `None`.
    pub max_idle_ticks: Option<u64>,
    /// How much larger than its own class a free buffer may be and still serve a
    /// request whose class is empty ([`BufferPool::take`](super::BufferPool::take)):
    /// the smallest non-empty class up to `fit_ratio` times its own is used before a
    /// buffer is created (for classes of at least [`FIT_MIN_BYTES`]). 1: only its own
    /// class (what [`BufferPool::acquire`](super::BufferPool::acquire) always does).
    /// Default [`DEFAULT_FIT_RATIO`].
    pub fit_ratio: u32,
}

/// Default [`BufferPoolConfig::fit_ratio`], chosen on the replays of traced steps
/// of several shapes (`tidepool trace replay`, which compares fit 2, 4 and 8; the
/// tables are in BENCHMARKS.md). Why fit at all: a training step frees buffers
/// whose classes the rest of the step never asks for again (activations of one
/// shape die in the backward, which asks for gradients of others) while it creates
/// new ones beside them, so with exact-class reuse a large part of what the pool
/// holds at its peak sits idle. Why 2: with the GELU output and the residual
/// branches' temporaries fused away, a larger ratio mostly lets a request pin a
/// buffer several times its size that a later, larger request then creates again;
/// 2 held the least on the `tiny` and `small` steps and on the full `shakespeare`
/// step, and 4 only on `shakespeare` at a small batch.
pub const DEFAULT_FIT_RATIO: u32 = 2;

/// Requests whose class is below this many bytes are only served from their own
/// class, whatever the fit ratio. Small buffers are a sliver of what a step holds,
/// so fitting them saves next to nothing, but with many small classes close
/// together they pass buffers down a chain of classes (a 1 KiB request takes a free
/// 4 KiB, the next 4 KiB request a free 6 KiB, ...), shifting a little each step:
/// the pool then takes several steps longer to reach a step that creates nothing.
pub const FIT_MIN_BYTES: usize = 16 << 10;

/// Largest [`BufferPoolConfig::fit_ratio`] accepted: past it a tiny request could pin
/// a buffer of any size.
pub const MAX_FIT_RATIO: u32 = 1024;

impl Default for BufferPoolConfig {
    fn default() -> Self {
        BufferPoolConfig {
            max_buffers_per_bucket: 256,
            max_total_buffers: 2048,
            max_buffer_size: 1 << 30,
            max_bytes: 8 << 30,
            policy: SizePolicy::PowerOfTwo,
            max_idle_ticks: None,
            fit_ratio: DEFAULT_FIT_RATIO,
        }
    }
}

impl BufferPoolConfig {
    /// Checks the limits make sense together.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_buffer_size < SIZE_ALIGNMENT {
            return Err(format!(
                "max_buffer_size must be at least {SIZE_ALIGNMENT} bytes"
            ));
        }
        if !(1..=MAX_FIT_RATIO).contains(&self.fit_ratio) {
            return Err(format!(
                "fit_ratio must be from 1 to {MAX_FIT_RATIO}, got {}",
                self.fit_ratio
            ));
        }
        if let SizePolicy::Subdivided { subdivisions } = self.policy {
            if !(1..=MAX_SUBDIVISIONS).contains(&subdivisions) || !subdivisions.is_power_of_two() {
                return Err(format!(
                    "subdivisions must be a power of two from 1 to {MAX_SUBDIVISIONS}, got {subdivisions}"
                ));
            }
        }
        Ok(())
    }
}

//! The context's counters: what it created, dispatched and submitted, and the bytes
//! its live buffers take, kept as relaxed atomics and read as one snapshot.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The context's counters, next to the pool's [`crate::BufferPoolStats`].
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct ContextCounters {
    /// Compute dispatches recorded.
    pub dispatches: u64,
    /// Queue submits.
    pub submits: u64,
    /// GPU buffers this context created, of every kind (pooled, uploads, staging,
    /// readback, kernel parameters). Flat in steady state means the pool is doing
    /// its job.
    pub buffers_created: u64,
    /// Their bytes.
    pub bytes_created: u64,
    /// Buffers the context destroyed (not pooled, rejected or evicted by the pool).
    pub buffers_destroyed: u64,
    /// Bind groups created (one per dispatch unless cached).
    pub bind_groups_created: u64,
    /// Command encoders created (one per submit).
    pub encoders_created: u64,
    /// Compute pipelines created (one per kernel, on first use).
    pub pipelines_created: u64,
    /// `write_buffer` calls that brought the kernels' uniform parameters up to date
    /// (at most one per arena chunk a submit, none when no parameter changed).
    pub uniform_writes: u64,
    /// Bytes of live `PooledBuffer`s (their size classes) now.
    pub bytes_in_use: u64,
    /// The most `bytes_in_use` has been.
    pub peak_bytes_in_use: u64,
    /// Bytes the live `PooledBuffer`s asked for (before rounding) now.
    pub bytes_requested_in_use: u64,
    /// The most `bytes_requested_in_use` has been.
    pub peak_bytes_requested_in_use: u64,
    /// The most GPU memory the pooled buffers have taken at once: in use plus held
    /// free by the pool. `peak_bytes_reserved / peak_bytes_requested_in_use` is what a
    /// size policy costs.
    pub peak_bytes_reserved: u64,
    /// Bytes of the planned policy's arenas now (0 under the other policies).
    pub arena_bytes: u64,
    /// Storage requests served at their planned range.
    pub plan_hits: u64,
    /// Storage requests inside a planned step that the plan did not foresee (a
    /// different size or order); the pool served them and the next step is
    /// planned again.
    pub plan_misses: u64,
    /// Storage requests outside any training step (evaluation, sampling, a step's
    /// readback) while a plan is active: the pool serves them.
    pub plan_outside: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub dispatches: AtomicU64,
    pub submits: AtomicU64,
    pub buffers_created: AtomicU64,
    pub bytes_created: AtomicU64,
    pub buffers_destroyed: AtomicU64,
    pub bind_groups_created: AtomicU64,
    pub encoders_created: AtomicU64,
    pub pipelines_created: AtomicU64,
    pub uniform_writes: AtomicU64,
    pub bytes_in_use: AtomicU64,
    pub peak_bytes_in_use: AtomicU64,
    pub bytes_requested_in_use: AtomicU64,
    pub peak_bytes_requested_in_use: AtomicU64,
    pub peak_bytes_reserved: AtomicU64,
    pub arena_bytes: AtomicU64,
    /// Bytes of live tensors at planned ranges (part of `bytes_in_use`).
    pub planned_bytes_in_use: AtomicU64,
    pub plan_hits: AtomicU64,
    pub plan_misses: AtomicU64,
    pub plan_outside: AtomicU64,
}

impl Counters {
    pub fn snapshot(&self) -> ContextCounters {
        ContextCounters {
            dispatches: self.dispatches.load(Relaxed),
            submits: self.submits.load(Relaxed),
            buffers_created: self.buffers_created.load(Relaxed),
            bytes_created: self.bytes_created.load(Relaxed),
            buffers_destroyed: self.buffers_destroyed.load(Relaxed),
            bind_groups_created: self.bind_groups_created.load(Relaxed),
            encoders_created: self.encoders_created.load(Relaxed),
            pipelines_created: self.pipelines_created.load(Relaxed),
            uniform_writes: self.uniform_writes.load(Relaxed),
            bytes_in_use: self.bytes_in_use.load(Relaxed),
            peak_bytes_in_use: self.peak_bytes_in_use.load(Relaxed),
            bytes_requested_in_use: self.bytes_requested_in_use.load(Relaxed),
            peak_bytes_requested_in_use: self.peak_bytes_requested_in_use.load(Relaxed),
            peak_bytes_reserved: self.peak_bytes_reserved.load(Relaxed),
            arena_bytes: self.arena_bytes.load(Relaxed),
            plan_hits: self.plan_hits.load(Relaxed),
            plan_misses: self.plan_misses.load(Relaxed),
            plan_outside: self.plan_outside.load(Relaxed),
        }
    }

    /// Starts the peaks over from the values now, so that they measure what follows
    /// (a steady step after warm-up) and not the run so far.
    pub fn reset_peaks(&self, reserved_now: u64) {
        let at = |peak: &AtomicU64, now: &AtomicU64| peak.store(now.load(Relaxed), Relaxed);
        at(&self.peak_bytes_in_use, &self.bytes_in_use);
        at(
            &self.peak_bytes_requested_in_use,
            &self.bytes_requested_in_use,
        );
        self.peak_bytes_reserved.store(reserved_now, Relaxed);
    }
}

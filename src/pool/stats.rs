//! [`BufferPoolStats`]: what a pool has done (counters) and holds (gauges).

/// Free buffers of one size class.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BucketStats {
    pub size: usize,
    pub count: usize,
}

/// A snapshot of the pool's counters. Counters (`hits`, `releases_*`, ...) only grow;
/// gauges (`total_pooled`, `bytes_held`, `buckets`) describe the free lists now.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct BufferPoolStats {
    /// Free buffers held, in all buckets.
    pub total_pooled: usize,
    /// Free buffers per size class, smallest first; empty buckets left out.
    pub buckets: Vec<BucketStats>,
    /// Bytes of the free buffers held now.
    pub bytes_held: u64,
    /// The most `bytes_held` has been.
    pub peak_bytes_held: u64,
    /// Acquires served from a bucket.
    pub hits: u64,
    /// Of the hits, those served by [`BufferPool::take`](super::BufferPool::take)
    /// from a larger class than the request's own (see
    /// [`BufferPoolConfig::fit_ratio`](super::BufferPoolConfig::fit_ratio)).
    pub fit_hits: u64,
    /// Acquires that found their bucket empty (the caller creates a buffer).
    pub misses: u64,
    /// Acquires above `max_buffer_size` (never pooled; not counted in `misses`).
    pub oversize_requests: u64,
    /// Sum of the sizes asked for by hits and misses.
    pub bytes_requested: u64,
    /// Sum of the sizes handed out (or to create) for them: `bytes_allocated /
    /// bytes_requested` is what rounding and fitting cost.
    pub bytes_allocated: u64,
    /// Releases kept for reuse.
    pub releases_accepted: u64,
    /// Releases rejected because the bucket was at `max_buffers_per_bucket`.
    pub rejected_bucket_full: u64,
    /// Releases rejected because the pool was at `max_total_buffers`.
    pub rejected_pool_full: u64,
    /// Releases rejected because the size was above `max_buffer_size`.
    pub rejected_too_large: u64,
    /// Releases rejected because they would take `bytes_held` past `max_bytes`.
    pub rejected_over_budget: u64,
    /// Releases rejected because the size is not a size class of the policy.
    pub rejected_not_a_class: u64,
    /// Buffers the pool destroyed (clear, eviction, trim).
    pub buffers_destroyed: u64,
    /// Their bytes.
    pub bytes_destroyed: u64,
    /// Of those, buffers destroyed by `evict_idle` and `trim`.
    pub buffers_evicted: u64,
    /// Their bytes.
    pub bytes_evicted: u64,
}

impl BufferPoolStats {
    /// Fraction of acquires served from the pool (0 before any acquire).
    pub fn hit_rate(&self) -> f64 {
        let total = self.hits + self.misses + self.oversize_requests;
        if total == 0 {
            0.0
        } else {
            self.hits as f64 / total as f64
        }
    }

    /// All rejected releases.
    pub fn releases_rejected(&self) -> u64 {
        self.rejected_bucket_full
            + self.rejected_pool_full
            + self.rejected_too_large
            + self.rejected_over_budget
            + self.rejected_not_a_class
    }
}

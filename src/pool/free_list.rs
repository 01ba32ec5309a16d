//! [`BufferPool`]: the buckets of free buffers, how a request is served from them,
//! what a release keeps, and how buffers leave (clear, trim, idle eviction).

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::config::{BufferPoolConfig, FIT_MIN_BYTES};
use super::policy::{exact_size, SizePolicy};
use super::stats::{BucketStats, BufferPoolStats};
use super::Poolable;

/// A buffer in a bucket, and when it came back (the pool's clock).
struct FreeBuffer<B> {
    buffer: B,
    released_at: u64,
}

struct Inner<B> {
    /// size class -> free buffers, most recently released last (reused first).
    buckets: BTreeMap<usize, Vec<FreeBuffer<B>>>,
    stats: BufferPoolStats,
    tick: u64,
    /// `Some` while destroys are held (see [`BufferPool::hold_destroys`]): what
    /// `clear`, `trim` and `evict_idle` let go, waiting for [`BufferPool::take_held`].
    held: Option<Vec<LetGo<B>>>,
}

/// A free buffer the pool let go of, handed over by [`BufferPool::take_held`] for
/// its owner to destroy.
pub struct LetGo<B> {
    pub buffer: B,
    /// Its size class.
    pub size: usize,
    /// `true`: by age or budget (`evict_idle`, `trim`); `false`: by `clear`.
    pub evicted: bool,
}

/// A pool of reusable GPU buffers, bucketed by size class.
///
/// `new`, `with_defaults` and `allocation_size` are the documented API for
/// `wgpu::Buffer`; tests build pools of other buffer types with [`BufferPool::with_config`].
pub struct BufferPool<B = wgpu::Buffer> {
    config: BufferPoolConfig,
    inner: Mutex<Inner<B>>,
}

impl BufferPool<wgpu::Buffer> {
    /// Creates a pool with the given limits.
    pub fn new(config: BufferPoolConfig) -> Self {
        Self::with_config(config)
    }

    /// Creates a pool with [`BufferPoolConfig::default`].
    pub fn with_defaults() -> Self {
        Self::with_config(BufferPoolConfig::default())
    }

    /// The seed's rounding: the next power of two (5000 -> 8192). Pools configured
    /// with another policy round with [`BufferPool::size_class`].
    pub fn allocation_size(min_size: usize) -> usize {
        SizePolicy::PowerOfTwo.size_class(min_size)
    }
}

impl<B: Poolable + Ord> BufferPool<B> {
    /// Puts each bucket's free buffers in a canonical order: oldest release first
    /// (so the most recent is still reused first), ties broken by the buffers' own
    /// order. Within one submit releases share a tick, so without this the order a
    /// step leaves a bucket in depends on the order its tensors died, and the next
    /// step's tensors land on other buffers than the last step's. Settled, a step
    /// that repeats its acquires and releases gets the same buffers every time, and
    /// what is keyed by buffer (cached bind groups) keeps hitting. The context
    /// settles after every submit.
    pub fn settle(&self) {
        let mut inner = self.lock();
        for list in inner.buckets.values_mut() {
            list.sort_by(|a, b| (a.released_at, &a.buffer).cmp(&(b.released_at, &b.buffer)));
        }
    }
}

impl<B: Poolable> BufferPool<B> {
    /// Creates a pool of any [`Poolable`] buffer type.
    pub fn with_config(config: BufferPoolConfig) -> Self {
        BufferPool {
            config,
            inner: Mutex::new(Inner {
                buckets: BTreeMap::new(),
                stats: BufferPoolStats::default(),
                tick: 0,
                held: None,
            }),
        }
    }

    pub fn config(&self) -> &BufferPoolConfig {
        &self.config
    }

    /// The size of buffer to create for a request of `min_size` bytes: the policy's
    /// class, unless that passes `max_buffer_size`; then the request itself (rounded
    /// to the alignment), so an oversize buffer is never rounded past the device's
    /// limit. Both kinds are fixed points, so releases of either are recognised.
    pub fn size_class(&self, min_size: usize) -> usize {
        let class = self.config.policy.size_class(min_size);
        if class > self.config.max_buffer_size {
            exact_size(min_size)
        } else {
            class
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<B>> {
        // A panic while holding the lock leaves only counters half-updated; the free
        // lists themselves stay valid, so keep going rather than poison every caller.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes a free buffer of at least `min_size` bytes (exactly `size_class(min_size)`),
    /// or `None` when that bucket is empty or the size is above `max_buffer_size`.
    pub fn acquire(&self, min_size: usize) -> Option<B> {
        self.take_within(min_size, 1).ok().map(|(buffer, _)| buffer)
    }

    /// [`BufferPool::acquire`] that, when the request's class (of at least
    /// [`FIT_MIN_BYTES`]) is empty, takes the smallest free buffer of a larger class
    /// up to `fit_ratio` times its own ([`BufferPoolConfig::fit_ratio`]), and says
    /// what it handed out:
    /// `Ok((buffer, its size))`, or `Err(size to create)` (the request's class, or
    /// the request itself above `max_buffer_size`). Release the buffer with the
    /// size it came with.
    pub fn take(&self, min_size: usize) -> Result<(B, usize), usize> {
        self.take_within(min_size, self.config.fit_ratio)
    }

    /// [`BufferPool::take`], choosing among a bucket's free buffers the one of the
    /// lowest `rank` instead of the most recently released. A caller that ranks its
    /// buffers by when it made them gets the same buffer for the same request
    /// whatever order they came back in: a training step binds the same buffers
    /// every step even after other work (an evaluation, a sample) took and returned
    /// some in another order, so its cached bind groups stay valid. The bucket keeps
    /// its release order (trimming goes oldest first).
    pub fn take_ranked(
        &self,
        min_size: usize,
        rank: impl Fn(&B) -> u64,
    ) -> Result<(B, usize), usize> {
        self.take_choosing(min_size, self.config.fit_ratio, |list| {
            let (i, _) = list
                .iter()
                .enumerate()
                .min_by_key(|(_, f)| rank(&f.buffer))?;
            Some(list.remove(i))
        })
    }

    fn take_within(&self, min_size: usize, fit_ratio: u32) -> Result<(B, usize), usize> {
        self.take_choosing(min_size, fit_ratio, Vec::pop)
    }

    /// A take, with `choose` picking (and removing) the buffer of a non-empty bucket.
    fn take_choosing(
        &self,
        min_size: usize,
        fit_ratio: u32,
        mut choose: impl FnMut(&mut Vec<FreeBuffer<B>>) -> Option<FreeBuffer<B>>,
    ) -> Result<(B, usize), usize> {
        let class = self.size_class(min_size);
        let mut inner = self.lock();
        if class > self.config.max_buffer_size {
            inner.stats.oversize_requests += 1;
            return Err(class);
        }
        inner.stats.bytes_requested += min_size as u64;
        let fit_ratio = if class < FIT_MIN_BYTES { 1 } else { fit_ratio };
        let limit = class
            .saturating_mul(fit_ratio.max(1) as usize)
            .min(self.config.max_buffer_size);
        // Buckets emptied by earlier takes stay in the map; skip them.
        let found = inner
            .buckets
            .range_mut(class..=limit)
            .find_map(|(&size, list)| choose(list).map(|free| (size, free)));
        match found {
            Some((size, free)) => {
                let stats = &mut inner.stats;
                stats.hits += 1;
                stats.fit_hits += u64::from(size != class);
                stats.bytes_allocated += size as u64;
                stats.total_pooled -= 1;
                stats.bytes_held -= size as u64;
                Ok((free.buffer, size))
            }
            None => {
                inner.stats.bytes_allocated += class as u64;
                inner.stats.misses += 1;
                Err(class)
            }
        }
    }

    /// Offers a buffer of `size` bytes back. `true`: the pool keeps it. `false`: it
    /// was rejected (bucket full, pool full, too large, over budget, or `size` is not
    /// a size class) and dropped; [`BufferPool::offer`] hands it back with the cause.
    pub fn release(&self, buffer: B, size: usize) -> bool {
        self.offer(buffer, size).is_ok()
    }

    /// [`BufferPool::release`] that hands a rejected buffer back with the cause, for
    /// the caller to destroy (and to report why).
    pub fn offer(&self, buffer: B, size: usize) -> Result<(), (B, Rejection)> {
        let mut inner = self.lock();
        let stats = &inner.stats;
        let rejection = if size > self.config.max_buffer_size {
            Some(Rejection::TooLarge)
        } else if self.size_class(size) != size {
            Some(Rejection::NotAClass)
        } else if stats.total_pooled >= self.config.max_total_buffers {
            Some(Rejection::PoolFull)
        } else if inner.buckets.get(&size).map_or(0, Vec::len) >= self.config.max_buffers_per_bucket
        {
            Some(Rejection::BucketFull)
        } else if stats.bytes_held + size as u64 > self.config.max_bytes {
            Some(Rejection::OverBudget)
        } else {
            None
        };
        let stats = &mut inner.stats;
        let Some(rejection) = rejection else {
            stats.releases_accepted += 1;
            stats.total_pooled += 1;
            stats.bytes_held += size as u64;
            stats.peak_bytes_held = stats.peak_bytes_held.max(stats.bytes_held);
            let released_at = inner.tick;
            inner.buckets.entry(size).or_default().push(FreeBuffer {
                buffer,
                released_at,
            });
            return Ok(());
        };
        *match rejection {
            Rejection::TooLarge => &mut stats.rejected_too_large,
            Rejection::NotAClass => &mut stats.rejected_not_a_class,
            Rejection::PoolFull => &mut stats.rejected_pool_full,
            Rejection::BucketFull => &mut stats.rejected_bucket_full,
            Rejection::OverBudget => &mut stats.rejected_over_budget,
        } += 1;
        Err((buffer, rejection))
    }

    /// While `hold` is true, the buffers that `clear`, `trim` and `evict_idle` let go
    /// are not destroyed but kept for [`BufferPool::take_held`] (their bookkeeping is
    /// done at once). A [`crate::gpu::WgpuContext`] holds always: a buffer let go
    /// while commands that bind it are recorded but not submitted must not be
    /// destroyed before that submit, so the context destroys them after it.
    /// Turning holding off destroys what is held.
    pub fn hold_destroys(&self, hold: bool) {
        let mut inner = self.lock();
        if hold {
            inner.held.get_or_insert_with(Vec::new);
        } else if let Some(held) = inner.held.take() {
            drop(inner);
            for let_go in held {
                let_go.buffer.destroy();
            }
        }
    }

    /// The buffers let go while holding (see [`BufferPool::hold_destroys`]), for
    /// the caller to destroy.
    pub fn take_held(&self) -> Vec<LetGo<B>> {
        self.lock()
            .held
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Destroys every free buffer now, freeing its GPU memory (while holding, hands
    /// them to [`BufferPool::take_held`] instead).
    pub fn clear(&self) {
        let mut inner = self.lock();
        let buckets = std::mem::take(&mut inner.buckets);
        for (size, list) in buckets {
            for free in list {
                let_go(&mut inner, free.buffer, size, false);
            }
        }
    }

    /// Advances the pool's clock (the context calls this once a submit) and returns
    /// the new tick. Idle eviction counts age in ticks.
    pub fn tick(&self) -> u64 {
        let mut inner = self.lock();
        inner.tick += 1;
        inner.tick
    }

    /// Destroys free buffers released more than `max_idle_ticks` ticks ago. Returns
    /// how many. Does nothing when the config sets no age limit.
    pub fn evict_idle(&self) -> usize {
        let Some(max_idle) = self.config.max_idle_ticks else {
            return 0;
        };
        let mut inner = self.lock();
        let now = inner.tick;
        let mut evicted = Vec::new();
        for (&size, list) in inner.buckets.iter_mut() {
            let (old, young): (Vec<_>, Vec<_>) = std::mem::take(list)
                .into_iter()
                .partition(|f| now.saturating_sub(f.released_at) > max_idle);
            *list = young;
            evicted.extend(old.into_iter().map(|f| (size, f)));
        }
        inner.buckets.retain(|_, list| !list.is_empty());
        let n = evicted.len();
        for (size, free) in evicted {
            let_go(&mut inner, free.buffer, size, true);
        }
        n
    }

    /// Destroys free buffers, least recently released first, until at most
    /// `target_bytes` are held. Returns how many it destroyed.
    pub fn trim(&self, target_bytes: u64) -> usize {
        let mut inner = self.lock();
        let mut n = 0;
        while inner.stats.bytes_held > target_bytes {
            // The oldest free buffer across all buckets; each bucket is oldest-first.
            let oldest = inner
                .buckets
                .iter()
                .filter_map(|(&size, list)| list.first().map(|f| (f.released_at, size)))
                .min();
            let Some((_, size)) = oldest else { break };
            let list = inner.buckets.get_mut(&size).expect("bucket just seen");
            let free = list.remove(0);
            if list.is_empty() {
                inner.buckets.remove(&size);
            }
            let_go(&mut inner, free.buffer, size, true);
            n += 1;
        }
        n
    }

    /// Bytes of the free buffers held now (cheaper than [`BufferPool::stats`]).
    pub fn bytes_held(&self) -> u64 {
        self.lock().stats.bytes_held
    }

    /// A snapshot of the counters and free lists.
    pub fn stats(&self) -> BufferPoolStats {
        let inner = self.lock();
        let mut stats = inner.stats.clone();
        stats.buckets = inner
            .buckets
            .iter()
            .filter(|(_, list)| !list.is_empty())
            .map(|(&size, list)| BucketStats {
                size,
                count: list.len(),
            })
            .collect();
        stats
    }
}

/// Why [`BufferPool::offer`] turned a buffer away.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rejection {
    /// Above `max_buffer_size`.
    TooLarge,
    /// Its size is not a size class of the policy.
    NotAClass,
    /// The pool held `max_total_buffers`.
    PoolFull,
    /// Its bucket held `max_buffers_per_bucket`.
    BucketFull,
    /// Keeping it would pass `max_bytes`.
    OverBudget,
}

/// Counts a free buffer as gone, and destroys it or holds it for `take_held`.
fn let_go<B: Poolable>(inner: &mut Inner<B>, buffer: B, size: usize, evicted: bool) {
    count_destroyed(&mut inner.stats, size, evicted);
    match inner.held.as_mut() {
        Some(held) => held.push(LetGo {
            buffer,
            size,
            evicted,
        }),
        None => buffer.destroy(),
    }
}

fn count_destroyed(stats: &mut BufferPoolStats, size: usize, evicted: bool) {
    stats.total_pooled -= 1;
    stats.bytes_held -= size as u64;
    stats.buffers_destroyed += 1;
    stats.bytes_destroyed += size as u64;
    if evicted {
        stats.buffers_evicted += 1;
        stats.bytes_evicted += size as u64;
    }
}

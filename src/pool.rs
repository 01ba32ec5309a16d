//! `BufferPool`: a size-bucketed free list of GPU buffers.
//!
//! The pool is pure bookkeeping. It never creates a buffer: [`crate::gpu::WgpuContext`]
//! creates one when [`BufferPool::acquire`] misses, and [`crate::gpu::PooledBuffer`]
//! hands it back through [`BufferPool::release`] when its last handle drops. Because
//! the logic is generic over the buffer type ([`Poolable`]), every rule here is
//! tested without a device (`tests/pool.rs`); `wgpu::Buffer` is the default type.
//!
//! Sizes are rounded up to a *size class* so that buffers in one bucket are
//! interchangeable. The seed's policy, powers of two, is the default
//! ([`SizePolicy::PowerOfTwo`]); finer policies trade fewer wasted bytes for more
//! buckets (see [`SizePolicy`]).
//!
//! [`BufferPool::acquire`] serves a request from its own class only (the seed's
//! rule). [`BufferPool::take`], which the context uses, also serves a request whose
//! class is empty from the smallest free buffer of a larger class, up to
//! [`BufferPoolConfig::fit_ratio`] times its own (classes of [`FIT_MIN_BYTES`] and
//! up), before the caller creates one:
//! buffers freed by tensors of one shape then serve tensors of another, instead of
//! sitting idle while new buffers are created beside them. Kernels may be handed
//! buffers larger than they asked for under any policy (they never read a buffer's
//! length), and bind groups bind whole buffers, so fitting changes nothing for them.
//!
//! Every operation takes one `Mutex`, so the pool is `Send + Sync` whenever its
//! buffer type is, and safe to share between threads natively.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// What the pool needs from a buffer: how to free its memory now.
///
/// On the web, dropping a `wgpu::Buffer` only frees GPU memory when JavaScript's
/// garbage collector runs, so the pool calls `destroy` whenever it lets a buffer go.
pub trait Poolable {
    fn destroy(&self);
}

impl Poolable for wgpu::Buffer {
    fn destroy(&self) {
        wgpu::Buffer::destroy(self)
    }
}

/// Every buffer size the pool hands out is a multiple of this (wgpu's copy and
/// binding alignment).
pub const SIZE_ALIGNMENT: usize = 4;

/// `min_size` rounded up to [`SIZE_ALIGNMENT`] (at least one alignment), or itself
/// when that would overflow.
fn exact_size(min_size: usize) -> usize {
    min_size
        .max(SIZE_ALIGNMENT)
        .checked_next_multiple_of(SIZE_ALIGNMENT)
        .unwrap_or(min_size)
}

/// How a requested size is rounded up to the size class of its bucket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SizePolicy {
    /// The next power of two (the seed's rule): few buckets and the most reuse, at
    /// up to 2x the requested bytes.
    #[default]
    PowerOfTwo,
    /// Each octave split into `subdivisions` equal steps (PyTorch's
    /// `roundup_power2_divisions`): a 1200-byte request with 4 subdivisions gets 1280.
    /// Wastes at most 1/`subdivisions` of an octave.
    Subdivided { subdivisions: u32 },
    /// The size itself, rounded to [`SIZE_ALIGNMENT`]: no waste, but a buffer is only
    /// reused by a request of exactly its size (fine for static-shape training).
    Exact,
}

/// Most subdivisions of an octave [`SizePolicy::parse`] accepts: finer steps than
/// 1/1024 of an octave save nothing measurable and only multiply the buckets, and
/// an unbounded count would overflow the step arithmetic.
pub const MAX_SUBDIVISIONS: u32 = 1024;

impl SizePolicy {
    /// The size class of a request of `min_size` bytes under this policy, in u64
    /// with checked arithmetic: `None` when the class would not fit in a u64 (no
    /// buffer that large exists anywhere).
    pub fn class_bytes(self, min_size: u64) -> Option<u64> {
        let align = SIZE_ALIGNMENT as u64;
        let min_size = min_size.max(align);
        match self {
            SizePolicy::PowerOfTwo => min_size.checked_next_power_of_two(),
            SizePolicy::Subdivided { subdivisions } => {
                let pow2 = min_size.checked_next_power_of_two()?;
                let octave = pow2 / 2;
                let divs = u64::from(subdivisions.clamp(1, MAX_SUBDIVISIONS)).next_power_of_two();
                // Steps below the alignment cannot be honoured; plain pow2 there.
                if octave < align * divs {
                    return Some(pow2);
                }
                let step = octave / divs;
                min_size.div_ceil(step).checked_mul(step)
            }
            SizePolicy::Exact => min_size.div_ceil(align).checked_mul(align),
        }
    }

    /// [`SizePolicy::class_bytes`] for a host-sized request. A class that does not
    /// fit in a `usize` (a 3 GiB request rounded to 4 GiB on wasm32) falls back to
    /// the request itself rounded to the alignment, so rounding never wraps.
    pub fn size_class(self, min_size: usize) -> usize {
        self.class_bytes(min_size as u64)
            .and_then(|class| usize::try_from(class).ok())
            .unwrap_or_else(|| exact_size(min_size))
    }

    /// Short label for tables and the page.
    pub fn label(self) -> String {
        match self {
            SizePolicy::PowerOfTwo => "pow2".into(),
            SizePolicy::Subdivided { subdivisions } => format!("pow2/{subdivisions}"),
            SizePolicy::Exact => "exact".into(),
        }
    }

    /// Parses the labels [`SizePolicy::label`] writes (`pow2`, `pow2/4`, `exact`).
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "pow2" => Ok(SizePolicy::PowerOfTwo),
            "exact" => Ok(SizePolicy::Exact),
            _ => match text.strip_prefix("pow2/").map(str::parse::<u32>) {
                Some(Ok(n)) if (1..=MAX_SUBDIVISIONS).contains(&n) && n.is_power_of_two() => {
                    Ok(SizePolicy::Subdivided { subdivisions: n })
                }
                _ => Err(format!(
                    "unknown size policy {text:?}: expected pow2, pow2/N (N a power of two \
                     from 1 to {MAX_SUBDIVISIONS}) or exact"
                )),
            },
        }
    }
}

// Policies cross to JSON and JS as their labels ("pow2", "pow2/4", "exact").
impl serde::Serialize for SizePolicy {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.label())
    }
}

impl<'de> serde::Deserialize<'de> for SizePolicy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let label = String::deserialize(d)?;
        SizePolicy::parse(&label).map_err(serde::de::Error::custom)
    }
}

/// Limits on what the pool keeps. A release that would break one is rejected and
/// the caller destroys the buffer.
///
/// The defaults are sized for training, not for the seed's benchmark loop: one
/// training step of the `shakespeare` preset holds about a hundred activations and
/// gradients alive at once, several dozen of them in the same bucket, and every one
/// of them must come back to the pool for the next step to create nothing. The seed's
/// caps (8 a bucket, 64 in all, 64 MiB) would reject most of them.
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
    /// are destroyed by [`BufferPool::evict_idle`]. `None`: never by age. Default `None`.
    pub max_idle_ticks: Option<u64>,
    /// How much larger than its own class a free buffer may be and still serve a
    /// request whose class is empty ([`BufferPool::take`]): the smallest non-empty
    /// class up to `fit_ratio` times its own is used before a buffer is created
    /// (for classes of at least [`FIT_MIN_BYTES`]). 1: only its own class (the
    /// seed's rule, and what [`BufferPool::acquire`] always does). Default
    /// [`DEFAULT_FIT_RATIO`].
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
    /// Of the hits, those served by [`BufferPool::take`] from a larger class than
    /// the request's own (see [`BufferPoolConfig::fit_ratio`]).
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
/// `new`, `with_defaults` and `allocation_size` are the seed's API for
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

    fn take_within(&self, min_size: usize, fit_ratio: u32) -> Result<(B, usize), usize> {
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
            .find_map(|(&size, list)| list.pop().map(|free| (size, free)));
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

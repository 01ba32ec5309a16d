//! BufferPool's bookkeeping without a GPU: its documented examples, every limit, the
//! size policies, eviction, stats arithmetic, random sequences and threads.
#![cfg(not(target_arch = "wasm32"))]

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use proptest::prelude::*;
use tidepool::pool::{BufferPool, BufferPoolConfig, BufferPoolStats, Poolable, SizePolicy};

/// A stand-in buffer: remembers its size and whether it was destroyed.
#[derive(Debug)]
struct Fake {
    id: u64,
    size: usize,
    destroyed: Arc<AtomicBool>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

impl Fake {
    fn new(size: usize) -> Self {
        Fake {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            size,
            destroyed: Arc::default(),
        }
    }
}

impl Poolable for Fake {
    fn destroy(&self) {
        assert!(
            !self.destroyed.swap(true, Ordering::SeqCst),
            "destroyed twice"
        );
    }
}

fn pool(config: BufferPoolConfig) -> BufferPool<Fake> {
    BufferPool::with_config(config)
}

/// A fake of the size class the pool would create for `min` bytes.
fn fresh(pool: &BufferPool<Fake>, min: usize) -> Fake {
    Fake::new(pool.size_class(min))
}

#[test]
fn seed_examples() {
    assert_eq!(BufferPool::allocation_size(5000), 8192);
    assert_eq!(BufferPool::allocation_size(8192), 8192);
    assert_eq!(BufferPool::allocation_size(1), 4);
    let p = pool(BufferPoolConfig::default());
    // An empty bucket: None.
    assert!(p.acquire(5000).is_none());
    let b = fresh(&p, 5000);
    let id = b.id;
    assert!(p.release(b, 8192));
    // A 6000-byte request is the same bucket.
    assert_eq!(p.acquire(6000).map(|b| b.id), Some(id));
    // A 9000-byte request is not.
    assert!(p.release(Fake::new(8192), 8192));
    assert!(p.acquire(9000).is_none());
}

#[test]
fn seed_defaults_are_documented_values() {
    let c = BufferPoolConfig::default();
    assert_eq!(c.max_buffers_per_bucket, 256);
    assert_eq!(c.max_total_buffers, 2048);
    assert_eq!(c.max_buffer_size, 1 << 30);
    assert_eq!(c.max_bytes, 8 << 30);
    assert_eq!(c.policy, SizePolicy::PowerOfTwo);
    assert_eq!(c.fit_ratio, tidepool::pool::DEFAULT_FIT_RATIO);
    let p = BufferPool::with_defaults();
    assert_eq!(p.config(), &c);
}

#[test]
fn bucket_cap_rejects_and_counts() {
    let p = pool(BufferPoolConfig {
        max_buffers_per_bucket: 2,
        ..Default::default()
    });
    assert!(p.release(Fake::new(1024), 1024));
    assert!(p.release(Fake::new(1024), 1024));
    assert!(!p.release(Fake::new(1024), 1024), "third in a full bucket");
    assert!(
        p.release(Fake::new(2048), 2048),
        "another bucket still has room"
    );
    let s = p.stats();
    assert_eq!(s.rejected_bucket_full, 1);
    assert_eq!(s.releases_accepted, 3);
    assert_eq!(s.total_pooled, 3);
}

#[test]
fn total_cap_rejects_and_counts() {
    let p = pool(BufferPoolConfig {
        max_total_buffers: 3,
        ..Default::default()
    });
    for size in [4, 8, 16] {
        assert!(p.release(Fake::new(size), size));
    }
    assert!(!p.release(Fake::new(32), 32));
    assert_eq!(p.stats().rejected_pool_full, 1);
}

#[test]
fn max_size_rejects_and_misses() {
    let p = pool(BufferPoolConfig {
        max_buffer_size: 4096,
        ..Default::default()
    });
    assert!(!p.release(Fake::new(8192), 8192));
    assert!(p.acquire(5000).is_none());
    let s = p.stats();
    assert_eq!(s.rejected_too_large, 1);
    assert_eq!(s.oversize_requests, 1);
    assert_eq!(s.misses, 0, "oversize requests are not bucket misses");
    assert_eq!(s.hit_rate(), 0.0);
}

#[test]
fn byte_budget_is_never_exceeded() {
    let p = pool(BufferPoolConfig {
        max_bytes: 10_000,
        ..Default::default()
    });
    assert!(p.release(Fake::new(8192), 8192));
    assert!(!p.release(Fake::new(4096), 4096), "8192 + 4096 > 10000");
    assert!(p.release(Fake::new(1024), 1024));
    let s = p.stats();
    assert_eq!(s.bytes_held, 9216);
    assert_eq!(s.rejected_over_budget, 1);
}

#[test]
fn sizes_that_are_not_a_class_are_rejected() {
    let p = pool(BufferPoolConfig::default());
    assert!(!p.release(Fake::new(5000), 5000));
    assert_eq!(p.stats().rejected_not_a_class, 1);
    assert_eq!(p.stats().releases_rejected(), 1);
}

#[test]
fn clear_destroys_everything_now() {
    let p = pool(BufferPoolConfig::default());
    let flags: Vec<_> = (0..5)
        .map(|i| {
            let b = Fake::new(64 << i);
            let flag = b.destroyed.clone();
            assert!(p.release(b, 64 << i));
            flag
        })
        .collect();
    p.clear();
    assert!(flags.iter().all(|f| f.load(Ordering::SeqCst)));
    let s = p.stats();
    assert_eq!(
        (s.total_pooled, s.bytes_held, s.buffers_destroyed),
        (0, 0, 5)
    );
    assert_eq!(s.bytes_destroyed, 64 + 128 + 256 + 512 + 1024);
    assert!(s.buckets.is_empty());
    assert_eq!(s.peak_bytes_held, 64 + 128 + 256 + 512 + 1024);
}

#[test]
fn stats_arithmetic() {
    let p = pool(BufferPoolConfig::default());
    assert!(p.acquire(100).is_none()); // miss: 100 asked, 128 allotted
    assert!(p.release(Fake::new(128), 128));
    assert!(p.acquire(120).is_some()); // hit
    assert!(p.acquire(3000).is_none()); // miss
    let s = p.stats();
    assert_eq!((s.hits, s.misses), (1, 2));
    assert!((s.hit_rate() - 1.0 / 3.0).abs() < 1e-12);
    assert_eq!(s.bytes_requested, 100 + 120 + 3000);
    assert_eq!(s.bytes_allocated, 128 + 128 + 4096);
    assert_eq!(s.bytes_held, 0);
    assert_eq!(s.peak_bytes_held, 128);
}

#[test]
fn buckets_report_free_counts_smallest_first() {
    let p = pool(BufferPoolConfig::default());
    for size in [4096, 256, 4096, 64] {
        assert!(p.release(Fake::new(size), size));
    }
    let sizes: Vec<_> = p
        .stats()
        .buckets
        .iter()
        .map(|b| (b.size, b.count))
        .collect();
    assert_eq!(sizes, vec![(64, 1), (256, 1), (4096, 2)]);
}

#[test]
fn policies_round_as_documented() {
    let pow2 = SizePolicy::PowerOfTwo;
    let sub4 = SizePolicy::Subdivided { subdivisions: 4 };
    let exact = SizePolicy::Exact;
    assert_eq!(pow2.size_class(1200), 2048);
    assert_eq!(sub4.size_class(1200), 1280, "the issue's example");
    assert_eq!(sub4.size_class(1024), 1024);
    assert_eq!(sub4.size_class(1025), 1280);
    assert_eq!(sub4.size_class(1537), 1792);
    assert_eq!(exact.size_class(1201), 1204);
    assert_eq!(exact.size_class(0), 4);
    for policy in [
        pow2,
        sub4,
        exact,
        SizePolicy::Subdivided { subdivisions: 8 },
    ] {
        for n in (1..5000).chain([1 << 20, (1 << 20) + 1, 25_165_824, 100_663_296]) {
            let class = policy.size_class(n);
            assert!(class >= n, "{policy:?} {n} -> {class}");
            assert_eq!(class % 4, 0, "{policy:?} {n} -> {class}");
            assert_eq!(policy.size_class(class), class, "classes are fixed points");
        }
    }
    for label in ["pow2", "pow2/4", "exact"] {
        assert_eq!(SizePolicy::parse(label).unwrap().label(), label);
    }
    assert!(SizePolicy::parse("pow2/3").is_err());
}

#[test]
fn subdivided_waste_is_bounded() {
    let sub4 = SizePolicy::Subdivided { subdivisions: 4 };
    for n in 64..100_000 {
        let class = sub4.size_class(n);
        // Within one step (an eighth of the next power of two) of the request.
        assert!(class - n < n.next_power_of_two() / 8 + 4, "{n} -> {class}");
    }
}

#[test]
fn idle_buffers_are_evicted_by_age() {
    let p = pool(BufferPoolConfig {
        max_idle_ticks: Some(2),
        ..Default::default()
    });
    let old = Fake::new(256);
    let old_flag = old.destroyed.clone();
    assert!(p.release(old, 256));
    p.tick();
    p.tick();
    let young = Fake::new(512);
    let young_flag = young.destroyed.clone();
    assert!(p.release(young, 512));
    assert_eq!(p.evict_idle(), 0, "2 ticks is not more than 2");
    p.tick();
    assert_eq!(p.evict_idle(), 1);
    assert!(old_flag.load(Ordering::SeqCst) && !young_flag.load(Ordering::SeqCst));
    let s = p.stats();
    assert_eq!(
        (s.buffers_evicted, s.bytes_evicted, s.total_pooled),
        (1, 256, 1)
    );
    // Without an age limit nothing is ever evicted by age.
    let q = pool(BufferPoolConfig::default());
    assert!(q.release(Fake::new(64), 64));
    for _ in 0..100 {
        q.tick();
    }
    assert_eq!(q.evict_idle(), 0);
}

#[test]
fn trim_drops_oldest_first_down_to_target() {
    let p = pool(BufferPoolConfig::default());
    let mut flags = Vec::new();
    for size in [1024, 64, 4096, 256] {
        let b = Fake::new(size);
        flags.push((size, b.destroyed.clone()));
        assert!(p.release(b, size));
        p.tick();
    }
    assert_eq!(p.trim(4096 + 256), 2); // the 1024 and the 64, the oldest two
    let gone: Vec<_> = flags
        .iter()
        .filter(|(_, f)| f.load(Ordering::SeqCst))
        .map(|(s, _)| *s)
        .collect();
    assert_eq!(gone, vec![1024, 64]);
    assert_eq!(p.stats().bytes_held, 4096 + 256);
    assert_eq!(p.trim(0), 2);
    assert_eq!(p.stats().total_pooled, 0);
}

#[test]
fn reuse_is_lifo_within_a_bucket() {
    let p = pool(BufferPoolConfig::default());
    let (a, b) = (Fake::new(64), Fake::new(64));
    let b_id = b.id;
    assert!(p.release(a, 64));
    assert!(p.release(b, 64));
    assert_eq!(
        p.acquire(64).unwrap().id,
        b_id,
        "most recently released first"
    );
}

#[derive(Clone, Debug)]
enum Op {
    Acquire(usize),
    Take(usize),
    Release(usize), // index into the held list
    Tick,
    Evict,
    Trim(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1usize..70_000).prop_map(Op::Acquire),
        4 => (1usize..70_000).prop_map(Op::Take),
        6 => any::<usize>().prop_map(Op::Release),
        1 => Just(Op::Tick),
        1 => Just(Op::Evict),
        1 => (0u64..300_000).prop_map(Op::Trim),
    ]
}

fn policy() -> impl Strategy<Value = SizePolicy> {
    prop_oneof![
        Just(SizePolicy::PowerOfTwo),
        Just(SizePolicy::Subdivided { subdivisions: 4 }),
        Just(SizePolicy::Exact),
    ]
}

fn check_invariants(p: &BufferPool<Fake>, s: &BufferPoolStats) {
    let c = p.config();
    assert!(s.total_pooled <= c.max_total_buffers);
    assert!(s.bytes_held <= c.max_bytes);
    assert!(s.peak_bytes_held >= s.bytes_held);
    for b in &s.buckets {
        assert!(b.count <= c.max_buffers_per_bucket);
        assert!(b.size <= c.max_buffer_size);
    }
    assert_eq!(
        s.buckets.iter().map(|b| b.count).sum::<usize>(),
        s.total_pooled
    );
    let held: u64 = s.buckets.iter().map(|b| (b.size * b.count) as u64).sum();
    assert_eq!(held, s.bytes_held);
    // Everything accepted is still held or was destroyed.
    assert_eq!(
        s.releases_accepted,
        s.total_pooled as u64 + s.hits + s.buffers_destroyed
    );
    assert!(s.bytes_allocated >= s.bytes_requested);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn random_sequences_keep_every_invariant(
        ops in prop::collection::vec(op(), 1..400),
        policy in policy(),
        per_bucket in 1usize..6,
        total in 1usize..20,
        budget in 1u64..400_000,
        fit_ratio in 1u32..9,
    ) {
        let p = pool(BufferPoolConfig {
            max_buffers_per_bucket: per_bucket,
            max_total_buffers: total,
            max_buffer_size: 65_536,
            max_bytes: budget,
            policy,
            max_idle_ticks: Some(3),
            fit_ratio,
        });
        let mut held: Vec<(Fake, usize)> = Vec::new();
        let mut pooled_ids = HashSet::new();
        for op in ops {
            match op {
                Op::Acquire(n) => match p.acquire(n) {
                    Some(b) => {
                        prop_assert!(b.size >= n, "got {} for {}", b.size, n);
                        prop_assert_eq!(b.size, p.size_class(n));
                        prop_assert!(!b.destroyed.load(Ordering::SeqCst), "handed out a destroyed buffer");
                        prop_assert!(pooled_ids.remove(&b.id));
                        held.push((b, n));
                    }
                    None => {
                        if p.size_class(n) <= 65_536 {
                            held.push((fresh(&p, n), n));
                        }
                    }
                },
                Op::Take(n) => match p.take(n) {
                    Ok((b, size)) => {
                        prop_assert_eq!(b.size, size);
                        let class = p.size_class(n);
                        let fit = if class < tidepool::pool::FIT_MIN_BYTES { 1 } else { fit_ratio as usize };
                        prop_assert!(size >= class && size <= class * fit,
                            "got {} for {} (class {}, fit {})", size, n, class, fit_ratio);
                        prop_assert_eq!(p.size_class(size), size, "a class, so it can come back");
                        prop_assert!(!b.destroyed.load(Ordering::SeqCst), "handed out a destroyed buffer");
                        prop_assert!(pooled_ids.remove(&b.id));
                        held.push((b, n));
                    }
                    Err(size) => {
                        prop_assert_eq!(size, p.size_class(n));
                        if size <= 65_536 {
                            held.push((Fake::new(size), n));
                        }
                    }
                },
                Op::Release(i) if !held.is_empty() => {
                    let (b, _) = held.swap_remove(i % held.len());
                    let (id, size) = (b.id, b.size);
                    if p.release(b, size) {
                        pooled_ids.insert(id);
                    }
                }
                Op::Release(_) => {}
                Op::Tick => { p.tick(); }
                Op::Evict => { p.evict_idle(); }
                Op::Trim(target) => {
                    p.trim(target);
                    prop_assert!(p.stats().bytes_held <= target);
                }
            }
            let s = p.stats();
            check_invariants(&p, &s);
        }
    }
}

#[test]
fn take_serves_an_empty_class_from_the_smallest_larger_buffer_within_the_ratio() {
    const K: usize = 64 << 10; // a class above FIT_MIN_BYTES
    let p = pool(BufferPoolConfig {
        fit_ratio: 4,
        ..Default::default()
    });
    assert!(p.release(Fake::new(8 * K), 8 * K));
    // K - 100 -> class K: 8K is past 4 x K, so the caller creates a K.
    assert_eq!(p.take(K - 100).err(), Some(K));
    assert!(p.release(Fake::new(4 * K), 4 * K));
    assert!(p.release(Fake::new(2 * K), 2 * K));
    // The smallest free class within 4 x K serves it.
    let (b, size) = p.take(K - 100).expect("a fit");
    assert_eq!((b.size, size), (2 * K, 2 * K));
    let s = p.stats();
    assert_eq!((s.hits, s.fit_hits, s.misses), (1, 1, 1));
    // Counted as the bytes handed out, not the class asked for.
    assert_eq!(s.bytes_allocated, (K + 2 * K) as u64);
    assert_eq!(s.bytes_requested, 2 * (K as u64 - 100));
    // Its own class comes first when it has a buffer.
    assert!(p.release(Fake::new(K), K));
    assert_eq!(p.take(K - 100).map(|(_, size)| size), Ok(K));
    // acquire keeps to its own class: 4K and 8K are free, K is not.
    assert!(p.acquire(K - 100).is_none());
    // The fitted buffer goes back under its own size.
    assert!(p.release(b, size));
    let count = |size| {
        p.stats()
            .buckets
            .iter()
            .find(|b| b.size == size)
            .map(|b| b.count)
    };
    assert_eq!(count(2 * K), Some(1));
    // fit_ratio 1 is acquire's rule.
    let seed = pool(BufferPoolConfig {
        fit_ratio: 1,
        ..Default::default()
    });
    assert!(seed.release(Fake::new(2 * K), 2 * K));
    assert_eq!(seed.take(K - 100).err(), Some(K));
}

#[test]
fn small_classes_are_only_served_from_their_own() {
    use tidepool::pool::FIT_MIN_BYTES;
    let p = pool(BufferPoolConfig {
        fit_ratio: 1024,
        ..Default::default()
    });
    let small = FIT_MIN_BYTES / 2;
    assert!(p.release(Fake::new(FIT_MIN_BYTES), FIT_MIN_BYTES));
    assert!(p.release(Fake::new(4 * FIT_MIN_BYTES), 4 * FIT_MIN_BYTES));
    // Below FIT_MIN_BYTES: its own class or a new buffer.
    assert_eq!(p.take(small).err(), Some(small));
    // From FIT_MIN_BYTES up: its own class first, then a larger one.
    assert_eq!(p.take(FIT_MIN_BYTES).map(|(_, s)| s), Ok(FIT_MIN_BYTES));
    assert_eq!(p.take(FIT_MIN_BYTES).map(|(_, s)| s), Ok(4 * FIT_MIN_BYTES));
}

#[test]
fn take_never_fits_past_the_largest_pooled_size() {
    let max = 1 << 20;
    let p = pool(BufferPoolConfig {
        max_buffer_size: max,
        fit_ratio: 8,
        ..Default::default()
    });
    assert!(p.release(Fake::new(max), max));
    assert_eq!(p.take(max / 4).map(|(_, s)| s), Ok(max));
    // Oversize requests are never served from the pool: the caller creates them.
    assert!(p.release(Fake::new(max), max));
    assert_eq!(p.take(max + 4).err(), Some(max + 4));
    assert_eq!(p.stats().oversize_requests, 1);
}

#[test]
fn threads_share_one_pool_without_losing_buffers() {
    let p = Arc::new(pool(BufferPoolConfig {
        max_buffers_per_bucket: 1000,
        max_total_buffers: 10_000,
        ..Default::default()
    }));
    let created = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let (p, created) = (p.clone(), created.clone());
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                for i in 0..2000 {
                    let size = 64 << ((i + t) % 6);
                    let b = p.acquire(size).unwrap_or_else(|| {
                        created.fetch_add(1, Ordering::Relaxed);
                        Fake::new(size)
                    });
                    assert!(b.size >= size);
                    mine.push(b);
                    if i % 3 == 0 {
                        for b in mine.drain(..) {
                            let size = b.size;
                            assert!(p.release(b, size), "caps are far above what 8 threads hold");
                        }
                    }
                }
                for b in mine {
                    let size = b.size;
                    assert!(p.release(b, size));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread");
    }
    let s = p.stats();
    // Every buffer ever created is back in the pool: nothing lost, nothing doubled.
    assert_eq!(s.total_pooled as u64, created.load(Ordering::Relaxed));
    assert_eq!(s.hits + s.misses, 8 * 2000);
    assert_eq!(s.misses, created.load(Ordering::Relaxed));
    assert_eq!(s.releases_accepted, 8 * 2000);
    check_invariants(&p, &s);
}

#[test]
fn pool_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<BufferPool>();
    assert_send_sync::<BufferPool<Fake>>();
}

#[test]
fn invalid_config_is_a_clear_error() {
    let bad = BufferPoolConfig {
        policy: SizePolicy::Subdivided { subdivisions: 3 },
        ..Default::default()
    };
    assert!(bad.validate().unwrap_err().contains("power of two"));
    for fit_ratio in [0, 1025] {
        let bad = BufferPoolConfig {
            fit_ratio,
            ..Default::default()
        };
        let err = bad.validate().unwrap_err();
        assert!(
            err.contains("fit_ratio") && err.contains(&fit_ratio.to_string()),
            "{err}"
        );
    }
}

// ---- the memory manager's hooks: offer, held destroys, settle ----

impl PartialEq for Fake {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}
impl Eq for Fake {}
impl PartialOrd for Fake {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Fake {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.id.cmp(&other.id)
    }
}

#[test]
fn offer_hands_a_rejected_buffer_back_with_its_cause() {
    use tidepool::pool::Rejection;
    let p = pool(BufferPoolConfig {
        max_buffers_per_bucket: 1,
        max_buffer_size: 1 << 20,
        ..Default::default()
    });
    assert!(p.offer(fresh(&p, 4096), 4096).is_ok());
    let second = fresh(&p, 4096);
    let id = second.id;
    let (back, cause) = p.offer(second, 4096).unwrap_err();
    assert_eq!((back.id, cause), (id, Rejection::BucketFull));
    assert_eq!(
        p.offer(Fake::new(100), 100).unwrap_err().1,
        Rejection::NotAClass
    );
    assert_eq!(
        p.offer(Fake::new(2 << 20), 2 << 20).unwrap_err().1,
        Rejection::TooLarge
    );
    let s = p.stats();
    assert_eq!(
        (
            s.rejected_bucket_full,
            s.rejected_not_a_class,
            s.rejected_too_large
        ),
        (1, 1, 1)
    );
}

#[test]
fn held_destroys_wait_for_their_owner() {
    let p = pool(BufferPoolConfig::default());
    p.hold_destroys(true);
    let flags: Vec<_> = (0..4)
        .map(|_| {
            let b = fresh(&p, 1024);
            let flag = b.destroyed.clone();
            assert!(p.release(b, 1024));
            flag
        })
        .collect();
    assert_eq!(p.trim(2048), 2);
    p.tick();
    assert!(
        flags.iter().all(|f| !f.load(Ordering::SeqCst)),
        "held, not destroyed"
    );
    let held = p.take_held();
    assert_eq!(held.len(), 2);
    assert!(held.iter().all(|h| h.evicted && h.size == 1024));
    assert!(p.take_held().is_empty(), "handed over once");
    p.clear();
    assert_eq!(p.stats().total_pooled, 0, "bookkeeping done at once");
    assert_eq!(p.stats().buffers_destroyed, 4);
    // Turning holding off destroys what is still held (the two `clear` let go).
    p.hold_destroys(false);
    assert_eq!(flags.iter().filter(|f| f.load(Ordering::SeqCst)).count(), 2);
    drop(held);
}

#[test]
fn settled_buckets_do_not_depend_on_release_order() {
    let order_after = |release: &[usize]| {
        let p = pool(BufferPoolConfig::default());
        let fakes: Vec<Fake> = (0..4).map(|_| fresh(&p, 512)).collect();
        // Ids come from a counter that tests running beside this one draw from too:
        // each buffer is named by its place among these four, not by id arithmetic.
        let ids: Vec<u64> = fakes.iter().map(|f| f.id).collect();
        let mut fakes: Vec<Option<Fake>> = fakes.into_iter().map(Some).collect();
        for &i in release {
            assert!(p.release(fakes[i].take().unwrap(), 512));
        }
        p.settle();
        (0..4)
            .map(|_| {
                let id = p.acquire(512).unwrap().id;
                ids.iter().position(|&x| x == id).expect("one of the four")
            })
            .collect::<Vec<_>>()
    };
    let a = order_after(&[0, 1, 2, 3]);
    assert_eq!(a, order_after(&[3, 1, 0, 2]));
    assert_eq!(a, order_after(&[2, 3, 1, 0]));
}

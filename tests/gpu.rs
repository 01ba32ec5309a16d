//! WgpuContext and PooledBuffer on a real device: lavapipe natively, WebGPU in
//! headless Chromium. Each body runs on both (see `common::gpu_test!`).

mod common;

use common::fresh_seed;
use common::{context, poisoned, read};
use tidepool::gpu::Kernel;
use tidepool::kernels::residual_forward;
use tidepool::rng::Rng;
use tidepool::{BufferPool, ContextOptions, WgpuContext};

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

gpu_test!(
    context_reports_its_adapter,
    context_reports_its_adapter_body()
);
async fn context_reports_its_adapter_body() {
    let ctx = context().await;
    assert!(!ctx.adapter_name().is_empty());
    #[cfg(target_arch = "wasm32")]
    assert_eq!(ctx.backend(), "webgpu");
    #[cfg(not(target_arch = "wasm32"))]
    assert_ne!(ctx.backend(), "webgpu");
}

/// Context after context in one process, each dropped before the next, keeps
/// finding the adapter and works: an H200's Vulkan driver stopped reporting one
/// at the 30th instance a process made, so contexts share one instance natively.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn contexts_made_one_after_another_keep_finding_the_adapter() {
    pollster::block_on(async {
        for i in 0..48 {
            let ctx = WgpuContext::new()
                .await
                .unwrap_or_else(|e| panic!("context {i}: {e}"));
            let buf = ctx.upload(&[i as f32, 2.0, 3.0]);
            let back: Vec<f32> = ctx.download(&buf, 3).await.expect("download");
            assert_eq!(back, [i as f32, 2.0, 3.0], "context {i}");
        }
    });
}

gpu_test!(
    pooled_buffers_round_up_and_come_back,
    pooled_round_trip_body()
);
async fn pooled_round_trip_body() {
    let ctx = context().await;
    let first = ctx.create_pooled(5000);
    assert_eq!(first.size(), BufferPool::allocation_size(5000) as u64);
    assert_eq!(first.size(), 8192);
    assert_eq!(first.len(), 5000);
    let created = ctx.counters().buffers_created;
    drop(first);
    assert_eq!(ctx.pool_stats().total_pooled, 1);
    // Same bucket: served from the pool, nothing created.
    let second = ctx.create_pooled(6000);
    assert_eq!(second.size(), 8192);
    assert_eq!(ctx.counters().buffers_created, created);
    assert_eq!(ctx.pool_stats().hits, 1);
    assert_eq!(ctx.counters().bytes_in_use, 8192);
    drop(second);
    assert_eq!(ctx.counters().bytes_in_use, 0);
    ctx.clear_pool();
    assert_eq!(ctx.pool_stats().total_pooled, 0);
    assert_eq!(ctx.pool_stats().buffers_destroyed, 1);
}

gpu_test!(upload_download_round_trip, upload_download_body());
async fn upload_download_body() {
    let ctx = context().await;
    let data: Vec<f32> = (0..1234).map(|i| i as f32 * 0.5 - 7.0).collect();
    let seeded = ctx.upload(&data);
    assert!(
        !seeded.recycle(),
        "write-filled buffers never join the pool"
    );
    assert_eq!(read(&ctx, &seeded, data.len()).await, data);
    let pooled = ctx.upload_pooled(&data);
    assert!(pooled.recycle());
    assert_eq!(read(&ctx, &pooled, data.len()).await, data);
    drop(seeded);
    assert_eq!(
        ctx.pool_stats().total_pooled,
        0,
        "upload() buffers are destroyed"
    );
    drop(pooled);
    assert_eq!(ctx.pool_stats().total_pooled, 1);
}

gpu_test!(
    residual_matches_reference_on_poisoned_output,
    residual_parity_body()
);
async fn residual_parity_body() {
    let ctx = context().await;
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for n in [1usize, 3, 257, 1000, 70_001] {
        let a = rng.vec(n, -2.0, 2.0);
        let b = rng.vec(n, -2.0, 2.0);
        let (ga, gb) = (ctx.upload(&a), ctx.upload(&b));
        let out = poisoned(&ctx, &[n], || residual_forward(&ctx, &ga, &gb, n));
        let got = read(&ctx, &out, n).await;
        let want = tidepool::reference::residual_forward(&a, &b);
        assert_eq!(got, want, "n = {n}, seed {seed}");
    }
}

gpu_test!(one_scope_one_submit, one_scope_one_submit_body());
async fn one_scope_one_submit_body() {
    let ctx = context().await;
    let x = ctx.upload(&[1.0f32; 100]);
    let before = ctx.counters();
    let out = ctx.scope(|| {
        let mut acc = residual_forward(&ctx, &x, &x, 100);
        for _ in 0..9 {
            acc = residual_forward(&ctx, &acc, &x, 100);
        }
        acc
    });
    let after = ctx.counters();
    assert_eq!(after.dispatches - before.dispatches, 10);
    assert_eq!(after.submits - before.submits, 1);
    assert_eq!(read(&ctx, &out, 100).await, vec![11.0; 100]);
}

gpu_test!(
    a_scope_submitted_in_parts_computes_the_same,
    scope_in_parts_body()
);
async fn scope_in_parts_body() {
    // Every third dispatch ends a part: four submits for ten dispatches, and each
    // part's uniform slots (written just before its submit, then reused by the
    // next part) must still reach the dispatches that were recorded with them.
    let ctx = WgpuContext::with_options(tidepool::gpu::ContextOptions {
        submit_every: 3,
        ..Default::default()
    })
    .await
    .expect("context");
    let n = 37;
    let x = ctx.upload(&(0..n).map(|i| i as f32).collect::<Vec<_>>());
    let before = ctx.counters();
    let out = ctx.scope(|| {
        let mut acc = residual_forward(&ctx, &x, &x, n);
        for _ in 0..9 {
            acc = residual_forward(&ctx, &acc, &x, n);
        }
        acc
    });
    let after = ctx.counters();
    assert_eq!(after.dispatches - before.dispatches, 10);
    assert_eq!(after.submits - before.submits, 4);
    let want: Vec<f32> = (0..n).map(|i| 11.0 * i as f32).collect();
    assert_eq!(read(&ctx, &out, n).await, want);
    ctx.take_error().expect("no GPU error");
}

gpu_test!(
    parts_of_a_scope_double_from_four_dispatches,
    doubling_parts_body()
);
async fn doubling_parts_body() {
    // submit_every 16, 40 dispatches: parts of 4, 8 and 16, then the last 12 at the
    // scope's end (equal parts of 16 would submit 3 times).
    let ctx = WgpuContext::with_options(tidepool::gpu::ContextOptions {
        submit_every: 16,
        ..Default::default()
    })
    .await
    .expect("context");
    let n = 29;
    let x = ctx.upload(&(0..n).map(|i| i as f32).collect::<Vec<_>>());
    for round in 0..2 {
        let before = ctx.counters();
        let out = ctx.scope(|| {
            let mut acc = residual_forward(&ctx, &x, &x, n);
            for _ in 0..39 {
                acc = residual_forward(&ctx, &acc, &x, n);
            }
            acc
        });
        let after = ctx.counters();
        assert_eq!(after.dispatches - before.dispatches, 40);
        assert_eq!(after.submits - before.submits, 4, "round {round}");
        let want: Vec<f32> = (0..n).map(|i| 41.0 * i as f32).collect();
        assert_eq!(read(&ctx, &out, n).await, want, "round {round}");
    }
    ctx.take_error().expect("no GPU error");
}

gpu_test!(
    a_scope_in_one_submit_ignores_submit_every_and_the_next_scope_has_parts,
    one_submit_scope_body()
);
async fn one_submit_scope_body() {
    // submit_every 4: ten dispatches are parts of 4, 4 and 2 in a scope, one submit in a
    // scope_in_one_submit (with a scope nested inside it), and parts again after it.
    let ctx = WgpuContext::with_options(tidepool::gpu::ContextOptions {
        submit_every: 4,
        ..Default::default()
    })
    .await
    .expect("context");
    let n = 23;
    let x = ctx.upload(&(0..n).map(|i| i as f32).collect::<Vec<_>>());
    let ten = || {
        let mut acc = residual_forward(&ctx, &x, &x, n);
        for _ in 0..9 {
            acc = residual_forward(&ctx, &acc, &x, n);
        }
        acc
    };
    let want: Vec<f32> = (0..n).map(|i| 11.0 * i as f32).collect();
    for (whole, submits) in [(false, 3), (true, 1), (false, 3)] {
        let before = ctx.counters().submits;
        let out = if whole {
            ctx.scope_in_one_submit(|| ctx.scope(ten))
        } else {
            ctx.scope(ten)
        };
        assert_eq!(ctx.counters().submits - before, submits, "whole {whole}");
        assert_eq!(read(&ctx, &out, n).await, want, "whole {whole}");
    }
    ctx.take_error().expect("no GPU error");
}

gpu_test!(
    dispatches_are_timed_where_the_adapter_can,
    timed_dispatches_body()
);
async fn timed_dispatches_body() {
    let plain = context().await;
    assert!(plain.dispatch_times().await.is_err(), "not asked to time");
    let offered = plain
        .adapter_features()
        .contains(wgpu::Features::TIMESTAMP_QUERY);
    drop(plain);
    let made = WgpuContext::with_options(ContextOptions {
        time_dispatches: true,
        submit_every: 2,
        ..Default::default()
    })
    .await;
    let ctx = match made {
        Err(e) => {
            assert!(
                !offered,
                "refused though the adapter offers timestamp-query: {e}"
            );
            assert_eq!(e.kind(), "config");
            assert!(e.to_string().contains("timestamp-query"), "{e}");
            return;
        }
        Ok(ctx) => ctx,
    };
    assert!(offered);
    let n = 29;
    let x = ctx.upload(&vec![1.0f32; n]);
    let out = ctx.scope(|| {
        let mut acc = residual_forward(&ctx, &x, &x, n);
        for _ in 0..4 {
            acc = residual_forward(&ctx, &acc, &x, n);
        }
        acc
    });
    // Each dispatch in a pass of its own still sees the previous one's output.
    assert_eq!(read(&ctx, &out, n).await, vec![6.0; n]);
    let times = ctx.dispatch_times().await.expect("times");
    assert_eq!(times.untimed, 0);
    assert_eq!(times.dispatches.len(), 5);
    for &(name, ms) in &times.dispatches {
        assert!(name.starts_with("residual"), "{name}");
        assert!(ms.is_finite() && ms >= 0.0, "{name}: {ms} ms");
    }
    assert_eq!(times.by_kernel().len(), 1);
    assert_eq!(times.by_kernel()[0].1, 5);
    let again = ctx.dispatch_times().await.expect("times");
    assert!(
        again.dispatches.is_empty(),
        "each call starts the next count"
    );
    ctx.take_error().expect("no GPU error");
}

gpu_test!(zeroed_buffers_are_zero_even_when_recycled, zeroed_body());
async fn zeroed_body() {
    let ctx = context().await;
    let zeroed = poisoned(&ctx, &[300], || ctx.create_zeroed(300 * 4));
    assert_eq!(read(&ctx, &zeroed, 300).await, vec![0.0; 300]);
}

/// A kernel that copies `src` into `dst` (used to observe buffer contents at a
/// point in the command stream).
const COPY: Kernel = Kernel {
    name: "test_copy",
    source: "
struct Params { n: u32, a: u32, b: u32, c: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < p.n) { dst[gid.x] = src[gid.x]; }
}",
    entry: "main",
    unchecked: false,
};

fn copy_of(ctx: &WgpuContext, src: &wgpu::Buffer, n: u32) -> tidepool::PooledBuffer {
    let dst = ctx.create_pooled(n as usize * 4);
    ctx.dispatch(&COPY, &[n, 0, 0, 0], &[src, &dst], [n.div_ceil(64), 1, 1]);
    dst
}

gpu_test!(write_buffer_hazard_and_the_belt, write_buffer_hazard_body());
/// Rule 3: `queue.write_buffer` lands before every command of the next submit, even
/// commands recorded earlier. Reproduce that on a raw buffer, then show the pooled
/// upload path (a copy recorded in the encoder) is ordered even when the buffer is
/// dropped and re-acquired inside one encoder.
async fn write_buffer_hazard_body() {
    let ctx = context().await;
    let n = 64u32;
    let old = vec![1.0f32; n as usize];
    let new = vec![2.0f32; n as usize];

    // The hazard, on a raw buffer.
    let raw = ctx.upload(&old);
    let seen = ctx.scope(|| {
        let seen = copy_of(&ctx, &raw, n); // recorded while `raw` holds 1.0
        ctx.queue.write_buffer(&raw, 0, bytemuck::cast_slice(&new));
        seen
    });
    assert_eq!(
        read(&ctx, &seen, n as usize).await,
        new,
        "write_buffer overtook the earlier recorded read (the hazard PooledBuffer's docs describe)"
    );

    // The belt: same sequence through the pool, reusing the same buffer mid-encoder.
    let hits = ctx.pool_stats().hits;
    let (first, second) = ctx.scope(|| {
        let a = ctx.upload_pooled(&old);
        let first = copy_of(&ctx, &a, n);
        drop(a); // back to the pool while the encoder still reads it
        let b = ctx.upload_pooled(&new); // takes the same buffer
        let second = copy_of(&ctx, &b, n);
        (first, second)
    });
    assert!(
        ctx.pool_stats().hits > hits,
        "the second upload reused a pooled buffer"
    );
    assert_eq!(
        read(&ctx, &first, n as usize).await,
        old,
        "belt upload stayed ordered"
    );
    assert_eq!(read(&ctx, &second, n as usize).await, new);
}

gpu_test!(
    steady_uploads_and_downloads_create_nothing,
    steady_transfers_body()
);
async fn steady_transfers_body() {
    let ctx = context().await;
    let data = vec![3.0f32; 4096];
    let mut created = Vec::new();
    for _ in 0..6 {
        let x = ctx.upload_pooled(&data);
        let y = ctx.scope(|| residual_forward(&ctx, &x, &x, data.len()));
        assert_eq!(read(&ctx, &y, 4).await, vec![6.0; 4]);
        created.push(ctx.counters().buffers_created);
    }
    // After two warm-up rounds, every buffer (pooled, staging, params) is reused.
    assert_eq!(created[2], created[5], "created per round: {created:?}");
}

gpu_test!(no_pool_mode_creates_every_time, no_pool_body());
async fn no_pool_body() {
    let ctx = WgpuContext::with_options(ContextOptions {
        pooling: false,
        ..Default::default()
    })
    .await
    .expect("context");
    let before = ctx.counters();
    for _ in 0..3 {
        drop(ctx.create_pooled(1024));
    }
    let after = ctx.counters();
    assert_eq!(after.buffers_created - before.buffers_created, 3);
    assert_eq!(after.buffers_destroyed - before.buffers_destroyed, 3);
    assert_eq!(ctx.pool_stats().total_pooled, 0);
}

gpu_test!(too_large_is_a_clear_error, too_large_body());
async fn too_large_body() {
    let ctx = context().await;
    let err = ctx
        .check_fits(ctx.max_binding_size() + 4, "a test tensor")
        .expect_err("over the limit");
    let message = err.to_string();
    assert!(message.contains("a test tensor"), "{message}");
    assert!(ctx.check_fits(1024, "small").is_ok());
}

gpu_test!(policies_round_through_the_context, policies_body());
async fn policies_body() {
    use tidepool::{BufferPoolConfig, SizePolicy};
    for (policy, want) in [
        (SizePolicy::PowerOfTwo, 2048u64),
        (SizePolicy::Subdivided { subdivisions: 4 }, 1280),
        (SizePolicy::Exact, 1200),
    ] {
        let ctx = WgpuContext::with_options(ContextOptions {
            pool: BufferPoolConfig {
                policy,
                fit_ratio: 1,
                ..Default::default()
            },
            ..Default::default()
        })
        .await
        .expect("context");
        let buffer = ctx.create_pooled(1200);
        assert_eq!(buffer.size(), want, "{policy:?}");
        drop(buffer);
        let again = ctx.create_pooled(1190);
        // Exact classes only serve their own size (without a fit ratio).
        let hits = ctx.pool_stats().hits;
        assert_eq!(hits, u64::from(policy != SizePolicy::Exact), "{policy:?}");
        drop(again);
    }
    // With the default fit ratio an exact pool serves 119,000 bytes from a free 120,000,
    // and counts the 120,000 in use.
    let ctx = WgpuContext::with_options(ContextOptions {
        pool: BufferPoolConfig {
            policy: SizePolicy::Exact,
            ..Default::default()
        },
        ..Default::default()
    })
    .await
    .expect("context");
    drop(ctx.create_pooled(120_000));
    let in_use = ctx.counters().bytes_in_use;
    let again = ctx.create_pooled(119_000);
    assert_eq!(again.size(), 120_000);
    assert_eq!(ctx.pool_stats().fit_hits, 1);
    assert_eq!(ctx.counters().bytes_in_use - in_use, 120_000);
    // And it comes back under its own size.
    drop(again);
    assert_eq!(
        ctx.pool_stats()
            .buckets
            .iter()
            .find(|b| b.size == 120_000)
            .map(|b| b.count),
        Some(1)
    );
}

gpu_test!(idle_buffers_are_evicted_after_submits, idle_eviction_body());
async fn idle_eviction_body() {
    use tidepool::BufferPoolConfig;
    let ctx = WgpuContext::with_options(ContextOptions {
        pool: BufferPoolConfig {
            max_idle_ticks: Some(2),
            ..Default::default()
        },
        ..Default::default()
    })
    .await
    .expect("context");
    let x = ctx.upload(&[1.0f32; 64]);
    drop(ctx.create_pooled(4096)); // idle from now on
    for round in 0..4 {
        // Each round is one submit: one tick of the pool's clock.
        let y = residual_forward(&ctx, &x, &x, 64);
        assert_eq!(read(&ctx, &y, 1).await, vec![2.0]);
        let held_4096 = ctx.pool_stats().buckets.iter().any(|b| b.size == 4096);
        if round == 0 {
            assert!(held_4096, "still young after one tick");
        }
    }
    let s = ctx.pool_stats();
    assert!(
        !s.buckets.iter().any(|b| b.size == 4096),
        "evicted: {:?}",
        s.buckets
    );
    assert!(s.buffers_evicted >= 1 && s.bytes_evicted >= 4096);
}

gpu_test!(
    trim_and_budget_bound_what_the_pool_holds,
    trim_budget_body()
);
async fn trim_budget_body() {
    use tidepool::BufferPoolConfig;
    let ctx = WgpuContext::with_options(ContextOptions {
        pool: BufferPoolConfig {
            max_bytes: 64 * 1024,
            ..Default::default()
        },
        ..Default::default()
    })
    .await
    .expect("context");
    let held: Vec<_> = (0..6).map(|_| ctx.create_pooled(16 * 1024)).collect();
    drop(held); // 96 KiB offered, 64 KiB budget: two rejected and destroyed
    let s = ctx.pool_stats();
    assert_eq!(s.bytes_held, 64 * 1024);
    assert_eq!(s.rejected_over_budget, 2);
    assert_eq!(ctx.counters().buffers_destroyed, 2);
    assert_eq!(ctx.pool().trim(16 * 1024), 3);
    assert_eq!(ctx.pool_stats().bytes_held, 16 * 1024);
    // Still a working pool afterwards.
    let x = ctx.upload(&[1.5f32; 8]);
    let y = residual_forward(&ctx, &x, &x, 8);
    assert_eq!(read(&ctx, &y, 8).await, vec![3.0; 8]);
}

gpu_test!(
    bind_groups_are_reused_only_for_the_same_buffers,
    bind_group_cache_body()
);
/// The cache hands a dispatch the bind group of exactly its buffers, in order: the
/// same buffers again create nothing, swapped ones or a buffer made after the old one
/// was destroyed create a new group, and the sums stay right throughout.
async fn bind_group_cache_body() {
    let ctx = context().await;
    let a = ctx.upload(&[1.0f32; 16]);
    let b = ctx.upload(&[2.5f32; 16]);
    let created = || ctx.counters().bind_groups_created;
    let y = residual_forward(&ctx, &a, &b, 16);
    assert_eq!(read(&ctx, &y, 16).await, vec![3.5; 16]);
    drop(y); // its buffer comes back for the next output
    let before = created();
    let y = residual_forward(&ctx, &a, &b, 16);
    assert_eq!(created(), before, "the same buffers made a new bind group");
    assert_eq!(read(&ctx, &y, 16).await, vec![3.5; 16]);
    drop(y);
    let y = residual_forward(&ctx, &b, &a, 16);
    assert_eq!(created(), before + 1, "other buffers reused a bind group");
    assert_eq!(read(&ctx, &y, 16).await, vec![3.5; 16]);
    drop(y);
    ctx.clear_pool(); // destroys the outputs' buffers and forgets their groups
    let before = created();
    let y = residual_forward(&ctx, &a, &b, 16);
    assert_eq!(created(), before + 1, "a new buffer reused a bind group");
    assert_eq!(read(&ctx, &y, 16).await, vec![3.5; 16]);
    ctx.take_error().expect("no WebGPU error");
}

gpu_test!(slices_bind_their_own_range, slices_body());
/// A kernel bound to a range of a buffer ([`Slice`]) sees that range as its whole
/// array, and the bind group cache tells two ranges of one buffer apart: token
/// ids at byte 0 and at the device's offset alignment pick different embedding rows.
async fn slices_body() {
    use std::num::NonZeroU64;
    use tidepool::gpu::Slice;
    use tidepool::kernels::{Embedding, EmbeddingShape};
    let ctx = context().await;
    let mut rng = Rng::new(fresh_seed());
    let (v, c, t) = (7usize, 3usize, 5usize);
    let align = ctx.limits().min_storage_buffer_offset_alignment as usize / 4;
    // Two windows of t ids: the first at word 0, the second at word `align`; the
    // words between are ids that no window uses.
    let mut ids = vec![v as u32 - 1; align + t];
    let first: Vec<u32> = (0..t).map(|_| rng.below(v - 1) as u32).collect();
    let mut second: Vec<u32> = (0..t).map(|_| rng.below(v - 1) as u32).collect();
    second[0] = (first[0] + 1) % (v as u32 - 1); // the windows differ
    ids[..t].copy_from_slice(&first);
    ids[align..].copy_from_slice(&second);
    let wte: Vec<f32> = (0..v * c).map(|i| i as f32).collect();
    let (gids, gwte, gwpe) = (
        ctx.upload(&ids),
        ctx.upload(&wte),
        ctx.upload(&vec![0.0f32; t * c]),
    );
    let size = NonZeroU64::new(4 * t as u64).unwrap();
    let window = |at: usize| Slice::range(&gids, 4 * at as u64, size);
    let rows = |ids: &[u32]| -> Vec<f32> {
        ids.iter()
            .flat_map(|&k| wte[k as usize * c..(k as usize + 1) * c].to_vec())
            .collect()
    };
    let created = || ctx.counters().bind_groups_created;
    let shape = EmbeddingShape { b: 1, t, c, v };
    let out = Embedding::default().forward(&ctx, window(0), &gwte, &gwpe, shape);
    assert_eq!(read(&ctx, &out, t * c).await, rows(&first));
    drop(out); // its buffer comes back for the next output
    let before = created();
    let out = Embedding::default().forward(&ctx, window(align), &gwte, &gwpe, shape);
    assert_eq!(created(), before + 1, "another range reused a bind group");
    assert_eq!(read(&ctx, &out, t * c).await, rows(&second));
    drop(out);
    let before = created();
    let out = Embedding::default().forward(&ctx, window(0), &gwte, &gwpe, shape);
    assert_eq!(created(), before, "the same range made a new bind group");
    assert_eq!(read(&ctx, &out, t * c).await, rows(&first));
    ctx.take_error().expect("no WebGPU error");
}

gpu_test!(
    clear_trim_evict_inside_a_scope_wait_for_its_submit,
    destroys_wait_for_the_submit_body()
);
/// Buffers bound by recorded, unsubmitted dispatches go back to the pool and are then
/// let go by each of clear, trim and idle eviction, and by the pool's own `clear`,
/// inside the scope. Destroying them before the submit would make it fail ("buffer
/// destroyed"); the context must wait.
async fn destroys_wait_for_the_submit_body() {
    use tidepool::BufferPoolConfig;
    let ctx = WgpuContext::with_options(ContextOptions {
        pool: BufferPoolConfig {
            max_idle_ticks: Some(0),
            ..Default::default()
        },
        ..Default::default()
    })
    .await
    .expect("context");
    let x = ctx.upload(&[1.0f32; 64]);
    type LetGo<'a> = Box<dyn Fn(&WgpuContext) -> usize + 'a>;
    let ways: [(&str, LetGo); 4] = [
        (
            "clear_pool",
            Box::new(|c: &WgpuContext| {
                let n = c.pool_stats().total_pooled;
                c.clear_pool();
                n
            }),
        ),
        ("trim_pool", Box::new(|c: &WgpuContext| c.trim_pool(0))),
        (
            "pool().clear()",
            Box::new(|c: &WgpuContext| {
                let n = c.pool_stats().total_pooled;
                c.pool().clear();
                n
            }),
        ),
        (
            "evict_idle",
            Box::new(|c: &WgpuContext| {
                c.pool().tick();
                c.pool().tick();
                c.evict_idle()
            }),
        ),
    ];
    for (name, let_go) in ways {
        let destroyed = ctx.counters().buffers_destroyed;
        let z = ctx.scope(|| {
            let y = residual_forward(&ctx, &x, &x, 64);
            let z = residual_forward(&ctx, &y, &x, 64);
            drop(y); // back to the pool, still bound by both recorded dispatches
            assert!(let_go(&ctx) >= 1, "{name}: nothing was let go");
            assert_eq!(ctx.pool_stats().total_pooled, 0, "{name}");
            z
        });
        assert_eq!(read(&ctx, &z, 64).await, vec![3.0; 64], "{name}");
        ctx.take_error()
            .unwrap_or_else(|e| panic!("{name}: destroyed before the submit: {e}"));
        assert!(ctx.counters().buffers_destroyed > destroyed, "{name}");
    }
}

#[cfg(not(target_arch = "wasm32"))]
#[test]
fn a_panic_inside_a_scope_leaves_the_context_usable() {
    // wasm panics abort, so this one runs natively only.
    pollster::block_on(async {
        let ctx = context().await;
        let x = ctx.upload(&[2.0f32; 32]);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ctx.scope(|| {
                ctx.scope(|| {
                    let y = residual_forward(&ctx, &x, &x, 32);
                    drop(y);
                    panic!("inside two scopes");
                })
            })
        }));
        assert!(caught.is_err());
        // Depth back to 0: a dispatch outside any scope is submitted at once.
        let submits = ctx.counters().submits;
        let y = residual_forward(&ctx, &x, &x, 32);
        assert_eq!(ctx.counters().submits, submits + 1, "still inside a scope");
        assert_eq!(read(&ctx, &y, 32).await, vec![4.0; 32]);
        // A scope after the panic submits once, and its uniform slots are right.
        let before = ctx.counters().submits;
        let z = ctx.scope(|| residual_forward(&ctx, &y, &x, 32));
        assert_eq!(ctx.counters().submits, before + 1);
        assert_eq!(read(&ctx, &z, 32).await, vec![6.0; 32]);
        ctx.take_error().expect("no GPU error");

        // In parts: a panic after one part went out leaves the next scope's parts
        // starting from the first again (4 dispatches, then 8).
        let ctx = WgpuContext::with_options(ContextOptions {
            submit_every: 32,
            ..Default::default()
        })
        .await
        .expect("context");
        let x = ctx.upload(&[2.0f32; 32]);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ctx.scope(|| {
                for _ in 0..6 {
                    drop(residual_forward(&ctx, &x, &x, 32));
                }
                panic!("after a part");
            })
        }));
        assert!(caught.is_err());
        let before = ctx.counters().submits;
        let z = ctx.scope(|| {
            let mut acc = residual_forward(&ctx, &x, &x, 32);
            for _ in 0..4 {
                acc = residual_forward(&ctx, &acc, &x, 32);
            }
            acc
        });
        assert_eq!(ctx.counters().submits, before + 2, "parts of 4, then 1");
        assert_eq!(read(&ctx, &z, 32).await, vec![12.0; 32]);
        ctx.take_error().expect("no GPU error");
    });
}

/// A one-layer model small enough to train in a test on a CPU adapter.
fn small_model(dropout: f32) -> tidepool::train::TrainConfig {
    tidepool::train::TrainConfig {
        layers: 1,
        width: 32,
        heads: 2,
        context: 16,
        batch: 2,
        dropout,
        ..tidepool::train::TrainConfig::preset("tiny").unwrap()
    }
}

// The bench module is in builds with the CLI natively, and in benchmark builds of
// the wasm (feature `bench`); the dispatch timing under it runs in both suites above.
#[cfg(any(feature = "bench", all(feature = "cli", not(target_arch = "wasm32"))))]
gpu_test!(kernel_times_add_up_to_the_step, kernel_times_body());
/// `bench::kernel_times` (`tidepool bench kernels`, the wasm API's `benchKernels`):
/// a row for the whole step, then one a kernel, whose launches and milliseconds add
/// up to it; a config error naming timestamp-query where the adapter lacks it.
#[cfg(any(feature = "bench", all(feature = "cli", not(target_arch = "wasm32"))))]
async fn kernel_times_body() {
    let offered = context()
        .await
        .adapter_features()
        .contains(wgpu::Features::TIMESTAMP_QUERY);
    let rows = tidepool::bench::kernel_times(
        &small_model(0.0),
        &Default::default(),
        "tiny",
        &common::corpus(),
        1,
        2,
    )
    .await;
    let rows = match rows {
        Err(e) => {
            assert!(
                !offered,
                "refused though the adapter offers timestamp-query: {e}"
            );
            assert!(e.to_string().contains("timestamp-query"), "{e}");
            return;
        }
        Ok(rows) => rows,
    };
    let (all, kernels) = rows.split_first().expect("rows");
    assert_eq!(all.kernel, "all");
    assert!(kernels.len() > 5, "{} kernels", kernels.len());
    let launches: f64 = kernels.iter().map(|r| r.launches_per_step).sum();
    assert_eq!(launches, all.launches_per_step);
    let ms: f64 = kernels.iter().map(|r| r.ms_per_step).sum();
    assert!((ms - all.ms_per_step).abs() <= 1e-9 * all.ms_per_step.max(1.0));
    let shares: f64 = kernels.iter().map(|r| r.share).sum();
    assert!(
        (shares - 1.0).abs() < 1e-9 || all.ms_per_step == 0.0,
        "shares {shares}"
    );
    for r in &rows {
        assert!(r.ms_per_step.is_finite() && r.ms_per_step >= 0.0, "{r:?}");
        assert!(r.step_ms > 0.0, "{r:?}");
    }
    assert!(kernels.iter().any(|r| r.kernel.starts_with("matmul_")));
}

gpu_test!(
    a_steady_training_step_creates_no_buffers_and_no_bind_groups,
    steady_step_creates_nothing_body()
);
async fn steady_step_creates_nothing_body() {
    let mut trainer = tidepool::train::Trainer::new(small_model(0.1), common::corpus())
        .await
        .expect("trainer");
    let first = trainer.step().await.expect("step");
    assert!(first.bind_groups_created_step > 0 && first.pipelines_created_step > 0);
    for _ in 0..2 {
        trainer.step().await.expect("warm-up step");
    }
    for _ in 0..3 {
        let s = trainer.step().await.expect("step");
        assert_eq!(s.buffers_created_step, 0, "step {} created buffers", s.step);
        assert_eq!(
            s.bind_groups_created_step, 0,
            "step {} created bind groups",
            s.step
        );
        assert_eq!(s.pipelines_created_step, 0, "step {}", s.step);
        // One encoder for each part of the step's work (up to `submit_every`
        // dispatches a part; the last holds the rest and the copies of the loss and
        // the norm into the readback), none for the readback on its own.
        let parts = tidepool::gpu::scope_submits(s.dispatches_step, trainer.config().submit_every);
        assert_eq!(
            s.encoders_created_step, parts,
            "step {}: {} encoders for {} dispatches",
            s.step, s.encoders_created_step, s.dispatches_step
        );
    }
}

gpu_test!(
    a_steady_step_rewrites_only_the_uniforms_that_changed,
    uniform_writes_body()
);
/// The kernels' shapes are the same every step; only the optimizer's step-dependent
/// parameters (learning rate, bias corrections) change without dropout. A steady
/// step writes them and leaves the other parts' parameters alone; with dropout the
/// masks' per-step seeds are written too.
async fn uniform_writes_body() {
    for (dropout, at_most_parts) in [(0.0, false), (0.1, true)] {
        let mut trainer = tidepool::train::Trainer::new(small_model(dropout), common::corpus())
            .await
            .expect("trainer");
        let mut last = trainer.step().await.expect("step").context.uniform_writes;
        for _ in 0..3 {
            let s = trainer.step().await.expect("step");
            let writes = s.context.uniform_writes - last;
            last = s.context.uniform_writes;
            let parts =
                tidepool::gpu::scope_submits(s.dispatches_step, trainer.config().submit_every);
            assert!(
                writes >= 1,
                "dropout {dropout}: the optimizer's parameters change every step"
            );
            assert!(
                writes <= parts,
                "dropout {dropout}: {writes} writes for {parts} parts"
            );
            if !at_most_parts {
                assert!(
                    writes < parts,
                    "dropout {dropout}: {writes} writes for {parts} parts rewrote unchanged shapes"
                );
            }
        }
    }
}

//! What a pooled buffer costs against a fresh one ([`pool_latency`]).

use super::{median_p99, time_batches};
use crate::error::Result;
use crate::gpu::{grid_1d, ContextOptions, Kernel, WgpuContext};
use crate::train::now_ms;

/// Writes every element of its output: the smallest honest "use" of a buffer.
const FILL: Kernel = Kernel {
    name: "bench_fill",
    source: "
struct Params { n: u32, a: u32, b: u32, c: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i < p.n) { out[i] = i ^ p.a; }
}",
    entry: "main",
    unchecked: false,
};

#[derive(Clone, Debug, serde::Serialize)]
pub struct PoolLatencyRow {
    pub bytes: u64,
    /// `create_pooled` + drop, served from the pool: ns a cycle.
    pub pool_median_ns: f64,
    pub pool_p99_ns: f64,
    /// `device.create_buffer` + `destroy`: ns a cycle.
    pub create_median_ns: f64,
    pub create_p99_ns: f64,
    /// One dispatch writing a pooled buffer, ns (amortised over a submit of up to
    /// 16, at most 256 MiB of buffers).
    pub dispatch_pooled_ns: f64,
    /// The same with a fresh buffer each time (created, then destroyed after submit).
    pub dispatch_fresh_ns: f64,
}

/// Pool vs `create_buffer` at each size, on this backend.
pub async fn pool_latency(sizes: &[u64], batches: usize) -> Result<Vec<PoolLatencyRow>> {
    let pooled = WgpuContext::new().await?;
    let fresh = WgpuContext::with_options(ContextOptions {
        pooling: false,
        ..Default::default()
    })
    .await?;
    let mut rows = Vec::new();
    for &bytes in sizes {
        pooled.check_fits(bytes, "a benchmark buffer")?;
        drop(pooled.create_pooled(bytes as usize)); // warm the bucket
        let (pool_median_ns, pool_p99_ns) = median_p99(&mut time_batches(batches, 4096, || {
            drop(pooled.create_pooled(bytes as usize));
        }));
        // Fresh buffers: at most 2 GiB created in all per measurement (browsers free
        // destroyed memory lazily and lose the device under that much churn).
        let fresh_batches = ((2u64 << 30) / (16 * bytes)).clamp(3, batches as u64) as usize;
        let device = &pooled.device;
        let (create_median_ns, create_p99_ns) =
            median_p99(&mut time_batches(fresh_batches, 16, || {
                let buffer = device.create_buffer(&wgpu::BufferDescriptor {
                    label: None,
                    size: bytes,
                    usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                });
                buffer.destroy();
            }));
        let mut dispatch_ns = Vec::new();
        // At most 256 MiB of fresh buffers alive in one submit: a browser's GPU
        // process loses the device well before a GiB.
        let per_round = (256u64 << 20).div_ceil(bytes).clamp(1, 16) as u32;
        for ctx in [&pooled, &fresh] {
            let n = (bytes / 4) as u32;
            let one_round = || async move {
                let start = now_ms();
                let last = ctx.scope(|| {
                    let mut last = None;
                    for i in 0..per_round {
                        let out = ctx.create_pooled(bytes as usize);
                        ctx.dispatch(&FILL, &[n, i, 0, 0], &[&out], grid_1d(n, 256));
                        last = Some(out);
                    }
                    last.expect("at least one dispatch")
                });
                ctx.download::<u32>(&last, 1).await?;
                Ok::<f64, crate::Error>((now_ms() - start) * 1e6 / per_round as f64)
            };
            one_round().await?; // warm-up: pipelines, buckets, staging
            let mut samples = Vec::new();
            let rounds = ((2u64 << 30) / (per_round as u64 * bytes)).clamp(3, 20);
            for _ in 0..rounds {
                samples.push(one_round().await?);
            }
            dispatch_ns.push(median_p99(&mut samples).0);
        }
        rows.push(PoolLatencyRow {
            bytes,
            pool_median_ns,
            pool_p99_ns,
            create_median_ns,
            create_p99_ns,
            dispatch_pooled_ns: dispatch_ns[0],
            dispatch_fresh_ns: dispatch_ns[1],
        });
    }
    Ok(rows)
}

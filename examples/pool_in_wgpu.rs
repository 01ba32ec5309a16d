//! tidepool's pool under your own wgpu code: a WGSL kernel of yours and one of
//! tidepool's, on buffers that come from the pool and go back to it when dropped.
//! `cargo run --release --example pool_in_wgpu` (the README shows this file verbatim).
use tidepool::gpu::Kernel;
use tidepool::{BufferPool, WgpuContext};

// Uniforms at binding 0, buffers at 1, 2, ... in `dispatch`'s order; `name` keys the
// pipeline cache. Here `p` is [n, factor's bits, padding to 16 bytes].
const SCALE: Kernel = Kernel {
    name: "example_scale",
    source: "
        @group(0) @binding(0) var<uniform> p: vec4<u32>;
        @group(0) @binding(1) var<storage, read> x: array<f32>;
        @group(0) @binding(2) var<storage, read_write> y: array<f32>;
        @compute @workgroup_size(64)
        fn main(@builtin(global_invocation_id) id: vec3<u32>) {
            if (id.x < p.x) { y[id.x] = bitcast<f32>(p.y) * x[id.x]; }
        }",
    entry: "main",
    unchecked: false,
};

async fn run() -> tidepool::Result<()> {
    let ctx = WgpuContext::new().await?; // WGPU_BACKEND / WGPU_ADAPTER_NAME honoured
    println!("adapter: {} ({})", ctx.adapter_name(), ctx.backend());
    let data: Vec<f32> = (0..5000).map(|i| i as f32 / 5000.0 - 0.5).collect();
    let n = data.len();
    let mut created = Vec::new();
    for _ in 0..3 {
        let x = ctx.upload_pooled(&data); // a staged copy in the encoder: ordered, pooled
        let y = ctx.create_pooled(n * 4); // a recycled buffer holds garbage: write all of it
        let z = ctx.scope(|| {
            // many dispatches, one submit
            let params = [n as u32, 2.0f32.to_bits(), 0, 0];
            ctx.dispatch(&SCALE, &params, &[&x, &y], [(n as u32).div_ceil(64), 1, 1]);
            tidepool::kernels::gelu_forward(&ctx, &y, n)
        });
        for (v, d) in ctx.download::<f32>(&z, n).await?.iter().zip(&data) {
            let t = 2.0 * d;
            let gelu = 0.5 * t * (1.0 + (0.797_884_6 * (t + 0.044715 * t * t * t)).tanh());
            assert!((v - gelu).abs() < 1e-5, "gelu(2 * {d}) = {v}, not {gelu}");
        }
        drop((x, y, z)); // back to the pool, not destroyed
        let (made, stats) = (ctx.counters().buffers_created, ctx.pool_stats());
        println!(
            "{made} buffers created, pool hits {} misses {}",
            stats.hits, stats.misses
        );
        created.push(made);
    }
    assert!(
        created.windows(2).all(|w| w[0] == w[1]),
        "later passes reuse the pool's buffers"
    );
    assert_eq!(BufferPool::allocation_size(5000), 8192); // size classes: powers of two
    Ok(())
}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    if let Err(e) = pollster::block_on(run()) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

// In the browser the same code is awaited, never blocked on.
#[cfg(target_arch = "wasm32")]
fn main() {
    wasm_bindgen_futures::spawn_local(async {
        if let Err(e) = run().await {
            web_sys::console::error_1(&e.to_string().into());
        }
    });
}

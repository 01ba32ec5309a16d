//! Host time a dispatch costs: records 2000 small dispatches in one scope and
//! reports microseconds a dispatch for recording, and for recording + submit + wait,
//! with the allocation trace off and on (each dispatch then records a birth and a
//! death).
//! `cargo bench --bench dispatch_overhead`

#[cfg(not(target_arch = "wasm32"))]
use tidepool::kernels::residual_forward;
#[cfg(not(target_arch = "wasm32"))]
use tidepool::train::now_ms;
#[cfg(not(target_arch = "wasm32"))]
use tidepool::WgpuContext;

// Native only (pollster); wasm32 builds an empty main.
#[cfg(target_arch = "wasm32")]
fn main() {}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    pollster::block_on(async {
        let ctx = WgpuContext::new().await.expect("a GPU context");
        let n = 256;
        let x = ctx.upload(&vec![1.0f32; n]);
        let dispatches = 2000;
        for traced in [false, true, false, true] {
            let (mut record, mut total) = (f64::MAX, f64::MAX);
            let mut events = 0;
            for _ in 0..7 {
                let trace = traced.then(|| ctx.start_trace());
                let start = now_ms();
                let mut recorded = 0.0;
                let y = ctx.scope(|| {
                    let mut acc = residual_forward(&ctx, &x, &x, n);
                    for _ in 1..dispatches {
                        acc = residual_forward(&ctx, &acc, &x, n);
                    }
                    recorded = now_ms() - start;
                    acc
                });
                let _ = ctx.download::<f32>(&y, 1).await.expect("download");
                if let Some(start) = trace {
                    events = ctx.finish_trace(start, 0, "").events.len();
                }
                record = record.min(recorded);
                total = total.min(now_ms() - start);
            }
            let per = |ms: f64| ms * 1e3 / dispatches as f64;
            println!(
                "{}",
                serde_json::json!({
                    "adapter": ctx.adapter_name(),
                    "traced": traced,
                    "trace_events": events,
                    "dispatches": dispatches,
                    "us_per_dispatch_recording": per(record),
                    "us_per_dispatch_with_submit_and_wait": per(total),
                    "bind_groups_created": ctx.counters().bind_groups_created,
                })
            );
        }
    });
}

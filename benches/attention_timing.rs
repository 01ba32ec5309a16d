//! The attention kernels' first run (compile included) and their warm time, for one
//! tuning and head size: what a CPU adapter's shader compiler makes of them.
//! `MESA_SHADER_CACHE_DISABLE=true cargo bench --bench attention_timing --
//! cpu 128 [heads] [t] [reps]`: tuning `cpu` or `gpu`, width 128 (the head size is
//! width / heads; heads default 1), t positions (default 256, batch 2), reps warm
//! forward + backward pairs (default 5).

#[cfg(not(target_arch = "wasm32"))]
use tidepool::kernels::{Attention, AttentionSaved, AttentionShape, Target};

// Native only (pollster); wasm32 builds an empty main.
#[cfg(target_arch = "wasm32")]
fn main() {}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    // `cargo bench` adds `--bench`
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let arg = |i: usize, default: usize| {
        args.get(i).map_or(default, |s| {
            s.parse()
                .unwrap_or_else(|_| panic!("argument {} must be a number, not {s:?}", i + 1))
        })
    };
    let tuning = args.first().map_or("cpu", String::as_str);
    let target =
        Target::parse(tuning).unwrap_or_else(|| panic!("the tuning is cpu or gpu, not {tuning:?}"));
    let (c, nh, t, reps) = (arg(1, 128), arg(2, 1), arg(3, 256), arg(4, 5));
    assert!(
        nh > 0 && c % nh == 0 && c / nh <= 128,
        "width / heads is the head size, at most 128"
    );
    let b = 2;
    let ms = |since: std::time::Instant| since.elapsed().as_secs_f64() * 1e3;
    pollster::block_on(async {
        let ctx = tidepool::WgpuContext::new().await.expect("a GPU context");
        let qkv = ctx.upload(&vec![0.1f32; b * t * 3 * c]);
        let dout = ctx.upload(&vec![0.1f32; b * t * c]);
        let shape = AttentionShape { b, t, c, heads: nh };
        let op = Attention {
            target: Some(target),
            ..Default::default()
        };
        let pair = || async {
            let (out, lse) = op.forward(&ctx, &qkv, shape);
            let saved = AttentionSaved {
                qkv: &qkv,
                out: &out,
                lse: &lse,
            };
            let d = op.backward(&ctx, &dout, saved, shape);
            ctx.download::<f32>(&d, 1).await.expect("download");
        };
        let start = std::time::Instant::now();
        pair().await;
        let first = ms(start);
        let start = std::time::Instant::now();
        for _ in 0..reps {
            pair().await;
        }
        let warm = ms(start) / reps.max(1) as f64;
        println!(
            "{} ({}), {} tuning, b {b} t {t} width {c} heads {nh} (hs {}): first forward + backward {first:.0} ms, then {warm:.1} ms",
            ctx.adapter_name(),
            ctx.backend(),
            target.name(),
            c / nh
        );
    });
}

//! GFLOP/s of the matmul kernels (forward `A·Bᵀ`, `dinp = A·B`, `dweight = Aᵀ·B`) in
//! every variant (`MatmulVariant`: the GPU tiles, split-K, the CPU-adapter kernel, and
//! where the adapter has shader-f16 the f16 cores of `--precision f16`: `coop` on
//! tensor cores where it has cooperative matrices, `f16` otherwise) on
//! square sizes and on the GPT layer shapes this crate trains, plus causal attention
//! forward and backward with each set of kernels (the GPU tuning's `paired` and
//! `tiled`, and on CPU adapters `cpu`). The `auto` column marks the variant the
//! launchers pick on this adapter for that shape, the `class` column its class
//! (`ShapeClass`: the key of the GPU's choice table, `GPU_CHOICE`).
//!
//! `cargo bench --bench matmul_bench -- [--json] [--quick] [--only OP] [--variant NAME] [--budget-ms MS]`
//!
//! Each case warms up (pipeline compile, pool fill), then records `reps` launches in
//! one scope (one submit) and waits for them with a 4-byte download; the time per
//! launch is the wall time over `reps`. `--quick` keeps sizes small enough for a CPU
//! adapter (lavapipe) and adds the `tiny` preset's layer shapes; `--json` adds one
//! JSON object a line; `--only OP` runs the cases whose op name contains OP;
//! `--variant NAMES` only those matmul variants, in that order, comma-separated, repeats
//! allowed (tiled, splitk, narrow, cpu16, cpu32, f16, f16-splitk, coop, coop-splitk,
//! coop2, coop2-splitk, coop3, coop3-splitk); `--no-squares` only the GPT shapes;
//! `--budget-ms` the time a batch of launches aims at (default 500, quick 300). The f16 variants run on a second context made with precision f16 (the `auto`
//! column then marks that context's choice), the weight held as a model holds it: a
//! `ParamArena`, whose f16 copy the cores that can read it read. A variant the device cannot run (its
//! workgroup memory) is left out with a line saying why.
//!
//! Figures: BENCHMARKS.md (Matmul).

#[cfg(target_arch = "wasm32")]
fn main() {}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    pollster::block_on(bench::run());
}

#[cfg(not(target_arch = "wasm32"))]
mod bench {
    use std::time::{Duration, Instant};

    use tidepool::config::Precision;
    use tidepool::kernels::{
        Attention, AttentionSaved, AttentionShape, Fusion, GpuAttention, Layout, Linear, Matmul,
        MatmulShape, MatmulVariant, ParamArena, ShapeClass, Target, GPU_ATTENTION,
        GPU_ATTENTION_BACKWARD,
    };
    use tidepool::rng::Rng;
    use tidepool::{ContextOptions, PooledBuffer, WgpuContext};

    struct Args {
        json: bool,
        quick: bool,
        only: String,
        variant: String,
        no_squares: bool,
        budget_ms: Option<u64>,
    }

    fn args() -> Args {
        let mut a = Args {
            json: false,
            quick: false,
            only: String::new(),
            variant: String::new(),
            no_squares: false,
            budget_ms: None,
        };
        let mut it = std::env::args().skip(1);
        while let Some(arg) = it.next() {
            match arg.as_str() {
                "--json" => a.json = true,
                "--quick" => a.quick = true,
                "--only" => a.only = it.next().unwrap_or_default(),
                "--variant" => a.variant = it.next().unwrap_or_default(),
                "--no-squares" => a.no_squares = true,
                "--budget-ms" => {
                    let ms = it.next().and_then(|v| v.parse().ok()).filter(|&ms| ms > 0);
                    let Some(ms) = ms else {
                        eprintln!("--budget-ms takes a whole number of milliseconds, 1 or more");
                        std::process::exit(2);
                    };
                    a.budget_ms = Some(ms);
                }
                "--bench" => {} // `cargo bench` adds it
                "-h" | "--help" => {
                    println!("matmul_bench [--json] [--quick] [--only OP] [--variant NAMES] [--no-squares] [--budget-ms MS]");
                    std::process::exit(0);
                }
                other => {
                    eprintln!("unknown argument {other:?} (try --help)");
                    std::process::exit(2);
                }
            }
        }
        a
    }

    /// Seconds a launch takes: `launch` runs `reps` times in one scope, then one
    /// small download waits for the GPU.
    async fn time(ctx: &WgpuContext, budget: Duration, launch: &dyn Fn() -> PooledBuffer) -> f64 {
        let batch = |reps: usize| async move {
            let start = Instant::now();
            let last = ctx.scope(|| {
                let mut last = launch();
                for _ in 1..reps {
                    last = launch();
                }
                last
            });
            ctx.download::<f32>(&last, 1).await.expect("download");
            start.elapsed().as_secs_f64()
        };
        batch(1).await; // compile the pipelines, fill the pool
        let once = batch(1).await;
        let reps = ((budget.as_secs_f64() / once) as usize).clamp(3, 200);
        // The better of two batches: the other may have shared the GPU or CPU.
        let a = batch(reps).await / reps as f64;
        let b = batch(reps).await / reps as f64;
        a.min(b)
    }

    /// An op's name, its layout (which, with the shape, the launchers choose a
    /// variant by), and one launch.
    type Case<'a> = (&'static str, Layout, &'a dyn Fn() -> PooledBuffer);

    struct Row {
        op: &'static str,
        /// Matmul variant (attention: its kernels) and whether the launchers pick it
        /// here.
        variant: &'static str,
        auto: bool,
        /// The class of the product's shape ("" for attention).
        class: &'static str,
        m: usize,
        k: usize,
        n: usize,
        secs: f64,
        flops: f64,
    }

    pub async fn run() {
        let args = args();
        let ctx = WgpuContext::new().await.expect("a GPU adapter");
        let adapter = ctx.adapter_name().to_string();
        let backend = ctx.backend();
        println!("adapter: {adapter} ({backend})");
        let default_ms = if args.quick { 300 } else { 500 };
        // Each row as soon as it is measured (with --json also as a JSON line), so that
        // a run cut short by a time limit keeps what it measured.
        let report = |r: &Row| {
            print_row(r);
            if args.json {
                let line = serde_json::json!({
                    "op": r.op, "variant": r.variant, "auto": r.auto, "class": r.class,
                    "m": r.m, "k": r.k, "n": r.n,
                    "ms": r.secs * 1e3, "gflops": r.flops / r.secs / 1e9,
                    "adapter": adapter, "backend": backend,
                });
                println!("{line}");
            }
        };
        let budget = Duration::from_millis(args.budget_ms.unwrap_or(default_ms));
        let mut rng = Rng::new(1);

        let squares: &[usize] = if args.no_squares {
            &[]
        } else if args.quick {
            &[256]
        } else {
            &[512, 1024, 2048, 4096]
        };
        // The shakespeare preset's layer GEMMs (k, n): qkv, attention projection, MLP
        // up and down, logits; 64 x 256 tokens (quick: 512).
        let gpt_rows = if args.quick { 512 } else { 16384 };
        let gpt = [(384, 1152), (384, 384), (384, 1536), (1536, 384), (384, 65)];
        // The tiny preset's (8 x 64 tokens, width 64, a vocabulary of about 100).
        let tiny = [(64, 192), (64, 64), (64, 256), (256, 64), (64, 97)];
        let mut shapes: Vec<(usize, usize, usize)> = squares
            .iter()
            .map(|&s| (s, s, s))
            .chain(gpt.iter().map(|&(k, n)| (gpt_rows, k, n)))
            .collect();
        if args.quick {
            shapes.extend(tiny.iter().map(|&(k, n)| (512, k, n)));
        }
        // Every variant of `all`, or those named, in the order named, repeats kept: a
        // list like `tiled,narrow,tiled,narrow` takes turns, so neither is always the
        // first measured after a shape's set-up (short kernels are then slower: the
        // GPU's clock is still rising).
        let named = |all: Vec<MatmulVariant>| -> Vec<MatmulVariant> {
            if args.variant.is_empty() {
                return all;
            }
            let by_name = |n: &str| all.iter().copied().find(|v| v.name() == n);
            args.variant.split(',').filter_map(by_name).collect()
        };
        let variants = named(runnable(&ctx, &MatmulVariant::ALL));
        // The f16 cores need a context made for them (shader-f16, cooperative matrices).
        let options = ContextOptions {
            precision: Precision::F16,
            ..Default::default()
        };
        let ctx16 = match WgpuContext::with_options(options).await {
            Ok(c) => Some(c),
            Err(e) => {
                println!("no f16 variants: {e}");
                None
            }
        };
        let variants16: Vec<MatmulVariant> = match &ctx16 {
            Some(c) => named(runnable(c, &MatmulVariant::F16_ALL)),
            None => Vec::new(),
        };
        let mut runs: Vec<(&WgpuContext, &[MatmulVariant])> = vec![(&ctx, &variants)];
        if let Some(c) = &ctx16 {
            runs.push((c, &variants16));
        }

        println!(
            "{:<18} {:>12} {:>4} {:>11} {:>6} {:>6} {:>6} {:>10} {:>10}",
            "op", "variant", "auto", "class", "m", "k", "n", "ms", "GFLOP/s"
        );
        let matmuls = "matmul_forward matmul_dinp matmul_dweight";
        let shapes = if matmuls.contains(&args.only) {
            shapes
        } else {
            Vec::new()
        };
        for &(m, k, n) in &shapes {
            // Forward out[m, n] = inp[m, k] · weight[n, k]ᵀ; backward from dout[m, n].
            let (inp, weight) = (rng.vec(m * k, -1.0, 1.0), rng.vec(n * k, -1.0, 1.0));
            let dout = rng.vec(m * n, -1.0, 1.0);
            let flops = 2.0 * m as f64 * k as f64 * n as f64;
            for &(ctx, variants) in &runs {
                let (inp, dout) = (ctx.upload(&inp), ctx.upload(&dout));
                // The weight as a model holds it: a parameter, with its f16 copy where
                // the context's f16 products read one (as the step does).
                let mut params = ParamArena::upload(ctx, std::slice::from_ref(&weight))
                    .expect("a weight within the device's binding size");
                if tidepool::kernels::matmul::reads_f16_weights(ctx) {
                    params = params.with_f16_copy(ctx);
                }
                let weight = params.tensor(0);
                let shape = MatmulShape { rows: m, k, n };
                let x = Linear {
                    inp: &inp,
                    weight,
                    bias: None,
                    weight_f16: params.f16_weights(ctx).and_then(|h| h.of(weight)),
                };
                for &v in variants {
                    let op = Matmul {
                        variant: Some(v),
                        fusion: Fusion::default(),
                    };
                    // Each product's output shape and reduction decide the launchers' choice.
                    let cases: [Case; 3] = [
                        ("matmul_forward", Layout::Forward, &|| {
                            op.forward(ctx, x, shape)
                        }),
                        ("matmul_dinp", Layout::Dinp, &|| {
                            op.dinp(ctx, &dout, x, shape)
                        }),
                        ("matmul_dweight", Layout::Dweight, &|| {
                            op.weight_grads(ctx, &dout, x, shape).0
                        }),
                    ];
                    for (op, layout, launch) in cases {
                        let (out_m, out_n, red) = layout.gemm(shape);
                        if !op.contains(&args.only) {
                            continue;
                        }
                        let secs = time(ctx, budget, launch).await;
                        let row = Row {
                            op,
                            variant: v.name(),
                            auto: MatmulVariant::choose(ctx, layout, out_m, out_n, red) == v,
                            class: ShapeClass::of(layout, out_m, out_n, red).name(),
                            m,
                            k,
                            n,
                            secs,
                            flops,
                        };
                        report(&row);
                    }
                }
            }
        }

        // GPT-2 small attention: b 64, t 256, c 384, 6 heads (quick: b 4).
        let (b, t, c, nh) = (if args.quick { 4 } else { 64 }, 256, 384, 6);
        let (qkv_host, dout_host) = (
            rng.vec(b * t * 3 * c, -2.0, 2.0),
            rng.vec(b * t * c, -1.0, 1.0),
        );
        let shape = AttentionShape { b, t, c, heads: nh };
        let hs = c / nh;
        // Each set of kernels this adapter runs, and which of them the launchers pick.
        let gpu_tuning = ctx.kernel_target() == Target::Gpu;
        let tiled_runs = Attention::tiled_runs(&ctx, hs);
        // What the launchers pick for a pass whose default is `default`.
        let picked = |default| {
            if default == GpuAttention::Tiled && tiled_runs {
                GpuAttention::Tiled
            } else {
                GpuAttention::Paired
            }
        };
        let gpu_kernels = |kernels| Attention {
            target: Some(Target::Gpu),
            gpu_kernels: Some(kernels),
            ..Default::default()
        };
        // Each set with whether the forward and the backward pick it.
        let auto = |kernels| {
            [GPU_ATTENTION, GPU_ATTENTION_BACKWARD].map(|d| gpu_tuning && picked(d) == kernels)
        };
        let mut attentions = vec![(
            "paired",
            gpu_kernels(GpuAttention::Paired),
            auto(GpuAttention::Paired),
            &ctx,
        )];
        if tiled_runs {
            attentions.push((
                "tiled",
                gpu_kernels(GpuAttention::Tiled),
                auto(GpuAttention::Tiled),
                &ctx,
            ));
        }
        if !gpu_tuning {
            let cpu = Attention {
                target: Some(Target::Cpu),
                ..Default::default()
            };
            attentions.push(("cpu", cpu, [true; 2], &ctx));
        }
        // The tensor-core kernels, on the f16 context, where it runs them (`auto`:
        // what `--precision f16` picks where ContextOptions::f16_attention is on, as
        // by default).
        if let Some(c) = &ctx16 {
            match Attention::coop_runs(c, shape) {
                Ok(()) => attentions.push((
                    "coop",
                    gpu_kernels(GpuAttention::Coop),
                    [c.f16_attention(); 2],
                    c,
                )),
                Err(why) => println!("no coop attention: {why}"),
            }
        }
        // Causal: t(t+1)/2 scores a head; forward 2 products of hs each, the backward
        // 5 (recomputed scores, dp, dq, dk, dv).
        let pairs = (b * nh * t * (t + 1) / 2) as f64;
        for (name, attention, auto, ctx) in attentions {
            let (qkv, dout) = (ctx.upload(&qkv_host), ctx.upload(&dout_host));
            let (out, lse) = attention.forward(ctx, &qkv, shape);
            let saved = AttentionSaved {
                qkv: &qkv,
                out: &out,
                lse: &lse,
            };
            let fwd = || attention.forward(ctx, &qkv, shape).0;
            let bwd = || attention.backward(ctx, &dout, saved, shape);
            let cases: [(&'static str, &dyn Fn() -> PooledBuffer, f64); 2] = [
                ("attention_forward", &fwd, 4.0 * pairs * hs as f64),
                ("attention_backward", &bwd, 10.0 * pairs * hs as f64),
            ];
            for ((op, launch, flops), auto) in cases.into_iter().zip(auto) {
                if !op.contains(&args.only) {
                    continue;
                }
                let secs = time(ctx, budget, launch).await;
                // m, k, n: batch x heads, t, head size.
                let row = Row {
                    op,
                    variant: name,
                    auto,
                    class: "",
                    m: b * nh,
                    k: t,
                    n: hs,
                    secs,
                    flops,
                };
                report(&row);
            }
        }

        ctx.take_error().expect("no GPU errors");
        if let Some(c) = &ctx16 {
            c.take_error().expect("no GPU errors (f16 context)");
        }
    }

    /// The variants of `all` that `ctx` runs, saying why of each it does not.
    fn runnable(ctx: &WgpuContext, all: &[MatmulVariant]) -> Vec<MatmulVariant> {
        let runs = |v: &&MatmulVariant| match v.runs_on(ctx) {
            Ok(()) => true,
            Err(why) => {
                println!("no {} variant: {why}", v.name());
                false
            }
        };
        all.iter().filter(runs).copied().collect()
    }

    fn print_row(r: &Row) {
        println!(
            "{:<18} {:>12} {:>4} {:>11} {:>6} {:>6} {:>6} {:>10.3} {:>10.1}",
            r.op,
            r.variant,
            if r.auto { "*" } else { "" },
            r.class,
            r.m,
            r.k,
            r.n,
            r.secs * 1e3,
            r.flops / r.secs / 1e9
        );
    }
}

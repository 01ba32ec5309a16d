//! The native command line: `tidepool train`, `tidepool bench`, `tidepool info`.

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use tidepool::data::Corpus;
use tidepool::pool::SizePolicy;
use tidepool::train::{now_ms, TrainConfig, Trainer};
use tidepool::{fmt_bytes, WgpuContext};

#[path = "cli_trace.rs"]
mod cli_trace;

#[derive(Parser)]
#[command(
    name = "tidepool",
    version,
    about = "Train a small GPT on the GPU through one pool of reusable buffers"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Train a GPT and report loss, speed and what the pool saved.
    Train(TrainArgs),
    /// Print the adapter wgpu picks (WGPU_BACKEND / WGPU_ADAPTER_NAME choose).
    Info,
    /// Measure the pool: `pool` (latency against create_buffer), `step` (ms a step
    /// with and without it), `policies` (memory each size policy reserves).
    Bench(BenchArgs),
    /// Work with allocation traces (`tidepool train --trace FILE` writes one).
    Trace(cli_trace::TraceCommand),
}

#[derive(clap::Args)]
struct BenchArgs {
    /// pool, step or policies.
    which: String,
    /// Presets to train (step, policies), comma-separated.
    #[arg(long, default_value = "tiny")]
    presets: String,
    /// Timed steps after warm-up (step, policies).
    #[arg(long, default_value_t = 10)]
    steps: u32,
    #[arg(long, default_value_t = 3)]
    warmup: u32,
    /// Timed batches of 16 operations (pool).
    #[arg(long, default_value_t = 200)]
    batches: usize,
    /// Any UTF-8 text file (default: the built-in corpus).
    #[arg(long)]
    corpus: Option<std::path::PathBuf>,
    /// One JSON object a line instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct TrainArgs {
    #[command(flatten)]
    trace: cli_trace::TraceArgs,
    /// Model and training preset: tiny, small or shakespeare.
    #[arg(long, default_value = "tiny")]
    preset: String,
    /// Any UTF-8 text file (default: tidepool's own sources, built in).
    #[arg(long)]
    corpus: Option<std::path::PathBuf>,
    /// Training steps to run (default: the preset's schedule length).
    #[arg(long)]
    steps: Option<u32>,
    #[arg(long)]
    layers: Option<usize>,
    #[arg(long)]
    heads: Option<usize>,
    #[arg(long)]
    width: Option<usize>,
    #[arg(long)]
    context: Option<usize>,
    #[arg(long)]
    batch: Option<usize>,
    #[arg(long)]
    lr: Option<f32>,
    /// Dropout probability during training (shakespeare preset: 0.2).
    #[arg(long)]
    dropout: Option<f32>,
    #[arg(long)]
    seed: Option<u64>,
    /// Evaluate the held-out loss every N steps (0: only at the end).
    #[arg(long, default_value_t = 0)]
    eval_every: u32,
    /// Create every buffer fresh and destroy it after the step, for comparison.
    #[arg(long)]
    no_pool: bool,
    /// Size classes: pow2, pow2/N (N a power of two) or exact (default: pow2/8).
    #[arg(long)]
    policy: Option<String>,
    /// One JSON object a line, a line a step, and a last line with "final": true.
    #[arg(long)]
    json: bool,
    /// Print this many sampled characters at the end.
    #[arg(long, default_value_t = 0)]
    sample: usize,
}

impl TrainArgs {
    fn config(&self) -> Result<TrainConfig, tidepool::Error> {
        let mut cfg = TrainConfig::preset(&self.preset)?;
        let set = |slot: &mut usize, value: Option<usize>| {
            if let Some(v) = value {
                *slot = v;
            }
        };
        set(&mut cfg.layers, self.layers);
        set(&mut cfg.heads, self.heads);
        set(&mut cfg.width, self.width);
        set(&mut cfg.context, self.context);
        set(&mut cfg.batch, self.batch);
        if let Some(lr) = self.lr {
            cfg.lr = lr;
        }
        if let Some(dropout) = self.dropout {
            cfg.dropout = dropout;
        }
        if let Some(seed) = self.seed {
            cfg.seed = seed;
        }
        if let Some(steps) = self.steps {
            cfg.steps = steps;
        }
        cfg.pool = !self.no_pool;
        if let Some(policy) = &self.policy {
            cfg.policy = SizePolicy::parse(policy).map_err(tidepool::Error::Config)?;
        }
        Ok(cfg)
    }

    fn corpus(&self) -> Result<Corpus, tidepool::Error> {
        load_corpus(self.corpus.as_deref())
    }
}

fn load_corpus(path: Option<&std::path::Path>) -> Result<Corpus, tidepool::Error> {
    match path {
        None => Ok(Corpus::builtin()),
        Some(path) => {
            let name = path.display().to_string();
            let bytes = std::fs::read(path)
                .map_err(|e| tidepool::Error::Data(format!("cannot read {name}: {e}")))?;
            Corpus::from_bytes(&name, &bytes)
        }
    }
}

/// Prints rows as JSON lines, or as an aligned table under `header`.
fn print_rows<T: serde::Serialize>(
    rows: &[T],
    json: bool,
    header: &[&str],
    cells: impl Fn(&T) -> Vec<String>,
) {
    if json {
        for row in rows {
            println!("{}", serde_json::to_string(row).expect("rows serialize"));
        }
        return;
    }
    let body: Vec<Vec<String>> = rows.iter().map(&cells).collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            body.iter()
                .map(|r| r[i].len())
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:>w$}"))
            .collect();
        println!("| {} |", padded.join(" | "));
    };
    line(header.iter().map(|h| h.to_string()).collect());
    println!(
        "|{}|",
        widths
            .iter()
            .map(|w| format!("{}:", "-".repeat(w + 1)))
            .collect::<Vec<_>>()
            .join("|")
    );
    for row in body {
        line(row);
    }
}

async fn bench(args: BenchArgs) -> Result<(), tidepool::Error> {
    use tidepool::bench;
    let ctx = WgpuContext::new().await?;
    let adapter = format!("{} ({})", ctx.adapter_name(), ctx.backend());
    drop(ctx);
    if !args.json {
        println!("adapter: {adapter}");
    } else {
        println!(
            "{}",
            serde_json::json!({ "adapter": adapter, "bench": args.which })
        );
    }
    let corpus = load_corpus(args.corpus.as_deref())?;
    let presets: Vec<&str> = args.presets.split(',').collect();
    match args.which.as_str() {
        "pool" => {
            let sizes = [256, 64 << 10, 4 << 20, 64 << 20];
            let rows = bench::pool_latency(&sizes, args.batches).await?;
            print_rows(
                &rows,
                args.json,
                &[
                    "size",
                    "pool median ns",
                    "pool p99 ns",
                    "create+destroy median ns",
                    "create p99 ns",
                    "ratio",
                    "dispatch pooled us",
                    "dispatch fresh us",
                ],
                |r| {
                    vec![
                        fmt_bytes(r.bytes),
                        format!("{:.0}", r.pool_median_ns),
                        format!("{:.0}", r.pool_p99_ns),
                        format!("{:.0}", r.create_median_ns),
                        format!("{:.0}", r.create_p99_ns),
                        format!("{:.1}x", r.create_median_ns / r.pool_median_ns),
                        format!("{:.1}", r.dispatch_pooled_ns / 1e3),
                        format!("{:.1}", r.dispatch_fresh_ns / 1e3),
                    ]
                },
            );
        }
        "step" => {
            for preset in presets {
                let cfg = TrainConfig::preset(preset)?;
                let rows =
                    bench::step_variants(&cfg, preset, &corpus, args.warmup, args.steps).await?;
                print_rows(
                    &rows,
                    args.json,
                    &[
                        "preset",
                        "variant",
                        "median ms/step",
                        "tokens/s",
                        "buffers created/step",
                        "vs pool",
                    ],
                    |r| {
                        vec![
                            r.preset.clone(),
                            r.variant.clone(),
                            format!("{:.2}", r.median_ms),
                            format!("{:.0}", r.tokens_per_s),
                            format!("{:.1}", r.buffers_created_per_step),
                            format!("{:.2}x", r.median_ms / rows[0].median_ms),
                        ]
                    },
                );
            }
        }
        "policies" => {
            for preset in presets {
                let cfg = TrainConfig::preset(preset)?;
                let rows = bench::policies(&cfg, preset, &corpus, args.warmup, args.steps).await?;
                print_rows(
                    &rows,
                    args.json,
                    &[
                        "preset",
                        "policy",
                        "peak reserved",
                        "peak requested",
                        "ratio",
                        "hit rate",
                        "created after warm-up",
                    ],
                    |r| {
                        vec![
                            r.preset.clone(),
                            r.policy.clone(),
                            fmt_bytes(r.peak_bytes_reserved),
                            fmt_bytes(r.peak_bytes_requested),
                            format!("{:.3}", r.ratio),
                            format!("{:.4}", r.hit_rate),
                            r.buffers_created_after_warmup.to_string(),
                        ]
                    },
                );
            }
        }
        other => {
            return Err(tidepool::Error::Config(format!(
                "unknown benchmark {other:?}: choose pool, step or policies"
            )))
        }
    }
    Ok(())
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Train(args) => pollster::block_on(train(args)),
        Command::Info => pollster::block_on(info()),
        Command::Bench(args) => pollster::block_on(bench(args)),
        Command::Trace(args) => cli_trace::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn info() -> Result<(), tidepool::Error> {
    let ctx = WgpuContext::new().await?;
    let limits = ctx.limits();
    println!("adapter: {}", ctx.adapter_name());
    println!("backend: {}", ctx.backend());
    println!(
        "largest storage binding: {}",
        fmt_bytes(ctx.max_binding_size())
    );
    println!(
        "storage buffers per stage: {}",
        limits.max_storage_buffers_per_shader_stage
    );
    Ok(())
}

async fn train(mut args: TrainArgs) -> Result<(), tidepool::Error> {
    let cfg = args.config()?;
    let corpus = args.corpus()?;
    let steps = cfg.steps;
    let mut trainer = Trainer::new(cfg, corpus).await?;
    let (m, c) = (trainer.model().clone(), trainer.config().clone());
    if !args.json {
        eprintln!(
            "{} on {} ({}): {} layers, {} heads, width {}, context {}, batch {}, {} parameters; corpus {} ({} tokens, vocab {}); pool {} ({})",
            args.preset,
            trainer.context().adapter_name(),
            trainer.context().backend(),
            m.layers, m.heads, m.width, m.context, c.batch, m.num_params(),
            trainer.corpus().name, trainer.corpus().tokens(), m.vocab,
            if c.pool { "on" } else { "off" },
            c.policy.label(),
        );
    }
    let bar = if args.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(steps as u64).with_style(
            ProgressStyle::with_template(
                "{bar:30} {pos}/{len} {elapsed_precise} eta {eta} | {msg}",
            )
            .expect("valid template"),
        )
    };
    let start = now_ms();
    let mut out = std::io::stdout().lock();
    let mut tracing = std::mem::take(&mut args.trace).start();
    for _ in 0..steps {
        let s = tracing.step(&mut trainer).await?;
        if args.eval_every > 0 && s.step % args.eval_every == 0 {
            trainer.evaluate().await?;
        }
        let s = trainer.stats().clone();
        if args.json {
            let line = serde_json::to_string(&s).expect("stats serialize");
            writeln!(out, "{line}").ok();
        } else {
            bar.set_message(format!(
                "loss {:.4} | {:.0} tok/s | hit rate {:.1}% | created {} (+{}) | held {}",
                s.loss,
                s.tokens_per_s,
                s.hit_rate * 100.0,
                s.buffers_created,
                s.buffers_created_step,
                fmt_bytes(s.bytes_held)
            ));
            bar.inc(1);
        }
    }
    bar.finish();
    tracing.write()?;
    let seconds = (now_ms() - start) / 1e3;
    let val_loss = trainer.evaluate().await?;
    let s = trainer.stats().clone();
    let tokens = steps as f64 * (c.batch * c.context) as f64;
    let final_line = serde_json::json!({
        "final": true,
        "steps": steps,
        "loss": s.loss,
        "val_loss": val_loss,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "hit_rate": s.hit_rate,
        "buffers_created": s.buffers_created,
        "peak_bytes_held": s.peak_bytes_held,
        "peak_bytes_in_use": s.peak_bytes_in_use,
        "peak_bytes_requested": s.peak_bytes_requested,
        "adapter": trainer.context().adapter_name(),
        "backend": trainer.context().backend(),
        "preset": args.preset,
        "pool": c.pool,
        "policy": c.policy.label(),
    });
    if args.json {
        writeln!(out, "{final_line}").ok();
    } else {
        println!(
            "done: {steps} steps in {seconds:.1} s ({:.0} tokens/s); train loss {:.4}, held-out loss {val_loss:.4}; pool hit rate {:.2}%, {} buffers created, peak held {}",
            tokens / seconds,
            s.loss,
            s.hit_rate * 100.0,
            s.buffers_created,
            fmt_bytes(s.peak_bytes_held)
        );
    }
    if args.sample > 0 {
        let text = trainer.sample("\n", args.sample, 0.8, 20).await?;
        println!("--- sample ---\n{text}");
    }
    Ok(())
}

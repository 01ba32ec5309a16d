//! The native command line: `tidepool train`, `tidepool bench`, `tidepool info`.

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use tidepool::config::Overrides;
use tidepool::data::Corpus;
use tidepool::train::{now_ms, StepStats, StepsInFlight, TrainConfig, Trainer};
use tidepool::{fmt_bytes, ContextOptions, WgpuContext};

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
    Train(Box<TrainArgs>),
    /// Print the adapter wgpu picks (WGPU_BACKEND / WGPU_ADAPTER_NAME choose).
    Info,
    /// Sample text from a saved checkpoint after a prompt.
    Sample(SampleArgs),
    /// Measure the pool: `pool` (latency against create_buffer), `step` (ms a step
    /// with and without it), `policies` (memory each size policy reserves), `soak`
    /// (bytes held, buffers created and host memory over a long run).
    Bench(BenchArgs),
    /// Work with allocation traces (`tidepool train --trace FILE` writes one).
    Trace(cli_trace::TraceCommand),
}

// Numeric flags take `allow_negative_numbers`, so that `--steps -1` is refused as a
// bad value of --steps (or reaches our own check, as `--temperature -1` does), not as
// an unknown flag `-1`.
#[derive(clap::Args)]
struct BenchArgs {
    /// pool, step, kernels (GPU time per kernel, needs timestamp-query), policies or soak.
    which: String,
    /// The preset a soak trains (default small).
    #[arg(long)]
    preset: Option<String>,
    /// Rows of a soak: one every this many steps.
    #[arg(long, allow_negative_numbers = true, default_value_t = 1000)]
    every: u32,
    /// Presets to train (step, kernels, policies), comma-separated.
    #[arg(long, default_value = "tiny")]
    presets: String,
    /// Timed steps after warm-up (step, policies); steps to train (soak).
    #[arg(long, allow_negative_numbers = true, default_value_t = 10)]
    steps: u32,
    #[arg(long, allow_negative_numbers = true, default_value_t = 3)]
    warmup: u32,
    /// Timed batches of 16 operations (pool).
    #[arg(long, allow_negative_numbers = true, default_value_t = 200)]
    batches: usize,
    /// Any UTF-8 text file (default: the built-in corpus).
    #[arg(long)]
    corpus: Option<std::path::PathBuf>,
    /// One JSON object a line instead of a table.
    #[arg(long)]
    json: bool,
    /// Matmul precisions to measure (step, kernels), comma-separated: f32, f16.
    #[arg(long, default_value = "f32")]
    precision: String,
    /// Values of submit_every to compare (step), comma-separated, e.g. 0,16,32,64:
    /// one row each instead of the pool and kernel variants.
    #[arg(long, value_delimiter = ',')]
    submit_every: Vec<u32>,
    /// Steps recorded before their losses are read (step), comma-separated, e.g.
    /// 1,8: one row each (1: a step at a time; see Trainer::steps).
    #[arg(long, value_delimiter = ',')]
    at_once: Vec<u32>,
    /// With --at-once: calls kept in flight, comma-separated, e.g. 1,2 (1: each
    /// call waits for the one before; 2: the next call is recorded and submitted
    /// while the last one's losses come back, as the page trains).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    in_flight: Vec<u32>,
    /// Block reductions through shared memory even where the device has subgroups
    /// (step, kernels, policies, soak): what the subgroup ones save.
    #[arg(long)]
    no_subgroups: bool,
}

#[derive(clap::Args)]
struct TrainArgs {
    #[command(flatten)]
    trace: cli_trace::TraceArgs,
    /// Every model and training setting (the same ones the wasm API takes).
    #[command(flatten)]
    overrides: Overrides,
    /// Any UTF-8 text file up to 64 MiB (default: Tiny Shakespeare, built in).
    #[arg(long)]
    corpus: Option<std::path::PathBuf>,
    /// Create every buffer fresh and destroy it after the step (same as --pool false).
    #[arg(long)]
    no_pool: bool,
    /// One JSON object a line, a line a step, and a last line with "final": true.
    #[arg(long)]
    json: bool,
    /// Print this many sampled characters at the end.
    #[arg(long, allow_negative_numbers = true, default_value_t = 0)]
    sample: usize,
    #[command(flatten)]
    checkpoint: CheckpointArgs,
}

/// Saving and resuming a run (docs/checkpoint.md).
#[derive(clap::Args)]
struct CheckpointArgs {
    /// Write the run to this checkpoint (safetensors) at the end.
    #[arg(long)]
    save: Option<std::path::PathBuf>,
    /// Also save every N steps (0: only at the end).
    #[arg(
        long,
        allow_negative_numbers = true,
        default_value_t = 0,
        requires = "save"
    )]
    save_every: u32,
    /// Continue the run in this checkpoint where it stopped: its model, settings,
    /// schedule and batches. The corpus must have its vocabulary; --steps sets the
    /// schedule's length; --policy, --pool, --eval-every, --eval-batches and
    /// --precision apply.
    #[arg(long, conflicts_with_all = ["preset", "layers", "heads", "width", "context", "batch", "lr", "warmup", "dropout", "dropout_placement", "weight_decay", "grad_clip", "seed"])]
    resume: Option<std::path::PathBuf>,
}

#[derive(clap::Args)]
struct SampleArgs {
    /// A checkpoint written by `tidepool train --save`.
    #[arg(long)]
    checkpoint: std::path::PathBuf,
    /// Text the sample continues (every character must be in the vocabulary).
    #[arg(long, default_value = "\n")]
    prompt: String,
    /// Characters to sample.
    #[arg(long, allow_negative_numbers = true, default_value_t = 500)]
    tokens: usize,
    /// 0: always the likeliest character.
    #[arg(long, allow_negative_numbers = true, default_value_t = 0.8)]
    temperature: f32,
    /// Sample among the k likeliest characters (0: all).
    #[arg(long, allow_negative_numbers = true, default_value_t = 40)]
    top_k: usize,
}

impl TrainArgs {
    fn config(&self) -> Result<TrainConfig, tidepool::Error> {
        let mut overrides = self.overrides.clone();
        if self.no_pool {
            overrides.pool = Some(false);
        }
        // The command line evaluates as nanoGPT does (eval_iters 200) unless told
        // otherwise; the presets keep fewer for the page.
        if overrides.eval_batches.is_none() {
            overrides.eval_batches = Some(tidepool::train::CLI_EVAL_BATCHES as f64);
        }
        overrides.resolve()
    }

    fn preset(&self) -> &str {
        self.overrides
            .preset
            .as_deref()
            .unwrap_or(tidepool::config::DEFAULT_PRESET)
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
            let cannot =
                |e: std::io::Error| tidepool::Error::Data(format!("cannot read {name}: {e}"));
            let bytes = tidepool::files::read_capped(
                path,
                tidepool::data::MAX_CORPUS_BYTES,
                |len| tidepool::data::check_corpus_size(&name, len),
                cannot,
            )?;
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

/// The bench's counts, checked before any work: each result is a median of at least
/// one sample.
fn check_bench_args(args: &BenchArgs) -> Result<(), tidepool::Error> {
    let bad = |m: String| Err(tidepool::Error::Config(m));
    let max = tidepool::train::MAX_STEPS_AT_ONCE;
    if !["pool", "step", "kernels", "policies", "soak"].contains(&args.which.as_str()) {
        return bad(format!(
            "unknown benchmark {:?}: choose pool, step, kernels, policies or soak",
            args.which
        ));
    }
    if args.which == "pool" && args.batches == 0 {
        return bad("--batches must be at least 1".into());
    }
    if args.which != "pool" && args.steps == 0 {
        return bad("--steps must be at least 1".into());
    }
    if args.which == "soak" && args.every == 0 {
        return bad("--every must be at least 1 (a row every this many steps)".into());
    }
    if let Some(n) = args.at_once.iter().find(|&&n| !(1..=max).contains(&n)) {
        return bad(format!("--at-once values must be 1 to {max}, got {n}"));
    }
    let most = tidepool::train::MAX_STEPS_IN_FLIGHT;
    if let Some(k) = args.in_flight.iter().find(|&&k| !(1..=most).contains(&k)) {
        return bad(format!("--in-flight values must be 1 to {most}, got {k}"));
    }
    if args.in_flight != [1] && args.at_once.is_empty() {
        return bad("--in-flight needs --at-once (the steps a call)".into());
    }
    if args.presets.split(',').any(|p| p.trim().is_empty()) {
        return bad(format!(
            "--presets has an empty name in {:?}; give names separated by commas, e.g. tiny,small",
            args.presets
        ));
    }
    Ok(())
}

async fn bench(args: BenchArgs) -> Result<(), tidepool::Error> {
    use tidepool::bench;
    check_bench_args(&args)?;
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
    let options = ContextOptions {
        subgroups: !args.no_subgroups,
        ..ContextOptions::default()
    };
    let options = &options;
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
            let runs = presets
                .iter()
                .flat_map(|preset| args.precision.split(',').map(move |p| (*preset, p)));
            for (preset, precision) in runs {
                let cfg = Overrides {
                    preset: Some(preset.into()),
                    precision: Some(precision.into()),
                    ..Default::default()
                }
                .resolve()?;
                let label = match cfg.precision {
                    tidepool::config::Precision::F32 => preset.to_string(),
                    p => format!("{preset} {}", p.name()),
                };
                let rows = if !args.at_once.is_empty() {
                    let cfg = match args.submit_every.first() {
                        Some(&submit_every) => TrainConfig {
                            submit_every,
                            ..cfg
                        },
                        None => cfg,
                    };
                    let (w, n) = (args.warmup, args.steps);
                    let (at_once, in_flight) = (&args.at_once, &args.in_flight);
                    bench::at_once_variants(
                        &cfg,
                        options,
                        &label,
                        &corpus,
                        (w, n),
                        at_once,
                        in_flight,
                    )
                    .await?
                } else if args.submit_every.is_empty() {
                    bench::step_variants(&cfg, options, &label, &corpus, args.warmup, args.steps)
                        .await?
                } else {
                    bench::submit_variants(
                        &cfg,
                        options,
                        &label,
                        &corpus,
                        args.warmup,
                        args.steps,
                        &args.submit_every,
                    )
                    .await?
                };
                print_rows(
                    &rows,
                    args.json,
                    &[
                        "preset",
                        "variant",
                        "median ms/step",
                        "host ms/step",
                        "tokens/s",
                        "buffers created/step",
                        "dispatches/step",
                        "vs first row",
                    ],
                    |r| {
                        vec![
                            r.preset.clone(),
                            r.variant.clone(),
                            format!("{:.2}", r.median_ms),
                            format!("{:.2}", r.median_record_ms),
                            format!("{:.0}", r.tokens_per_s),
                            format!("{:.1}", r.buffers_created_per_step),
                            format!("{:.0}", r.dispatches_per_step),
                            format!("{:.2}x", r.median_ms / rows[0].median_ms),
                        ]
                    },
                );
            }
        }
        "policies" => {
            for preset in presets {
                let cfg = TrainConfig::preset(preset)?;
                let rows = bench::policies(&cfg, options, preset, &corpus, args.warmup, args.steps)
                    .await?;
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
        "kernels" => {
            let runs = presets
                .iter()
                .flat_map(|preset| args.precision.split(',').map(move |p| (*preset, p)));
            for (preset, precision) in runs {
                let cfg = Overrides {
                    preset: Some(preset.into()),
                    precision: Some(precision.into()),
                    ..Default::default()
                }
                .resolve()?;
                let label = match cfg.precision {
                    tidepool::config::Precision::F32 => preset.to_string(),
                    p => format!("{preset} {}", p.name()),
                };
                let rows =
                    bench::kernel_times(&cfg, options, &label, &corpus, args.warmup, args.steps)
                        .await?;
                print_rows(
                    &rows,
                    args.json,
                    &[
                        "preset",
                        "kernel",
                        "launches/step",
                        "GPU ms/step",
                        "share",
                        "step ms",
                    ],
                    |r| {
                        vec![
                            r.preset.clone(),
                            r.kernel.clone(),
                            format!("{:.0}", r.launches_per_step),
                            format!("{:.3}", r.ms_per_step),
                            format!("{:.1}%", 100.0 * r.share),
                            format!("{:.2}", r.step_ms),
                        ]
                    },
                );
            }
        }
        "soak" => {
            let preset = args.preset.as_deref().unwrap_or("small");
            let cfg = TrainConfig::preset(preset)?;
            if !args.json {
                println!(
                    "soak: preset {preset}, {} steps, a row every {}",
                    args.steps, args.every
                );
                println!(
                    "| {:>7} | {:>7} | {:>8} | {:>10} | {:>10} | {:>8} | {:>9} | {:>10} | {:>7} |",
                    "step",
                    "loss",
                    "val loss",
                    "held",
                    "in use",
                    "created",
                    "destroyed",
                    "host RSS",
                    "ms/step"
                );
                println!("|--------:|--------:|---------:|-----------:|-----------:|---------:|----------:|-----------:|--------:|");
            }
            let json = args.json;
            bench::soak(&cfg, options, &corpus, args.steps, args.every, |r| {
                if json {
                    println!("{}", serde_json::to_string(r).expect("rows serialize"));
                    return;
                }
                println!(
                    "| {:>7} | {:>7.4} | {:>8} | {:>10} | {:>10} | {:>8} | {:>9} | {:>10} | {:>7.2} |",
                    r.step,
                    r.loss,
                    r.val_loss.map_or("-".into(), |v| format!("{v:.4}")),
                    fmt_bytes(r.bytes_held),
                    fmt_bytes(r.bytes_in_use),
                    r.buffers_created,
                    r.buffers_destroyed,
                    r.host_rss_bytes.map_or("-".into(), fmt_bytes),
                    r.ms_per_step,
                );
            })
            .await?;
        }
        other => unreachable!("check_bench_args refuses {other:?}"),
    }
    Ok(())
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Train(args) => pollster::block_on(train(*args)),
        Command::Info => pollster::block_on(info()),
        Command::Sample(args) => pollster::block_on(sample(args)),
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
    let features = ctx.adapter_features();
    let yes = |f: wgpu::Features| if features.contains(f) { "yes" } else { "no" };
    let info = ctx.adapter_info();
    println!("shader-f16: {}", yes(wgpu::Features::SHADER_F16));
    println!(
        "subgroups: {} (sizes {} to {})",
        yes(wgpu::Features::SUBGROUP),
        info.subgroup_min_size,
        info.subgroup_max_size
    );
    println!(
        "block reductions: {}",
        if ctx.subgroups() {
            "subgroups"
        } else if features.contains(wgpu::Features::SUBGROUP) {
            "shared memory (subgroups wider than 128)"
        } else {
            "shared memory (no subgroups)"
        }
    );
    println!(
        "attention's half-head pairs: {}",
        if tidepool::kernels::attention_subgroups(&ctx) {
            "subgroup shuffles"
        } else {
            "shared memory"
        }
    );
    let coop = ctx.cooperative_matrices();
    println!(
        "cooperative matrices: {}{}",
        yes(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX),
        if coop.is_empty() {
            ""
        } else {
            ", M x N x K, A/B -> C:"
        }
    );
    for c in coop {
        println!(
            "  {}x{}x{} {:?} -> {:?}{}",
            c.m_size,
            c.n_size,
            c.k_size,
            c.ab_type,
            c.cr_type,
            if c.saturating_accumulation {
                " (saturating)"
            } else {
                ""
            }
        );
    }
    let f16 = if !features.contains(wgpu::Features::SHADER_F16) {
        "refused (no shader-f16)".to_string()
    } else if coop.iter().any(tidepool::kernels::is_f16_16x16) {
        "tensor cores (cooperative matrices), where subgroups are 32 wide".to_string()
    } else {
        "f16 tiles, f32 arithmetic (no tensor cores)".to_string()
    };
    println!("--precision f16: {f16}");
    Ok(())
}

async fn sample(args: SampleArgs) -> Result<(), tidepool::Error> {
    tidepool::train::check_sample_settings(
        args.tokens,
        args.temperature,
        ["--tokens", "--temperature"],
    )?;
    let bytes = tidepool::checkpoint::read_file(&args.checkpoint)?;
    let mut trainer = Trainer::resume(&bytes, None).await?;
    let text = trainer
        .sample(&args.prompt, args.tokens, args.temperature, args.top_k)
        .await?;
    println!("{}{text}", args.prompt);
    Ok(())
}

/// Writes the run to `path`, if one was asked for.
async fn save(trainer: &Trainer, path: Option<&std::path::Path>) -> Result<(), tidepool::Error> {
    match path {
        Some(path) => tidepool::checkpoint::write_file(path, &trainer.save().await?),
        None => Ok(()),
    }
}

async fn train(mut args: TrainArgs) -> Result<(), tidepool::Error> {
    let cfg = args.config()?;
    let corpus = args.corpus()?;
    let ckpt = &args.checkpoint;
    // Refused now rather than after the run they would end.
    if args.sample > tidepool::train::MAX_SAMPLE_CHARS {
        return Err(tidepool::Error::Config(format!(
            "--sample must be at most {} characters, got {}",
            tidepool::train::MAX_SAMPLE_CHARS,
            args.sample
        )));
    }
    if let Some(path) = &ckpt.save {
        tidepool::files::check_writable(path, "checkpoint")?;
    }
    if let Some(path) = &args.trace.trace {
        args.trace.check()?;
        tidepool::files::check_writable(path, "trace")?;
    }
    let mut trainer = match &ckpt.resume {
        None => Trainer::new(cfg, corpus).await?,
        Some(path) => {
            let bytes = tidepool::checkpoint::read_file(path)?;
            Trainer::resume_with(&bytes, Some(corpus), |saved| {
                let given = &args.overrides;
                if given.steps.is_some() {
                    saved.steps = cfg.steps;
                }
                if given.policy.is_some() {
                    saved.policy = cfg.policy;
                }
                if given.eval_every.is_some() {
                    saved.eval_every = cfg.eval_every;
                }
                if given.eval_batches.is_some() {
                    saved.eval_batches = cfg.eval_batches;
                }
                if given.pool.is_some() || args.no_pool {
                    saved.pool = cfg.pool;
                }
                if given.precision.is_some() {
                    saved.precision = cfg.precision;
                }
                if given.submit_every.is_some() {
                    saved.submit_every = cfg.submit_every;
                }
            })
            .await?
        }
    };
    let (done, steps) = (trainer.steps_done(), trainer.config().steps);
    if done >= steps {
        return Err(tidepool::Error::Config(format!(
            "the checkpoint has trained {done} steps of a run of {steps}: nothing is left to \
             train; give --steps above {done} to go on"
        )));
    }
    let (m, c) = (trainer.model().clone(), trainer.config().clone());
    if !args.json {
        eprintln!(
            "{} on {} ({}): {} layers, {} heads, width {}, context {}, batch {}, {} parameters; corpus {} ({} tokens, vocab {}); pool {} ({})",
            match &ckpt.resume {
                Some(path) => format!("{} (step {done})", path.display()),
                None => args.preset().to_string(),
            },
            trainer.context().adapter_name(),
            trainer.context().backend(),
            m.layers, m.heads, m.width, m.context, c.batch, m.num_params(),
            trainer.corpus().name, trainer.corpus().tokens(), m.vocab,
            if c.pool { "on" } else { "off" },
            c.policy.label(),
        );
    }
    if let Some(note) = c.schedule_note().filter(|_| !args.json) {
        eprintln!("note: {note}");
    }
    if args.trace.trace.is_some() && args.trace.trace_steady > steps && !args.json {
        eprintln!(
            "note: --trace-steady {} is past the run's {steps} steps: the trace will hold the \
             first step only",
            args.trace.trace_steady
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
    bar.set_position(done as u64);
    let start = now_ms();
    let mut out = std::io::stdout().lock();
    let mut tracing = std::mem::take(&mut args.trace).start();
    // Several steps a call (the GPU goes on to the next while the host records),
    // each call ending where an evaluation or a save is due, so that they follow
    // their own step. The trainer evaluates every `eval_every` steps itself.
    let eval_every = trainer.config().eval_every;
    let call_from = |at: u32| {
        STEPS_A_CALL
            .min(steps - at)
            .min(to_next(at, eval_every))
            .min(to_next(at, ckpt.save_every))
    };
    let save_due = |end: u32| ckpt.save_every > 0 && end.is_multiple_of(ckpt.save_every);
    // A call started before the one before it came back (its last step with it), where
    // nothing was due at that one's end: the GPU then never waits for the host between
    // calls (BENCHMARKS.md, round twenty). Only where steps are fast, as the page's
    // worker does: on a CPU adapter the host's recording would take the kernels' CPU.
    // Traced steps go one call at a time.
    let mut ahead: Option<(u32, StepsInFlight)> = None;
    let mut ms_a_step = f64::INFINITY;
    loop {
        let (end, call) = match ahead.take() {
            Some(call) => call,
            None if trainer.steps_done() >= steps => break,
            None => {
                let at = trainer.steps_done();
                if tracing.traces_from(at + 1) {
                    for s in tracing.steps(&mut trainer, call_from(at)).await? {
                        report_step(&s, &mut out, &bar, args.json);
                    }
                    if save_due(trainer.steps_done()) {
                        save(&trainer, ckpt.save.as_deref()).await?;
                    }
                    continue;
                }
                let n = call_from(at);
                (at + n, trainer.start_steps(n)?)
            }
        };
        let fast = ms_a_step < OVERLAP_BELOW_MS;
        if fast
            && end < steps
            && !call.evaluates()
            && !save_due(end)
            && !tracing.traces_from(end + 1)
        {
            let n = call_from(end);
            ahead = Some((end + n, trainer.start_steps(n)?));
        }
        for s in trainer.finish_steps(call.figures().await?).await? {
            report_step(&s, &mut out, &bar, args.json);
            ms_a_step = s.ms;
        }
        if save_due(end) {
            save(&trainer, ckpt.save.as_deref()).await?;
        }
    }
    bar.finish();
    tracing.write()?;
    let seconds = (now_ms() - start) / 1e3;
    let val_loss = trainer.evaluate().await?;
    save(&trainer, ckpt.save.as_deref()).await?;
    let s = trainer.stats().clone();
    let tokens = steps.saturating_sub(done) as f64 * (c.batch * c.context) as f64;
    let final_line = serde_json::json!({
        "final": true,
        "steps": steps,
        "loss": s.loss,
        "val_loss": val_loss,
        "eval_batches": c.eval_batches,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "hit_rate": s.hit_rate,
        "buffers_created": s.buffers_created,
        "peak_bytes_held": s.peak_bytes_held,
        // In use + held free at once, weights and optimizer state included: the
        // figure to set beside PyTorch's max_memory_reserved.
        "peak_bytes_reserved": s.context.peak_bytes_reserved,
        "peak_bytes_in_use": s.peak_bytes_in_use,
        "peak_bytes_requested": s.peak_bytes_requested,
        "adapter": trainer.context().adapter_name(),
        "backend": trainer.context().backend(),
        "preset": args.preset(),
        "pool": c.pool,
        "policy": c.policy.label(),
        "precision": c.precision.name(),
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

/// Most steps one call of `train` records before reading their losses
/// ([`Trainer::steps`]): on the page's presets a call takes a few ms on a large GPU.
const STEPS_A_CALL: u32 = 16;

/// Calls overlap where the last call's steps took less than this (ms a step): the
/// page's worker rule (www/worker.mjs, schedule.batchMs / 2).
const OVERLAP_BELOW_MS: f64 = 8.0;

/// Steps from `done` to the next multiple of `every` (that step included);
/// `u32::MAX` when `every` is 0 (never).
fn to_next(done: u32, every: u32) -> u32 {
    if every == 0 {
        u32::MAX
    } else {
        every - done % every
    }
}

/// One step's line: JSON, or the progress bar's message.
fn report_step(s: &StepStats, out: &mut impl Write, bar: &ProgressBar, json: bool) {
    if json {
        let line = serde_json::to_string(s).expect("stats serialize");
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

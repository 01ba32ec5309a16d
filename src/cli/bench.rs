//! `tidepool bench pool|step|kernels|policies|soak`: the measurements behind
//! BENCHMARKS.md, each a subcommand with its own flags, printed as a table or as
//! JSON lines (`--json`; the first line names the adapter and the benchmark).

use clap::{Args, Subcommand};
use tidepool::bench;
use tidepool::config::PRESETS;
use tidepool::config::{Overrides, Precision};
use tidepool::data::Corpus;
use tidepool::pool::SizePolicy;
use tidepool::train::{TrainConfig, MAX_STEPS_AT_ONCE, MAX_STEPS_IN_FLIGHT};
use tidepool::{fmt_bytes, ContextOptions, WgpuContext};

use super::output::{self, say};
use super::Outcome;

#[derive(Subcommand)]
pub enum Bench {
    /// The pool's latency against create_buffer + destroy, size by size, and a
    /// dispatch on a pooled buffer against one on a fresh buffer.
    Pool(PoolArgs),
    /// ms a step with and without the pool and the staging belt and with each
    /// kernel tuning forced; or across --submit-every values, or --at-once.
    Step(StepArgs),
    /// GPU time a step, kernel by kernel (needs the adapter's timestamp-query).
    Kernels(KernelsArgs),
    /// The memory each size policy reserves against the bytes requested.
    Policies(PoliciesArgs),
    /// Bytes held, buffers created and host memory over a long run.
    Soak(SoakArgs),
}

// Numeric flags take `allow_negative_numbers`, so that `--steps -1` is refused as a
// bad value of --steps, not as an unknown flag `-1`.

#[derive(Args)]
pub struct PoolArgs {
    /// Timed batches of 16 operations a size.
    #[arg(long, allow_negative_numbers = true, default_value_t = 200, value_parser = count::<{ u32::MAX }>)]
    batches: u32,
    #[command(flatten)]
    out: Json,
}

#[derive(Args)]
pub struct StepArgs {
    #[command(flatten)]
    runs: Runs,
    /// Matmul precisions to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "f32", value_parser = Precision::ALL.map(Precision::name))]
    precision: Vec<String>,
    /// Values of submit_every to compare, comma-separated, e.g. 0,16,32,64: one row
    /// each instead of the pool and kernel variants (with --at-once: the first).
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true)]
    submit_every: Vec<u32>,
    /// Steps recorded before their losses are read, comma-separated, e.g. 1,8: one
    /// row each (1: a step at a time; see Trainer::steps); --steps counts calls.
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true, value_parser = count::<MAX_STEPS_AT_ONCE>)]
    at_once: Vec<u32>,
    /// With --at-once: calls kept in flight, comma-separated, e.g. 1,2 (1: each call
    /// waits for the one before; 2: the next call is recorded and submitted while
    /// the last one's losses come back, as the page trains). Default 1.
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true, requires = "at_once", value_parser = count::<MAX_STEPS_IN_FLIGHT>)]
    in_flight: Vec<u32>,
    #[command(flatten)]
    out: Json,
}

#[derive(Args)]
pub struct KernelsArgs {
    #[command(flatten)]
    runs: Runs,
    /// Matmul precisions to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "f32", value_parser = Precision::ALL.map(Precision::name))]
    precision: Vec<String>,
    /// The size policy the steps run under (default: the preset's).
    #[arg(long, value_parser = SizePolicy::parse)]
    policy: Option<SizePolicy>,
    #[command(flatten)]
    out: Json,
}

#[derive(Args)]
pub struct PoliciesArgs {
    #[command(flatten)]
    runs: Runs,
    /// Size policies to compare, comma-separated (default: pow2, pow2/2, pow2/4,
    /// pow2/8, exact, planned).
    #[arg(long, value_delimiter = ',', value_parser = SizePolicy::parse)]
    policies: Vec<SizePolicy>,
    /// Also train each policy with the layernorm outputs recomputed in the
    /// backward, in the row after it: what it saves at peak and what it costs a step.
    #[arg(long)]
    recompute: bool,
    #[command(flatten)]
    out: Json,
}

#[derive(Args)]
pub struct SoakArgs {
    /// The preset trained.
    #[arg(long, default_value = "small", value_parser = PRESETS)]
    preset: String,
    /// Steps to train.
    #[arg(long, allow_negative_numbers = true, default_value_t = 10, value_parser = count::<{ u32::MAX }>)]
    steps: u32,
    /// A row every this many steps (and one at the end).
    #[arg(long, allow_negative_numbers = true, default_value_t = 1000, value_parser = count::<{ u32::MAX }>)]
    every: u32,
    /// Any UTF-8 text file (default: the built-in corpus).
    #[arg(long, value_name = "FILE")]
    corpus: Option<std::path::PathBuf>,
    #[command(flatten)]
    device: Device,
    #[command(flatten)]
    out: Json,
}

/// How a benchmark's trainers drive the device.
#[derive(Args)]
struct Device {
    /// Block reductions through shared memory even where the device has subgroups:
    /// what the subgroup ones save.
    #[arg(long)]
    no_subgroups: bool,
    /// The f16 matmuls read an f16 copy of the weights where their core can (f16
    /// runs only; off by default: on the H200 it measured slower).
    #[arg(long)]
    f16_weights: bool,
    /// Attention on tensor cores in f16 where the device runs the tensor-core
    /// GEMMs (f16 runs only; the default, `--f16-attention false` keeps it in f32).
    /// Given bare, it also says where it does not apply.
    #[arg(
        long,
        num_args = 0..=1,
        default_missing_value = "true",
        value_name = "BOOL"
    )]
    f16_attention: Option<bool>,
    /// How storage operands are bound: `declared` (read-only where a kernel only
    /// reads), or `read-write` (every one `read_write`, a repeated operand bound to a
    /// stand-in, as the planned policy binds): what that rule costs apart from the
    /// planned policy's arenas. The planned policy always binds `read-write`.
    #[arg(long, value_enum, default_value_t = Bindings::Declared)]
    bindings: Bindings,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Bindings {
    Declared,
    ReadWrite,
}

impl Device {
    fn options(&self) -> ContextOptions {
        ContextOptions {
            subgroups: !self.no_subgroups,
            f16_weights: self.f16_weights,
            f16_attention: self.f16_attention.unwrap_or(true),
            read_write_bindings: self.bindings == Bindings::ReadWrite,
            ..ContextOptions::default()
        }
    }
}

/// What the step, kernels and policies benchmarks train, and for how long.
#[derive(Args)]
struct Runs {
    /// Presets to train, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "tiny", value_parser = PRESETS)]
    presets: Vec<String>,
    /// Untimed steps first.
    #[arg(long, allow_negative_numbers = true, default_value_t = 3)]
    warmup: u32,
    /// Timed steps after warm-up.
    #[arg(long, allow_negative_numbers = true, default_value_t = 10, value_parser = count::<{ u32::MAX }>)]
    steps: u32,
    /// Any UTF-8 text file (default: the built-in corpus).
    #[arg(long, value_name = "FILE")]
    corpus: Option<std::path::PathBuf>,
    #[command(flatten)]
    device: Device,
}

#[derive(Args)]
struct Json {
    /// One JSON object a line instead of a table.
    #[arg(long)]
    json: bool,
}

/// A count from 1 to `MAX`, for clap (which names the flag and the value refused).
pub fn count<const MAX: u32>(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(n) if (1..=MAX).contains(&n) => Ok(n),
        Ok(0) if MAX == u32::MAX => Err("must be at least 1".into()),
        _ => Err(format!("must be a whole number from 1 to {MAX}")),
    }
}

impl Bench {
    fn name(&self) -> &'static str {
        match self {
            Bench::Pool(_) => "pool",
            Bench::Step(_) => "step",
            Bench::Kernels(_) => "kernels",
            Bench::Policies(_) => "policies",
            Bench::Soak(_) => "soak",
        }
    }

    fn corpus_path(&self) -> Option<&std::path::Path> {
        match self {
            Bench::Pool(_) => None,
            Bench::Step(a) => a.runs.corpus.as_deref(),
            Bench::Kernels(a) => a.runs.corpus.as_deref(),
            Bench::Policies(a) => a.runs.corpus.as_deref(),
            Bench::Soak(a) => a.corpus.as_deref(),
        }
    }

    fn json(&self) -> bool {
        match self {
            Bench::Pool(a) => a.out.json,
            Bench::Step(a) => a.out.json,
            Bench::Kernels(a) => a.out.json,
            Bench::Policies(a) => a.out.json,
            Bench::Soak(a) => a.out.json,
        }
    }
}

pub async fn run(which: Bench) -> Outcome {
    // A file that cannot be used is refused before the GPU is touched.
    let corpus = super::corpus(which.corpus_path())?;
    let ctx = WgpuContext::new().await?;
    let adapter = format!("{} ({})", ctx.adapter_name(), ctx.backend());
    drop(ctx);
    if which.json() {
        let head = serde_json::json!({ "adapter": adapter, "bench": which.name() });
        say!("{head}");
    } else {
        say!("adapter: {adapter}");
    }
    match which {
        Bench::Pool(args) => pool(args).await,
        Bench::Step(args) => step(args, &corpus).await,
        Bench::Kernels(args) => kernels(args, &corpus).await,
        Bench::Policies(args) => policies(args, &corpus).await,
        Bench::Soak(args) => soak(args, &corpus).await,
    }
}

async fn pool(args: PoolArgs) -> Outcome {
    let sizes = [256, 64 << 10, 4 << 20, 64 << 20];
    let rows = bench::pool_latency(&sizes, args.batches as usize).await?;
    let header = [
        "size",
        "pool median ns",
        "pool p99 ns",
        "create+destroy median ns",
        "create p99 ns",
        "ratio",
        "dispatch pooled us",
        "dispatch fresh us",
    ];
    output::rows(&rows, args.out.json, &header, |r| {
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
    });
    Ok(())
}

/// Each preset of `presets` at each precision of `precisions`: its checked config
/// and its label in the tables (`small f16`; f32 goes unnamed).
fn preset_runs(
    presets: &[String],
    precisions: &[String],
) -> Result<Vec<(TrainConfig, String)>, tidepool::Error> {
    let mut runs = Vec::new();
    for preset in presets {
        for precision in precisions {
            let cfg = Overrides {
                preset: Some(preset.clone()),
                precision: Some(precision.clone()),
                ..Default::default()
            }
            .resolve()?;
            let label = match cfg.precision {
                Precision::F32 => preset.clone(),
                p => format!("{preset} {}", p.name()),
            };
            runs.push((cfg, label));
        }
    }
    Ok(runs)
}

/// Where a flag for f16 runs changes nothing, a note on stderr, so that no row passes
/// for a measurement of what the flag asks for: no run is f16; `--f16-weights` where
/// the device's f16 core reads the f32 weights; `--f16-attention` where an f16 run's
/// attention stays f32 (no cooperative matrices, or heads they do not take). Only
/// for flags given: tensor-core attention is the default, and said of nowhere.
async fn note_f16_options(device: &Device, runs: &[(TrainConfig, String)]) {
    let options = device.options();
    let asked_attention = device.f16_attention == Some(true);
    let flags: Vec<&str> = [
        (options.f16_weights, "--f16-weights"),
        (asked_attention, "--f16-attention"),
    ]
    .into_iter()
    .filter_map(|(on, flag)| on.then_some(flag))
    .collect();
    if flags.is_empty() {
        return;
    }
    let f16_runs: Vec<_> = runs
        .iter()
        .filter(|(c, _)| c.precision == Precision::F16)
        .collect();
    if f16_runs.is_empty() {
        let verb = if flags.len() == 1 {
            "changes"
        } else {
            "change"
        };
        eprintln!(
            "note: {} {verb} only f16 runs (--precision f16), and none runs here",
            flags.join(" and ")
        );
        return;
    }
    let f16 = ContextOptions {
        precision: Precision::F16,
        ..options.clone()
    };
    // Where there is no f16 context, the runs themselves say why.
    let Ok(ctx) = WgpuContext::with_options(f16).await else {
        return;
    };
    if options.f16_weights && !tidepool::kernels::matmul::reads_f16_weights(&ctx) {
        eprintln!("note: --f16-weights: the f16 matmuls here read the f32 weights (their core has no form that reads the copy)");
    }
    if !asked_attention {
        return;
    }
    for (cfg, label) in f16_runs {
        let shape = tidepool::kernels::AttentionShape {
            b: cfg.batch,
            t: cfg.context,
            c: cfg.width,
            heads: cfg.heads,
        };
        if let Err(why) = tidepool::kernels::Attention::coop_runs(&ctx, shape) {
            eprintln!("note: --f16-attention: {label}'s attention stays f32 here: {why}");
        }
    }
}

async fn step(args: StepArgs, corpus: &Corpus) -> Outcome {
    let (warmup, steps) = (args.runs.warmup, args.runs.steps);
    let options = &args.runs.device.options();
    let runs = preset_runs(&args.runs.presets, &args.precision)?;
    note_f16_options(&args.runs.device, &runs).await;
    for (cfg, label) in runs {
        let rows = if !args.at_once.is_empty() {
            let cfg = match args.submit_every.first() {
                Some(&submit_every) => TrainConfig {
                    submit_every,
                    ..cfg
                },
                None => cfg,
            };
            let in_flight = match args.in_flight.is_empty() {
                true => vec![1],
                false => args.in_flight.clone(),
            };
            let (at_once, timing) = (&args.at_once, (warmup, steps));
            bench::at_once_variants(&cfg, options, &label, corpus, timing, at_once, &in_flight)
                .await?
        } else if args.submit_every.is_empty() {
            bench::step_variants(&cfg, options, &label, corpus, warmup, steps).await?
        } else {
            let values = &args.submit_every;
            bench::submit_variants(&cfg, options, &label, corpus, warmup, steps, values).await?
        };
        let header = [
            "preset",
            "variant",
            "median ms/step",
            "host ms/step",
            "tokens/s",
            "buffers created/step",
            "dispatches/step",
            "vs first row",
        ];
        output::rows(&rows, args.out.json, &header, |r| {
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
        });
    }
    Ok(())
}

async fn kernels(args: KernelsArgs, corpus: &Corpus) -> Outcome {
    let (warmup, steps) = (args.runs.warmup, args.runs.steps);
    let options = &args.runs.device.options();
    let runs = preset_runs(&args.runs.presets, &args.precision)?;
    note_f16_options(&args.runs.device, &runs).await;
    for (cfg, label) in runs {
        let cfg = TrainConfig {
            policy: args.policy.unwrap_or(cfg.policy),
            ..cfg
        };
        let rows = bench::kernel_times(&cfg, options, &label, corpus, warmup, steps).await?;
        let header = [
            "preset",
            "policy",
            "bindings",
            "kernel",
            "launches/step",
            "GPU ms/step",
            "share",
            "step ms",
        ];
        output::rows(&rows, args.out.json, &header, |r| {
            vec![
                r.preset.clone(),
                r.policy.clone(),
                r.bindings.into(),
                r.kernel.clone(),
                format!("{:.0}", r.launches_per_step),
                format!("{:.3}", r.ms_per_step),
                format!("{:.1}%", 100.0 * r.share),
                format!("{:.2}", r.step_ms),
            ]
        });
    }
    Ok(())
}

async fn policies(args: PoliciesArgs, corpus: &Corpus) -> Outcome {
    let (warmup, steps) = (args.runs.warmup, args.runs.steps);
    let options = &args.runs.device.options();
    for preset in &args.runs.presets {
        let cfg = TrainConfig::preset(preset)?;
        let policies = if args.policies.is_empty() {
            bench::policy_set()
        } else {
            args.policies.clone()
        };
        let settings: &[bool] = if args.recompute {
            &[false, true]
        } else {
            &[false]
        };
        let mut rows = Vec::new();
        for &recompute in settings {
            let cfg = TrainConfig {
                recompute,
                ..cfg.clone()
            };
            let run = (preset.as_str(), corpus);
            rows.extend(bench::policies(&cfg, options, run, warmup, steps, &policies).await?);
        }
        // Each policy's row with recompute beside the one without.
        rows.sort_by_key(|r| {
            let at = policies.iter().position(|p| p.label() == r.policy);
            (at, r.recompute)
        });
        let header = [
            "preset",
            "policy",
            "bindings",
            "recompute",
            "peak reserved",
            "peak requested",
            "ratio",
            "hit rate",
            "created after warm-up",
            "ms a step",
        ];
        output::rows(&rows, args.out.json, &header, |r| {
            vec![
                r.preset.clone(),
                r.policy.clone(),
                r.bindings.into(),
                if r.recompute { "on" } else { "off" }.into(),
                fmt_bytes(r.peak_bytes_reserved),
                fmt_bytes(r.peak_bytes_requested),
                format!("{:.3}", r.ratio),
                format!("{:.4}", r.hit_rate),
                r.buffers_created_after_warmup.to_string(),
                format!("{:.2}", r.ms_per_step),
            ]
        });
    }
    Ok(())
}

async fn soak(args: SoakArgs, corpus: &Corpus) -> Outcome {
    let cfg = TrainConfig::preset(&args.preset)?;
    let json = args.out.json;
    if !json {
        say!(
            "soak: preset {}, {} steps, a row every {}",
            args.preset,
            args.steps,
            args.every
        );
        say!(
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
        say!("|--------:|--------:|---------:|-----------:|-----------:|---------:|----------:|-----------:|--------:|");
    }
    bench::soak(
        &cfg,
        &args.device.options(),
        corpus,
        args.steps,
        args.every,
        |r| {
            if json {
                say!("{}", serde_json::to_string(r).expect("rows serialize"));
                return;
            }
            say!(
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
        },
    )
    .await?;
    Ok(())
}

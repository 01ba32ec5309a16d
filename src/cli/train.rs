//! `tidepool train`: trains a GPT, reports each step (src/cli/report.rs), evaluates,
//! saves and resumes checkpoints, and writes an allocation trace when asked.

use std::path::{Path, PathBuf};

use tidepool::config::Overrides;
use tidepool::train::{Schedule, StepsInFlight, TrainConfig, Trainer};
use tidepool::{fmt_bytes, Error};

use super::output::say;
use super::report::{Report, ReportArgs};
use super::trace::{TraceArgs, Tracing};
use super::{Failure, Outcome};

#[derive(clap::Args)]
pub struct TrainArgs {
    /// Every model and training setting (the same ones the wasm API takes).
    #[command(flatten)]
    overrides: Overrides,
    /// Any UTF-8 text file up to 64 MiB (default: Tiny Shakespeare, built in).
    #[arg(long, value_name = "FILE", help_heading = "Training")]
    corpus: Option<PathBuf>,
    /// Create every buffer fresh and destroy it after the step (same as --pool false).
    #[arg(long, help_heading = "Pool")]
    no_pool: bool,
    #[command(flatten)]
    report: ReportArgs,
    /// Print this many sampled characters at the end.
    #[arg(
        long,
        allow_negative_numbers = true,
        default_value_t = 0,
        value_name = "CHARS",
        help_heading = "Output"
    )]
    sample: usize,
    /// Under --precision f16, attention on tensor cores where the device has them
    /// (ContextOptions::f16_attention; the default, `--f16-attention false` keeps it
    /// in f32; docs/precision.md). Given bare, it also says where it does not apply.
    #[arg(
        long,
        help_heading = "Training",
        conflicts_with = "resume",
        num_args = 0..=1,
        default_missing_value = "true",
        value_name = "BOOL"
    )]
    f16_attention: Option<bool>,
    #[command(flatten)]
    trace: TraceArgs,
    #[command(flatten)]
    checkpoint: CheckpointArgs,
}

/// Saving and resuming a run (docs/checkpoint.md).
#[derive(clap::Args)]
struct CheckpointArgs {
    /// Write the run to this checkpoint (safetensors) at the end.
    #[arg(long, value_name = "FILE", help_heading = "Checkpoint")]
    save: Option<PathBuf>,
    /// Also save every N steps (0: only at the end).
    #[arg(
        long,
        allow_negative_numbers = true,
        default_value_t = 0,
        requires = "save",
        value_name = "N",
        help_heading = "Checkpoint"
    )]
    save_every: u32,
    /// Continue the run in this checkpoint where it stopped: its model, settings,
    /// schedule and batches. The corpus must have its vocabulary; --steps sets the
    /// schedule's length; --policy, --pool, --eval-every, --eval-batches,
    /// --precision and --recompute apply.
    #[arg(
        long,
        value_name = "FILE",
        help_heading = "Checkpoint",
        conflicts_with_all = ["preset", "layers", "heads", "width", "context", "batch", "lr", "warmup", "dropout", "dropout_placement", "weight_decay", "grad_clip", "seed"]
    )]
    resume: Option<PathBuf>,
}

impl TrainArgs {
    /// The settings given, resolved against the preset and checked.
    fn config(&self) -> Result<TrainConfig, Error> {
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

    /// The flags' own limits, checked before any work.
    fn check(&self) -> Result<(), Failure> {
        let max = tidepool::train::MAX_SAMPLE_CHARS;
        if self.sample > max {
            return Err(Failure::Usage(Error::Config(format!(
                "--sample must be at most {max} characters, got {}",
                self.sample
            ))));
        }
        self.trace.check()
    }

    fn preset(&self) -> &str {
        self.overrides
            .preset
            .as_deref()
            .unwrap_or(tidepool::config::DEFAULT_PRESET)
    }
}

pub async fn run(mut args: TrainArgs) -> Outcome {
    let cfg = args.config().map_err(Failure::Usage)?;
    args.check()?;
    let corpus = super::corpus(args.corpus.as_deref())?;
    // Refused now rather than after the run they would end.
    if let Some(path) = &args.checkpoint.save {
        tidepool::files::check_writable(path, "checkpoint")?;
    }
    if let Some(path) = &args.trace.trace {
        tidepool::files::check_writable(path, "trace")?;
    }
    let mut trainer = match &args.checkpoint.resume {
        None => {
            let options = tidepool::gpu::ContextOptions {
                f16_attention: args.f16_attention.unwrap_or(true),
                ..Default::default()
            };
            Trainer::with_options(cfg, corpus, options).await?
        }
        Some(path) => resume(&args, path, cfg, corpus).await?,
    };
    let (done, steps) = (trainer.steps_done(), trainer.config().steps);
    if done >= steps {
        return Err(Failure::Usage(Error::Config(format!(
            "the checkpoint has trained {done} steps of a run of {steps}: nothing is left to \
             train; give --steps above {done} to go on"
        ))));
    }
    let c = trainer.config().clone();
    // Where an asked-for --f16-attention changes nothing, said in either output
    // form: a run compared with one without it must not pass for its measurement.
    let tensor_core_attention = tensor_core_attention(&trainer);
    if let (Some(true), Err(note)) = (args.f16_attention, &tensor_core_attention) {
        eprintln!("note: {note}");
    }
    // Above the progress bar, which starts next.
    if !args.report.json {
        say!("{}", header(&args, &trainer));
        if let Some(note) = c.schedule_note() {
            eprintln!("note: {note}");
        }
        if args.trace.trace.is_some() && args.trace.trace_steady > steps {
            eprintln!(
                "note: --trace-steady {} is past the run's {steps} steps: the trace will hold \
                 the first step only",
                args.trace.trace_steady
            );
        }
    }
    let mut report = Report::start(&args.report, done, steps, c.eval_every);
    let schedule = Schedule::cli(steps, c.eval_every, args.checkpoint.save_every);
    let save_to = args.checkpoint.save.as_deref();
    let mut tracing = std::mem::take(&mut args.trace).start();
    train_to_end(&mut trainer, &schedule, &mut tracing, &mut report, save_to).await?;
    report.trained();
    tracing.write()?;
    if let Some(note) = tracing.take_note() {
        report.note(&note);
    }
    let seconds = report.elapsed_s();
    // A run that ends on an evaluation step has just evaluated these weights.
    let evaluated = c.eval_every > 0 && steps.is_multiple_of(c.eval_every);
    let val_loss = match trainer.stats().val_loss.filter(|_| evaluated) {
        Some(loss) => loss,
        None => {
            let evaluation = trainer.evaluate();
            report.final_evaluation(c.eval_batches, evaluation).await?
        }
    };
    save(&trainer, save_to).await?;
    let s = trainer.stats().clone();
    let tokens = f64::from(steps - done) * (c.batch * c.context) as f64;
    if report.is_json() {
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
            // Layernorm outputs made again in the backward: peak bytes lower,
            // step time higher (`tidepool bench policies --recompute` sets the
            // two side by side).
            "recompute": c.recompute,
            // Whether attention ran on tensor cores (--f16-attention, where it applies).
            "f16_attention": tensor_core_attention.is_ok(),
        });
        say!("{final_line}");
    } else {
        say!(
            "done: {steps} steps in {seconds:.1} s ({:.0} tokens/s); train loss {:.4}, val loss \
             {val_loss:.4} ({} held-out batches); pool hit rate {:.2}%, {} buffers created, \
             peak held {}, peak reserved {}{}",
            tokens / seconds,
            s.loss,
            c.eval_batches,
            s.hit_rate * 100.0,
            s.buffers_created,
            fmt_bytes(s.peak_bytes_held),
            fmt_bytes(s.context.peak_bytes_reserved),
            if c.recompute {
                " with layernorms recomputed"
            } else {
                ""
            }
        );
    }
    if args.sample > 0 {
        let text = trainer.sample("\n", args.sample, 0.8, 20).await?;
        say!("--- sample ---\n{text}");
    }
    Ok(())
}

/// Whether this run's attention is on tensor cores, or why it stays f32.
fn tensor_core_attention(trainer: &Trainer) -> Result<(), String> {
    if !trainer.context().f16_attention() {
        return Err("--f16-attention false: attention stays f32".into());
    }
    let c = trainer.config();
    if c.precision != tidepool::config::Precision::F16 {
        return Err("--f16-attention applies to --precision f16 only: attention stays f32".into());
    }
    let shape = tidepool::kernels::AttentionShape {
        b: c.batch,
        t: c.context,
        c: c.width,
        heads: c.heads,
    };
    tidepool::kernels::Attention::coop_runs(trainer.context(), shape)
        .map_err(|why| format!("--f16-attention: attention stays f32 here: {why}"))
}

/// The trainer of the run saved at `path`, on `corpus`, with the settings that may
/// change when resuming taken from `cfg` where they were given.
async fn resume(
    args: &TrainArgs,
    path: &Path,
    cfg: TrainConfig,
    corpus: tidepool::data::Corpus,
) -> Result<Trainer, Error> {
    let checkpoint = super::checkpoint(path)?;
    let given = &args.overrides;
    Trainer::from_checkpoint(checkpoint, Some(corpus), |saved| {
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
        if given.recompute.is_some() {
            saved.recompute = cfg.recompute;
        }
    })
    .await
}

/// The run's first line: what trains, where, on what.
fn header(args: &TrainArgs, trainer: &Trainer) -> String {
    let (m, c) = (trainer.model(), trainer.config());
    let what = match &args.checkpoint.resume {
        Some(path) => format!("{} (step {})", path.display(), trainer.steps_done()),
        None => args.preset().to_string(),
    };
    format!(
        "{what} on {} ({}): {} layers, {} heads, width {}, context {}, batch {}, {} \
         parameters; corpus {} ({} tokens, vocab {}); pool {} ({}){}",
        trainer.context().adapter_name(),
        trainer.context().backend(),
        m.layers,
        m.heads,
        m.width,
        m.context,
        c.batch,
        m.num_params(),
        trainer.corpus().name,
        trainer.corpus().tokens(),
        m.vocab,
        if c.pool { "on" } else { "off" },
        c.policy.label(),
        if c.recompute {
            "; layernorms recomputed in the backward"
        } else {
            ""
        },
    )
}

/// Trains to the run's last step in the calls `schedule` makes (its end is the
/// run's), reporting every step and saving where due. A call after one whose
/// figures are still coming back is started at once where the schedule lets it:
/// the GPU then never waits for the host between calls. Traced steps go one call
/// at a time.
async fn train_to_end(
    trainer: &mut Trainer,
    schedule: &Schedule,
    tracing: &mut Tracing,
    report: &mut Report,
    save_to: Option<&Path>,
) -> Result<(), Error> {
    let last = schedule.end.unwrap_or(u32::MAX);
    let mut ahead: Option<(u32, StepsInFlight)> = None;
    // The last call's time a step; none before a call has come back.
    let mut ms_a_step = None;
    loop {
        let (end, call) = match ahead.take() {
            Some(call) => call,
            None if trainer.steps_done() >= last => return Ok(()),
            None => {
                let at = trainer.steps_done();
                if tracing.traces_from(at + 1) {
                    for s in tracing
                        .steps(trainer, schedule.steps_from(at, ms_a_step))
                        .await?
                    {
                        report.step(&s);
                    }
                    if let Some(note) = tracing.take_note() {
                        report.note(&note);
                    }
                    if schedule.save_due_at(trainer.steps_done()) {
                        save(trainer, save_to).await?;
                    }
                    continue;
                }
                let n = schedule.steps_from(at, ms_a_step);
                (at + n, trainer.start_steps(n)?)
            }
        };
        let evaluates = call.evaluates();
        if schedule.overlaps(ms_a_step)
            && schedule.nothing_due_at(end)
            && !tracing.traces_from(end + 1)
        {
            let n = schedule.steps_from(end, ms_a_step);
            ahead = Some((end + n, trainer.start_steps(n)?));
        }
        let figures = call.figures().await?;
        if evaluates {
            report.evaluating(trainer.config().eval_batches);
        }
        for s in trainer.finish_steps(figures).await? {
            report.step(&s);
            ms_a_step = Some(s.ms);
        }
        if schedule.save_due_at(end) {
            save(trainer, save_to).await?;
        }
    }
}

/// Writes the run to `path`, if one was asked for.
async fn save(trainer: &Trainer, path: Option<&Path>) -> Result<(), Error> {
    match path {
        Some(path) => tidepool::checkpoint::write_file(path, &trainer.save().await?),
        None => Ok(()),
    }
}

//! `tidepool train --trace FILE` and `tidepool trace replay FILE`: the allocation
//! trace on the command line, and any allocator's recording replayed (see
//! `tidepool::trace`, `tidepool::snapshot` and `docs/trace.md`).

use tidepool::snapshot::{self, pickle, Options};
use tidepool::trace::Trace;
use tidepool::train::{StepStats, Trainer};

use super::output::{in_words, say};
use super::{Failure, Outcome};

/// The train command's trace flags.
#[derive(clap::Args, Default)]
pub struct TraceArgs {
    /// Write the allocation trace of the first step and of a steady step to this
    /// JSON file (format: docs/trace.md).
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub trace: Option<std::path::PathBuf>,
    /// Which step --trace records as the steady one (2 or later: step 1 is traced as
    /// the first).
    #[arg(
        long,
        allow_negative_numbers = true,
        default_value_t = 3,
        value_name = "STEP",
        help_heading = "Output"
    )]
    pub trace_steady: u32,
}

/// What `--trace` has recorded so far.
pub struct Tracing {
    args: TraceArgs,
    trace: Option<Trace>,
    written: bool,
    /// What to tell the user once the file is written.
    note: Option<String>,
}

impl TraceArgs {
    /// Refuses a steady step that cannot be one (checked before training).
    pub fn check(&self) -> Result<(), Failure> {
        if self.trace.is_some() && self.trace_steady < 2 {
            return Err(Failure::Usage(tidepool::Error::Config(format!(
                "--trace-steady must be 2 or later (step 1 is traced as the first), got {}",
                self.trace_steady
            ))));
        }
        Ok(())
    }

    pub fn start(self) -> Tracing {
        Tracing {
            args: self,
            trace: None,
            written: false,
            note: None,
        }
    }
}

impl Tracing {
    /// The next steps, at most `n` (at least 1), in one call of [`Trainer::steps`]:
    /// fewer where a traced step comes, which goes alone, traced.
    pub async fn steps(
        &mut self,
        trainer: &mut Trainer,
        n: u32,
    ) -> Result<Vec<StepStats>, tidepool::Error> {
        let next = trainer.steps_done() + 1;
        let n = match self.next_traced(next) {
            Some(t) if t == next => return Ok(vec![self.step(trainer).await?]),
            Some(t) => n.min(t - next),
            None => n,
        };
        if n <= 1 {
            return Ok(vec![trainer.step().await?]);
        }
        trainer.steps(n).await
    }

    /// A step from `from` on is still to be traced.
    pub fn traces_from(&self, from: u32) -> bool {
        self.next_traced(from).is_some()
    }

    /// The first step from `from` on that is still to be traced.
    fn next_traced(&self, from: u32) -> Option<u32> {
        let steady = self.args.trace_steady;
        self.args.trace.as_ref()?;
        [1, steady].into_iter().find(|&t| t >= from)
    }

    /// One training step, traced when it is the first or the steady step.
    async fn step(&mut self, trainer: &mut Trainer) -> Result<StepStats, tidepool::Error> {
        let next = trainer.steps_done() + 1;
        if self.next_traced(next) != Some(next) {
            return trainer.step().await;
        }
        let steady = self.args.trace_steady;
        let label = if next == 1 { "first" } else { "steady" };
        let (stats, step) = trainer.step_traced(label).await?;
        self.trace
            .get_or_insert_with(|| trainer.context().new_trace())
            .steps
            .push(step);
        if next == steady {
            self.write()?;
        }
        Ok(stats)
    }

    /// Writes the trace file (once), if one was asked for; [`Tracing::take_note`]
    /// then says so.
    pub fn write(&mut self) -> Result<(), tidepool::Error> {
        let (Some(path), Some(trace)) = (&self.args.trace, &self.trace) else {
            return Ok(());
        };
        if self.written {
            return Ok(());
        }
        tidepool::files::write_whole(path, "trace", trace.to_json().as_bytes())?;
        self.written = true;
        let steps: Vec<u32> = trace.steps.iter().map(|s| s.step).collect();
        self.note = Some(format!(
            "trace of steps {} written to {}",
            in_words(&steps),
            path.display()
        ));
        Ok(())
    }

    /// That the trace file was written, once, when it has been.
    pub fn take_note(&mut self) -> Option<String> {
        self.note.take()
    }
}

/// `tidepool trace ...`
#[derive(clap::Args)]
pub struct TraceCommand {
    #[command(subcommand)]
    which: TraceWhich,
}

#[derive(clap::Subcommand)]
enum TraceWhich {
    /// What every size policy and plan would have held for a recorded training step,
    /// without the GPU, against the lower bound (the most bytes live at once) and
    /// the allocator that ran. The repeating step is found in the events.
    Replay {
        /// A PyTorch memory snapshot (`torch.cuda.memory._dump_snapshot`, a pickle)
        /// or a trace written by `tidepool train --trace`.
        file: std::path::PathBuf,
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Replay events A..B (from 0, B not included) instead of the step found.
        #[arg(long, value_name = "A..B", allow_hyphen_values = true, value_parser = event_range)]
        events: Option<(u32, u32)>,
        /// The device of a PyTorch snapshot (default: the one with the most events).
        #[arg(long, value_name = "N")]
        device: Option<u32>,
        /// The largest file read, in MiB (at most 4095).
        #[arg(long, default_value_t = DEFAULT_MAX_MB, value_name = "MIB",
              value_parser = clap::value_parser!(u64).range(1..=4095))]
        max_mb: u64,
    },
    /// What recording costs: steps of a preset alternately untraced and traced,
    /// after warm-up; mean ms of each and events a step.
    Bench {
        #[arg(long, default_value = "tiny", value_parser = tidepool::config::PRESETS)]
        preset: String,
        /// Pairs of steps timed.
        #[arg(long, allow_negative_numbers = true, default_value_t = 20, value_parser = super::bench::count::<{ u32::MAX }>)]
        steps: u32,
        #[arg(long, allow_negative_numbers = true, default_value_t = 3)]
        warmup: u32,
    },
}

/// The largest file read by default, MiB: the library's default cap.
const DEFAULT_MAX_MB: u64 = pickle::MAX_BYTES >> 20;

/// `A..B`: events A to B, B not included, A below B.
fn event_range(text: &str) -> Result<(u32, u32), String> {
    let (a, b) = text
        .split_once("..")
        .ok_or_else(|| format!("expected A..B (events A to B, B not included), got {text}"))?;
    let number = |s: &str| {
        s.trim()
            .parse::<u32>()
            .map_err(|_| format!("{s:?} is not an event number from 0 to {}", u32::MAX))
    };
    let (a, b) = (number(a)?, number(b)?);
    if a >= b {
        return Err(format!("{a}..{b} holds no events: A must be below B"));
    }
    Ok((a, b))
}

pub fn run(command: TraceCommand) -> Outcome {
    match command.which {
        TraceWhich::Bench {
            preset,
            steps,
            warmup,
        } => pollster::block_on(bench(&preset, steps, warmup)),
        TraceWhich::Replay {
            file,
            json,
            events,
            device,
            max_mb,
        } => {
            let options = Options {
                limits: pickle::Limits::for_bytes(max_mb << 20),
                device,
                events,
            };
            replay(&file, json, &options)
        }
    }
}

/// `tidepool trace replay FILE`: the file read through [`snapshot::report`], whatever
/// wrote it.
fn replay(file: &std::path::Path, json: bool, options: &Options) -> Outcome {
    let name = file.display();
    let max = options.limits.max_bytes;
    let check = |len: u64| match len > max {
        true => Err(tidepool::Error::Trace(format!(
            "{name}: the file is {len} bytes; at most {max} are read (--max-mb {})",
            max >> 20
        ))),
        false => Ok(()),
    };
    let bytes = tidepool::files::read_capped(file, "trace", max, check)?;
    let report = snapshot::report(&bytes, options).map_err(|e| match e {
        tidepool::Error::Trace(m) => tidepool::Error::Trace(format!("{name}: {m}")),
        e => e,
    })?;
    if json {
        say!(
            "{}",
            serde_json::to_string(&report).expect("reports serialise")
        );
    } else {
        say!("{}", snapshot::report::table(&report).trim_end());
    }
    Ok(())
}

async fn bench(preset: &str, steps: u32, warmup: u32) -> Outcome {
    use tidepool::train::{now_ms, TrainConfig};
    let cfg = TrainConfig::preset(preset).map_err(Failure::Usage)?;
    let mut trainer = Trainer::new(cfg, tidepool::data::Corpus::builtin()).await?;
    for _ in 0..warmup {
        trainer.step().await?;
    }
    let (mut off, mut on, mut events) = (0.0, 0.0, 0);
    for i in 0..steps * 2 {
        // Alternate which goes first so drift favours neither.
        let traced = (i % 2 == 0) == (i / 2 % 2 == 0);
        let start = now_ms();
        if traced {
            let (_, step) = trainer.step_traced("steady").await?;
            on += now_ms() - start;
            events += step.events.len();
        } else {
            trainer.step().await?;
            off += now_ms() - start;
        }
    }
    let n = steps.max(1) as f64;
    say!(
        "{}",
        serde_json::json!({
            "preset": preset,
            "adapter": trainer.context().adapter_name(),
            "steps": steps,
            "ms_step_untraced": off / n,
            "ms_step_traced": on / n,
            "overhead": on / off - 1.0,
            "events_per_step": events as f64 / n,
        })
    );
    Ok(())
}

//! `tidepool train --trace FILE` and `tidepool trace replay FILE`: the allocation
//! trace on the command line (see `tidepool::trace` and `docs/trace.md`).

use tidepool::replay;
use tidepool::trace::Trace;
use tidepool::train::{StepStats, Trainer};

/// The train command's trace flags.
#[derive(clap::Args, Default)]
pub struct TraceArgs {
    /// Write the allocation trace of the first step and of a steady step to this
    /// JSON file (format: docs/trace.md).
    #[arg(long, value_name = "FILE")]
    pub trace: Option<std::path::PathBuf>,
    /// Which step --trace records as the steady one.
    #[arg(long, default_value_t = 3, value_name = "STEP")]
    pub trace_steady: u32,
}

/// What `--trace` has recorded so far.
pub struct Tracing {
    args: TraceArgs,
    trace: Option<Trace>,
    written: bool,
}

impl TraceArgs {
    pub fn start(self) -> Tracing {
        Tracing {
            args: self,
            trace: None,
            written: false,
        }
    }
}

impl Tracing {
    /// One training step, traced when it is the first or the steady step.
    pub async fn step(&mut self, trainer: &mut Trainer) -> Result<StepStats, tidepool::Error> {
        let next = trainer.steps_done() + 1;
        let steady = self.args.trace_steady.max(2);
        if self.args.trace.is_none() || (next != 1 && next != steady) {
            return trainer.step().await;
        }
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

    /// Writes the trace file (once), if one was asked for.
    pub fn write(&mut self) -> Result<(), tidepool::Error> {
        let (Some(path), Some(trace)) = (&self.args.trace, &self.trace) else {
            return Ok(());
        };
        if self.written {
            return Ok(());
        }
        std::fs::write(path, trace.to_json()).map_err(|e| {
            tidepool::Error::Config(format!("could not write the trace to {}: {e}", path.display()))
        })?;
        self.written = true;
        eprintln!("trace of steps {:?} written to {}", trace.steps.iter().map(|s| s.step).collect::<Vec<_>>(), path.display());
        Ok(())
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
    /// Replay a trace through each size policy and an offline offset plan, without
    /// the GPU, against the lower bound (the most bytes live at once).
    Replay {
        /// A trace written by `tidepool train --trace`.
        file: std::path::PathBuf,
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// Largest trace file read (a traced shakespeare step is a few MB).
const MAX_TRACE_BYTES: u64 = 512 << 20;

pub fn run(command: TraceCommand) -> Result<(), tidepool::Error> {
    match command.which {
        TraceWhich::Replay { file, json } => {
            let bad = |m: String| tidepool::Error::Config(m);
            let len = std::fs::metadata(&file)
                .map_err(|e| bad(format!("could not read {}: {e}", file.display())))?
                .len();
            if len > MAX_TRACE_BYTES {
                return Err(bad(format!(
                    "{} is {len} bytes; traces above {MAX_TRACE_BYTES} bytes are refused",
                    file.display()
                )));
            }
            let text = std::fs::read_to_string(&file)
                .map_err(|e| bad(format!("could not read {}: {e}", file.display())))?;
            let trace = Trace::from_json(&text).map_err(bad)?;
            let replays = replay::replay(&trace);
            if json {
                println!("{}", serde_json::to_string(&replays).expect("replays serialise"));
            } else {
                print!("{}", replay::table(&replays));
            }
            Ok(())
        }
    }
}

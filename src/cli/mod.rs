//! The native command line, one module a command: `train`, `sample`, `info`,
//! `bench`, `trace`; beside them, how `train` reports a run (`report`), and how
//! anything is printed (`output`). `train` groups its steps into calls as the page's
//! worker does, by [`tidepool::train::Schedule`].
//!
//! What a user reads goes to standard output; errors and notes go to standard
//! error. Exit status: 0 done, 1 the work failed, 2 the command line asks for
//! something invalid (as for clap's own refusals); never a panic.

use std::path::Path;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tidepool::checkpoint::Checkpoint;
use tidepool::data::Corpus;
use tidepool::Error;

mod bench;
mod info;
mod output;
mod report;
mod sample;
mod trace;
mod train;

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
    Train(Box<train::TrainArgs>),
    /// Sample text from a saved checkpoint after a prompt.
    Sample(sample::SampleArgs),
    /// Print the adapter wgpu picks (WGPU_BACKEND / WGPU_ADAPTER_NAME choose).
    Info,
    /// Measure the pool, a step, the kernels, the size policies or a long run.
    Bench {
        #[command(subcommand)]
        which: bench::Bench,
    },
    /// Work with allocation traces (`tidepool train --trace FILE` writes one) and
    /// PyTorch memory snapshots.
    Trace(trace::TraceCommand),
}

/// Why a command did not succeed.
pub enum Failure {
    /// The command line asks for something invalid, found before any work.
    Usage(Error),
    /// The work failed: a file, the GPU, the corpus, a checkpoint.
    Run(Error),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Run(e)
    }
}

/// A command's result.
pub type Outcome = Result<(), Failure>;

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Train(args) => pollster::block_on(train::run(*args)),
        Command::Sample(args) => pollster::block_on(sample::run(args)),
        Command::Info => pollster::block_on(info::run()),
        Command::Bench { which } => pollster::block_on(bench::run(which)),
        Command::Trace(args) => trace::run(args),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(e)) => {
            eprintln!("error: {e}\n\nFor more information, try '--help'.");
            ExitCode::from(2)
        }
        Err(Failure::Run(e)) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `Some(path)`'s text as a corpus (a UTF-8 file up to
/// [`tidepool::data::MAX_CORPUS_BYTES`]), or the built-in one.
fn corpus(path: Option<&Path>) -> Result<Corpus, Error> {
    use tidepool::data::{check_corpus_size, MAX_CORPUS_BYTES};
    let Some(path) = path else {
        return Ok(Corpus::builtin());
    };
    let name = path.display().to_string();
    let check = |len| check_corpus_size(&name, len);
    let bytes = tidepool::files::read_capped(path, "corpus", MAX_CORPUS_BYTES, check)?;
    Corpus::from_bytes(&name, &bytes)
}

/// The checkpoint at `path`, read and checked; what is wrong inside it is named by
/// its file, as a compiler names a source file:
/// `run.safetensors: bad checkpoint: not a complete safetensors file`.
fn checkpoint(path: &Path) -> Result<Checkpoint, Error> {
    let bytes = tidepool::checkpoint::read_file(path)?;
    Checkpoint::from_bytes(&bytes).map_err(|e| match e {
        Error::Checkpoint(m) => Error::Checkpoint(format!("{}: {m}", path.display())),
        e => e,
    })
}

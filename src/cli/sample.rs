//! `tidepool sample`: text from a saved checkpoint after a prompt.

use tidepool::train::Trainer;

use super::output::say;
use super::{Failure, Outcome};

#[derive(clap::Args)]
pub struct SampleArgs {
    /// A checkpoint written by `tidepool train --save`.
    #[arg(long, value_name = "FILE")]
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

pub async fn run(args: SampleArgs) -> Outcome {
    tidepool::train::check_sample_settings(
        args.tokens,
        args.temperature,
        ["--tokens", "--temperature"],
    )
    .map_err(Failure::Usage)?;
    let checkpoint = super::checkpoint(&args.checkpoint)?;
    let mut trainer = Trainer::from_checkpoint(checkpoint, None, |_| {}).await?;
    let text = trainer
        .sample(&args.prompt, args.tokens, args.temperature, args.top_k)
        .await?;
    say!("{}{text}", args.prompt);
    Ok(())
}

//! Load a checkpoint from library code and sample from it.
//!
//! ```sh
//! tidepool train --steps 200 --save run.safetensors
//! cargo run --release --example sample_checkpoint -- run.safetensors "fn main" 200
//! ```
//!
//! Without a corpus the trainer knows the vocabulary and can sample, not train:
//! pass `Some(corpus)` to `Trainer::resume` to continue the run instead.

#[cfg(not(target_arch = "wasm32"))]
use tidepool::checkpoint;
#[cfg(not(target_arch = "wasm32"))]
use tidepool::train::Trainer;

// Native only: it reads files (wasm32 builds an empty main, as `cargo test` builds
// every example for the browser tests too).
#[cfg(target_arch = "wasm32")]
fn main() {}

#[cfg(not(target_arch = "wasm32"))]
fn main() -> Result<(), tidepool::Error> {
    let mut args = std::env::args().skip(1);
    let path = args.next().unwrap_or_else(|| "run.safetensors".into());
    let prompt = args.next().unwrap_or_else(|| "\n".into());
    let length = match args.next() {
        None => 200,
        Some(n) => n
            .parse()
            .map_err(|_| tidepool::Error::Config(format!("length {n:?} is not a number")))?,
    };
    pollster::block_on(async {
        let bytes = checkpoint::read_file(path.as_ref())?;
        let mut trainer = Trainer::resume(&bytes, None).await?;
        let m = trainer.model();
        eprintln!(
            "{path}: step {}, {} layers, width {}, vocab {}",
            trainer.steps_done(),
            m.layers,
            m.width,
            m.vocab
        );
        let text = trainer.sample(&prompt, length, 0.8, 40).await?;
        println!("{prompt}{text}");
        Ok(())
    })
}

//! tidepool's loss on one seeded held-out batch of a checkpoint, written as JSON
//! with the batch itself, for scripts/torch_load_checkpoint.py to reproduce in
//! PyTorch from the same file.
//!
//! ```sh
//! cargo run --release --example checkpoint_loss -- run.safetensors [corpus.txt] > batch.json
//! python3 scripts/torch_load_checkpoint.py run.safetensors batch.json
//! ```
//!
//! The corpus (default: the built-in one) must be the run's: its held-out split
//! gives the batch.

#[cfg(not(target_arch = "wasm32"))]
use tidepool::checkpoint;
#[cfg(not(target_arch = "wasm32"))]
use tidepool::data::Corpus;
#[cfg(not(target_arch = "wasm32"))]
use tidepool::train::{Batcher, Trainer};

/// Seed of the batch's windows: any fixed value; the batch travels in the JSON.
#[cfg(not(target_arch = "wasm32"))]
const BATCH_SEED: u64 = 0xC0FFEE;

// Native only: it reads files (wasm32 builds an empty main, as `cargo test` builds
// every example for the browser tests too).
#[cfg(target_arch = "wasm32")]
fn main() {}

#[cfg(not(target_arch = "wasm32"))]
fn main() -> Result<(), tidepool::Error> {
    let mut args = std::env::args().skip(1);
    let path = args.next().unwrap_or_else(|| "run.safetensors".into());
    let corpus = match args.next() {
        None => Corpus::builtin(),
        Some(file) => {
            let bytes = std::fs::read(&file)
                .map_err(|e| tidepool::Error::Data(format!("cannot read {file}: {e}")))?;
            Corpus::from_bytes(&file, &bytes)?
        }
    };
    pollster::block_on(async {
        let bytes = checkpoint::read_file(path.as_ref())?;
        let trainer = Trainer::resume(&bytes, Some(corpus)).await?;
        let (b, t) = (trainer.config().batch, trainer.model().context);
        let val = &trainer.corpus().val;
        let (inputs, targets) = Batcher::new(BATCH_SEED).next(val, b, t);
        let loss = trainer.loss_on(&inputs, &targets).await?;
        let rows = |ids: &[u32]| ids.chunks(t).map(<[u32]>::to_vec).collect::<Vec<_>>();
        let out = serde_json::json!({
            "checkpoint": path,
            "step": trainer.steps_done(),
            "adapter": trainer.context().adapter_name(),
            "inputs": rows(&inputs),
            "targets": rows(&targets),
            "loss": loss,
        });
        println!("{out}");
        eprintln!("tidepool loss on {b} x {t} held-out tokens: {loss:.6}");
        Ok(())
    })
}

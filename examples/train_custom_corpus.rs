//! Training from library code on a corpus of your own: a tiny GPT, a few dozen steps,
//! then held-out loss and a sample.
//!
//! `cargo run --release --example train_custom_corpus [-- FILE.txt]`
//!
//! Without a file it trains on a small generated text (counting rhymes), which a
//! model this size learns within a few dozen steps even on a CPU adapter.

use tidepool::data::Corpus;
use tidepool::train::{TrainConfig, Trainer};

fn generated_text() -> String {
    let mut text = String::new();
    for i in 0..400 {
        let n = i % 10;
        text.push_str(&format!("{n} little fish swim in the pool, {n} go home.\n"));
    }
    text
}

async fn run(corpus: Corpus) -> tidepool::Result<()> {
    // Start from a preset and override what you like; `validate` (called by
    // `Trainer::new`) says which setting is out of range and why.
    let config = TrainConfig {
        layers: 1,
        heads: 2,
        width: 32,
        context: 16,
        batch: 4,
        lr: 1e-2,
        warmup: 5,
        steps: 60,
        ..TrainConfig::preset("tiny")?
    };
    println!(
        "corpus {}: {} bytes, vocab {}, {} tokens",
        corpus.name,
        corpus.bytes,
        corpus.vocab_size(),
        corpus.tokens()
    );
    let mut trainer = Trainer::new(config, corpus).await?;
    println!("adapter: {}", trainer.context().adapter_name());

    let mut losses = Vec::new();
    for _ in 0..60 {
        let stats = trainer.step().await?;
        if stats.step % 10 == 0 {
            println!(
                "step {:>3}  loss {:.3}  {:.0} ms  pool hit rate {:.1}%  buffers created this step {}",
                stats.step,
                stats.loss,
                stats.ms,
                stats.step_hit_rate * 100.0,
                stats.buffers_created_step
            );
        }
        losses.push(stats.loss);
    }
    let held_out = trainer.evaluate().await?;
    let sample = trainer.sample("3 little", 40, 0.8, 10).await?;
    println!("held-out loss {held_out:.3}\nsample: 3 little{sample}");

    let mean = |xs: &[f32]| xs.iter().sum::<f32>() / xs.len() as f32;
    let (first, last) = (mean(&losses[..5]), mean(&losses[losses.len() - 5..]));
    assert!(
        last < 0.7 * first,
        "the loss should fall well below where it started: first steps {first:.3}, last steps {last:.3}"
    );
    assert_eq!(
        trainer.stats().buffers_created_step,
        0,
        "steady state: every buffer from the pool"
    );
    Ok(())
}

fn main() {
    let corpus = match std::env::args().nth(1) {
        Some(path) => std::fs::read(&path)
            .map_err(|e| tidepool::Error::Data(format!("cannot read {path}: {e}")))
            .and_then(|bytes| Corpus::from_bytes(&path, &bytes)),
        None => Corpus::from_text("counting rhymes", &generated_text()),
    };
    #[cfg(not(target_arch = "wasm32"))]
    if let Err(e) = corpus.and_then(|corpus| pollster::block_on(run(corpus))) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
    #[cfg(target_arch = "wasm32")]
    let _ = corpus.map(|corpus| {
        wasm_bindgen_futures::spawn_local(async {
            run(corpus).await.ok();
        })
    });
}

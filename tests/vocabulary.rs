//! Training on a vocabulary past 65,536 characters (the corpus cap allows far
//! more): the CPU adapters' kernels and the GPUs' learn alike, step by step. A
//! kernel that loops over the whole vocabulary in one invocation was cut short by
//! lavapipe there, and the CPU tuning's loss came out wrong with no error. Native
//! only: in headless Chromium (SwiftShader) it took seven minutes; the browser
//! checks the kernels at this vocabulary in tests/ops (crossentropy, matmul).
#![cfg(not(target_arch = "wasm32"))]

use tidepool::data::Corpus;
use tidepool::gpu::ContextOptions;
use tidepool::kernels::Target;
use tidepool::rng::Rng;
use tidepool::train::{TrainConfig, Trainer};

/// Distinct characters of the corpus.
const VOCAB: usize = 70_000;

/// Every one of [`VOCAB`] characters (CJK and beyond, no control characters) once,
/// then text drawn from a few hundred of them: something to learn.
fn wide_corpus() -> Corpus {
    let chars: Vec<char> = (0x4E00u32..)
        .filter_map(char::from_u32)
        .filter(|c| !c.is_control())
        .take(VOCAB)
        .collect();
    let mut rng = Rng::new(7);
    let mut text: String = chars.iter().collect();
    text.extend((0..30_000).map(|_| chars[rng.below(300)]));
    let corpus = Corpus::from_text("wide.txt", &text).expect("a valid corpus");
    assert_eq!(corpus.vocab_size(), VOCAB);
    corpus
}

#[test]
fn a_wide_vocabulary_learns_alike_on_both_tunings() {
    pollster::block_on(wide_body())
}

async fn wide_body() {
    let cfg = TrainConfig {
        layers: 1,
        width: 16,
        heads: 2,
        context: 8,
        batch: 2,
        lr: 1e-2,
        warmup: 1,
        steps: 20,
        eval_batches: 2,
        ..TrainConfig::default()
    };
    let corpus = wide_corpus();
    let mut runs = Vec::new();
    for target in Target::ALL {
        let options = ContextOptions {
            kernels: Some(target),
            ..ContextOptions::default()
        };
        let mut trainer = Trainer::with_options(cfg.clone(), corpus.clone(), options)
            .await
            .expect("trainer");
        let mut losses = Vec::new();
        for _ in 0..4 {
            losses.push(trainer.step().await.expect("step").loss);
        }
        losses.push(trainer.evaluate().await.expect("evaluate"));
        runs.push((target, losses));
    }
    let ((one, a_losses), (other, b_losses)) = (&runs[0], &runs[1]);
    // ln(70,000) = 11.16 at the start; a cut-short sum gave 6 or negative losses.
    let start = a_losses[0];
    assert!(
        (start - (VOCAB as f32).ln()).abs() < 0.5,
        "first loss {start}"
    );
    for (i, (a, b)) in a_losses.iter().zip(b_losses).enumerate() {
        let what = if i < 4 {
            format!("step {}", i + 1)
        } else {
            "held-out".into()
        };
        assert!(
            (a - b).abs() <= 1e-3 * b.abs().max(1.0),
            "{what}: {one:?} kernels {a}, {other:?} kernels {b}"
        );
    }
}

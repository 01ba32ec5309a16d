//! tidepool against PyTorch (llm.c's gold check): each fixture in tests/fixtures/ holds
//! a small GPT's weights, one batch, and what PyTorch's autograd and AdamW computed
//! from them in float64 (scripts/torch_fixtures.py, which says how to regenerate):
//! the loss, every gradient, and the parameters after three optimizer steps. The GPU
//! trainer, loaded with the same weights, must reproduce them. Runs natively and in
//! headless Chromium; the fixtures are compiled in, so the browser needs no files.

mod common;

use std::collections::HashMap;

use safetensors::tensor::Dtype;
use safetensors::SafeTensors;
use tidepool::data::Corpus;
use tidepool::train::{TrainConfig, Trainer};

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

/// PyTorch's loss, relative.
const LOSS_TOL: f64 = 1e-5;
/// Every gradient tensor and every parameter after the steps: relative L2 distance.
const TENSOR_TOL: f64 = 1e-4;

struct Fixture<'a> {
    tensors: SafeTensors<'a>,
    meta: HashMap<String, String>,
}

impl<'a> Fixture<'a> {
    fn parse(bytes: &'a [u8]) -> Self {
        let (_, header) = SafeTensors::read_metadata(bytes).expect("fixture header");
        let meta = header.metadata().clone().expect("fixture metadata");
        let tensors = SafeTensors::deserialize(bytes).expect("fixture tensors");
        Fixture { tensors, meta }
    }

    fn f32s(&self, name: &str) -> Vec<f32> {
        let view = self
            .tensors
            .tensor(name)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(view.dtype(), Dtype::F32, "{name}");
        view.data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    }

    fn ids(&self, name: &str) -> Vec<u32> {
        let view = self
            .tensors
            .tensor(name)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(view.dtype(), Dtype::I32, "{name}");
        view.data()
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u32)
            .collect()
    }

    fn json(&self, key: &str) -> serde_json::Value {
        serde_json::from_str(&self.meta[key]).unwrap_or_else(|e| panic!("metadata {key}: {e}"))
    }
}

/// `|got - want| / |want|` in L2 over the tensor.
fn rel_l2(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len());
    let diff: f64 = got
        .iter()
        .zip(want)
        .map(|(a, b)| (*a as f64 - *b as f64).powi(2))
        .sum();
    let norm: f64 = want.iter().map(|b| (*b as f64).powi(2)).sum();
    (diff / norm.max(1e-30)).sqrt()
}

/// `values` of tensor `name`, less the key bias (the middle third of
/// `attn.c_attn.bias`) when there is one. Softmax ignores a shift common to a row of
/// scores, and the key bias adds `q . b_k` to every score of a row, so its gradient is
/// exactly zero: PyTorch's float64 gives about 1e-17, tidepool's float32 rounding noise
/// about 1e-9, and AdamW divides each by `sqrt(v) + eps` (eps 1e-8), which turns the
/// noise into steps of up to about half the learning rate. Those coordinates say
/// nothing about correctness; their gradient is still checked with the others.
fn without_key_bias(name: &str, values: &[f32], width: usize) -> Vec<f32> {
    if name.ends_with(".attn.c_attn.bias") {
        assert_eq!(values.len(), 3 * width, "{name}");
        [&values[..width], &values[2 * width..]].concat()
    } else {
        values.to_vec()
    }
}

/// A corpus whose tokenizer has exactly `vocab` ids, long enough for `context`: the
/// trainer needs one, though the fixture supplies the batch.
fn corpus(vocab: usize, context: usize) -> Corpus {
    let chars: Vec<char> = ('a'..='z').chain('A'..='Z').take(vocab).collect();
    assert_eq!(chars.len(), vocab, "fixture vocab above 52");
    let text: String = chars.iter().cycle().take(20 * (context + 2)).collect();
    Corpus::from_text("fixture", &text).expect("corpus")
}

/// Loads the fixture into a GPU trainer, then checks the step-1 loss and gradients
/// and the parameters after the fixture's optimizer steps.
async fn check_fixture(name: &str, bytes: &[u8]) {
    let fx = Fixture::parse(bytes);
    let gpt = fx.json("gpt");
    let train = fx.json("train");
    let cfg: TrainConfig = serde_json::from_value(train.clone()).expect("train config");
    // The placement must reach the trainer: a build without the setting drops only
    // the residual sites, which is right for a `residual` fixture alone.
    let want_placement = &train["dropout_placement"];
    match serde_json::to_value(&cfg)
        .expect("config")
        .get("dropout_placement")
    {
        Some(got) => assert_eq!(got, want_placement, "{name}: dropout placement"),
        None => assert_eq!(
            want_placement, "residual",
            "{name}: this build has no dropout_placement setting (it drops the residual \
             sites only), the fixture wants {want_placement}"
        ),
    }
    let vocab = gpt["vocab"].as_u64().expect("vocab") as usize;
    let mut trainer = Trainer::new(cfg.clone(), corpus(vocab, cfg.context))
        .await
        .expect("trainer");
    assert_eq!(
        serde_json::to_value(trainer.model()).expect("model"),
        gpt,
        "{name}: model config"
    );
    let specs = trainer.model().params();
    let weights: Vec<Vec<f32>> = specs.iter().map(|s| fx.f32s(&s.name)).collect();
    trainer.set_parameters(&weights).expect("set parameters");
    let (inputs, targets) = (fx.ids("idx"), fx.ids("targets"));

    let mut report = Vec::new();
    let (loss, grads) = trainer
        .compute_gradients(&inputs, &targets)
        .await
        .expect("gradients");
    let want_loss = fx.f32s("loss")[0] as f64;
    let loss_err = (loss as f64 - want_loss).abs() / want_loss.abs();
    report.push(format!("loss {loss} vs {want_loss} (rel {loss_err:.1e})"));
    assert!(
        loss_err <= LOSS_TOL,
        "{name}: loss {loss} vs PyTorch {want_loss}: relative error {loss_err:e}"
    );
    let mut worst = (0.0, String::new());
    for (spec, got) in specs.iter().zip(&grads) {
        let err = rel_l2(got, &fx.f32s(&format!("grad.{}", spec.name)));
        assert!(
            err <= TENSOR_TOL,
            "{name}: gradient of {}: relative L2 distance {err:e} from PyTorch",
            spec.name
        );
        if err >= worst.0 {
            worst = (err, spec.name.clone());
        }
    }
    report.push(format!("worst gradient {} {:.1e}", worst.1, worst.0));

    let want_losses = fx.f32s("losses");
    let steps: usize = fx.meta["update_steps"].parse().expect("update_steps");
    assert_eq!(want_losses.len(), steps);
    for (i, want) in want_losses.iter().enumerate() {
        let got = trainer.step_on(&inputs, &targets).await.expect("step").loss;
        let err = ((got - want) / want).abs() as f64;
        report.push(format!("step {} loss rel {err:.1e}", i + 1));
        assert!(
            err <= LOSS_TOL,
            "{name}: step {}: loss {got} vs PyTorch {want}: relative error {err:e}",
            i + 1
        );
    }
    let after = trainer.parameters().await.expect("parameters");
    let width = gpt["width"].as_u64().expect("width") as usize;
    let mut worst = (0.0, String::new());
    for (spec, got) in specs.iter().zip(&after) {
        let want = fx.f32s(&format!("after.{}", spec.name));
        let (got, want) = (
            without_key_bias(&spec.name, got, width),
            without_key_bias(&spec.name, &want, width),
        );
        let err = rel_l2(&got, &want);
        assert!(
            err <= TENSOR_TOL,
            "{name}: {} after {steps} steps: relative L2 distance {err:e} from PyTorch",
            spec.name
        );
        if err >= worst.0 {
            worst = (err, spec.name.clone());
        }
    }
    report.push(format!(
        "worst parameter after {steps} steps {} {:.1e}",
        worst.1, worst.0
    ));
    // Natively, `--nocapture` shows the tolerances reached.
    println!("{name}: {}", report.join("; "));
}

gpu_test!(
    matches_pytorch_without_dropout,
    check_fixture(
        "gpt_dropout0",
        include_bytes!("fixtures/gpt_dropout0.safetensors")
    )
);

gpu_test!(
    matches_pytorch_with_residual_dropout,
    check_fixture(
        "gpt_dropout_residual",
        include_bytes!("fixtures/gpt_dropout_residual.safetensors")
    )
);

gpu_test!(
    matches_pytorch_with_nanogpt_dropout,
    check_fixture(
        "gpt_dropout_nanogpt",
        include_bytes!("fixtures/gpt_dropout_nanogpt.safetensors")
    )
);

//! Writes the starting state of a PyTorch gold fixture: a small GPT's parameters,
//! initialised from a seed as the trainer does, one batch of tokens, and the configs,
//! in one safetensors file. `scripts/torch_fixtures.py` reads it, computes the loss,
//! gradients and three optimizer steps with PyTorch, and writes the fixture that
//! `tests/torch_fixtures.rs` checks tidepool against.
//!
//! `cargo run --release --example fixture_state -- OUT.safetensors [--dropout P]
//! [--placement residual|nanogpt] [--width C] [--heads H] ...` (`--help` lists all).
//!
//! Tensors: every parameter under its nanoGPT name with PyTorch's shape (matrices
//! `[out, in]`), `idx` and `targets` (`[batch, seq]`, i32). Metadata: `gpt` (the
//! GptConfig), `train` (the TrainConfig, plus `dropout_placement`), `decay` (names of
//! the tensors weight decay applies to), `update_steps` (optimizer steps to check,
//! 1-based, each with its own dropout masks; the gradients are those of step 1).

#[cfg(target_arch = "wasm32")]
fn main() {}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    if let Err(e) = writer::run() {
        eprintln!("fixture_state: {e}");
        std::process::exit(1);
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod writer {
    use std::collections::HashMap;

    use clap::Parser;
    use safetensors::tensor::{Dtype, TensorView};
    use tidepool::model::GptConfig;
    use tidepool::rng::Rng;
    use tidepool::train::TrainConfig;

    /// Odd sizes on purpose: nothing a power of two, so an indexing slip shows.
    #[derive(Parser)]
    struct Args {
        /// Where to write the state (safetensors).
        out: std::path::PathBuf,
        #[arg(long, default_value_t = 0.0)]
        dropout: f32,
        /// `residual`: embeddings and both residual branches; `nanogpt`: also the
        /// attention probabilities.
        #[arg(long, default_value = "residual")]
        placement: String,
        #[arg(long, default_value_t = 2)]
        layers: usize,
        #[arg(long, default_value_t = 2)]
        heads: usize,
        #[arg(long, default_value_t = 20)]
        width: usize,
        #[arg(long, default_value_t = 13)]
        vocab: usize,
        /// Positions in `wpe`, and tokens a sequence of the batch (training always
        /// runs full windows).
        #[arg(long, default_value_t = 13)]
        context: usize,
        #[arg(long, default_value_t = 3)]
        batch: usize,
        #[arg(long, default_value_t = 1e-2)]
        lr: f32,
        /// Warmup 2 and a schedule of 5 steps: steps 1, 2, 3 see the warmup ramp,
        /// the peak and the cosine decay.
        #[arg(long, default_value_t = 2)]
        warmup: u32,
        #[arg(long, default_value_t = 5)]
        steps: u32,
        #[arg(long, default_value_t = 0.1)]
        weight_decay: f32,
        /// Below the gradient norm of these models at init, so clipping acts.
        #[arg(long, default_value_t = 0.5)]
        grad_clip: f32,
        #[arg(long, default_value_t = 1337)]
        seed: u64,
        /// Optimizer steps the fixture checks.
        #[arg(long, default_value_t = 3)]
        update_steps: u32,
    }

    /// PyTorch's shape of the tensor `name` (nanoGPT's state dict).
    fn shape(name: &str, m: &GptConfig) -> Vec<usize> {
        let (v, t, c) = (m.vocab, m.context, m.width);
        let suffix = name.rsplit_once(".h.").map_or(name, |(_, rest)| {
            rest.split_once('.').map_or(rest, |(_, s)| s)
        });
        match suffix {
            "transformer.wte.weight" => vec![v, c],
            "transformer.wpe.weight" => vec![t, c],
            "attn.c_attn.weight" => vec![3 * c, c],
            "attn.c_attn.bias" => vec![3 * c],
            "attn.c_proj.weight" => vec![c, c],
            "mlp.c_fc.weight" => vec![4 * c, c],
            "mlp.c_fc.bias" => vec![4 * c],
            "mlp.c_proj.weight" => vec![c, 4 * c],
            _ => vec![c], // layernorm gains and biases, projection biases
        }
    }

    fn le_bytes<T: Copy>(values: &[T], to: impl Fn(T) -> [u8; 4]) -> Vec<u8> {
        values.iter().flat_map(|&v| to(v)).collect()
    }

    pub fn run() -> Result<(), String> {
        let a = Args::parse();
        if !matches!(a.placement.as_str(), "residual" | "nanogpt") {
            return Err(format!(
                "--placement must be residual or nanogpt, got {:?}",
                a.placement
            ));
        }
        let cfg = TrainConfig {
            layers: a.layers,
            heads: a.heads,
            width: a.width,
            context: a.context,
            batch: a.batch,
            lr: a.lr,
            warmup: a.warmup,
            steps: a.steps,
            weight_decay: a.weight_decay,
            grad_clip: a.grad_clip,
            dropout: a.dropout,
            seed: a.seed,
            ..TrainConfig::preset("tiny").expect("tiny exists")
        };
        cfg.validate().map_err(|e| e.to_string())?;
        let model = cfg.model(a.vocab);
        model.validate().map_err(|e| e.to_string())?;

        let specs = model.params();
        let values = model.init(cfg.seed);
        let mut data: Vec<(String, Vec<usize>, Dtype, Vec<u8>)> = Vec::new();
        for (spec, v) in specs.iter().zip(&values) {
            let shape = shape(&spec.name, &model);
            assert_eq!(shape.iter().product::<usize>(), spec.len, "{}", spec.name);
            data.push((
                spec.name.clone(),
                shape,
                Dtype::F32,
                le_bytes(v, f32::to_le_bytes),
            ));
        }
        // One batch: windows of a random token stream, targets the next token.
        let mut rng = Rng::new(cfg.seed ^ 0xF1C5);
        let (mut idx, mut targets) = (Vec::new(), Vec::new());
        for _ in 0..a.batch {
            let row: Vec<i32> = (0..=a.context).map(|_| rng.below(a.vocab) as i32).collect();
            idx.extend_from_slice(&row[..a.context]);
            targets.extend_from_slice(&row[1..]);
        }
        for (name, ids) in [("idx", &idx), ("targets", &targets)] {
            let bytes = le_bytes(ids, i32::to_le_bytes);
            data.push((name.into(), vec![a.batch, a.context], Dtype::I32, bytes));
        }

        let mut train = serde_json::to_value(&cfg).map_err(|e| e.to_string())?;
        train["dropout_placement"] = a.placement.clone().into();
        let decay: Vec<&str> = specs
            .iter()
            .filter(|s| s.decay)
            .map(|s| s.name.as_str())
            .collect();
        let json = |v: serde_json::Value| v.to_string();
        let metadata: HashMap<String, String> = [
            (
                "gpt",
                json(serde_json::to_value(&model).map_err(|e| e.to_string())?),
            ),
            ("train", json(train)),
            ("decay", json(decay.into())),
            ("update_steps", a.update_steps.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();

        let views = data
            .iter()
            .map(|(name, shape, dtype, bytes)| {
                TensorView::new(*dtype, shape.clone(), bytes)
                    .map(|view| (name.clone(), view))
                    .map_err(|e| format!("{name}: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        safetensors::serialize_to_file(views, Some(metadata), &a.out)
            .map_err(|e| format!("writing {}: {e}", a.out.display()))?;
        eprintln!(
            "wrote {} ({} parameters, batch {} x {})",
            a.out.display(),
            model.num_params(),
            a.batch,
            a.context
        );
        Ok(())
    }
}

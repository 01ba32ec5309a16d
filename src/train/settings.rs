//! What a [`TrainConfig`] means to the model and the optimizer: the GPT it trains and
//! AdamW's hyperparameters at a step. Here rather than in [`crate::config`], which
//! imports nothing that builds on it.

use crate::config::TrainConfig;
use crate::kernels::AdamW;
use crate::model::{GptConfig, ParamSpec};

impl TrainConfig {
    /// The model this config trains on a corpus of `vocab` characters.
    pub fn model(&self, vocab: usize) -> GptConfig {
        GptConfig {
            vocab,
            context: self.context,
            layers: self.layers,
            heads: self.heads,
            width: self.width,
        }
    }

    /// AdamW's hyperparameters at 1-based `step` for the tensor `spec`.
    pub fn adamw(&self, step: u32, spec: &ParamSpec) -> AdamW {
        AdamW {
            weight_decay: if spec.decay { self.weight_decay } else { 0.0 },
            ..self.adamw_decayed(step)
        }
    }

    /// The same for a tensor that decays (matrices and embeddings).
    pub fn adamw_decayed(&self, step: u32) -> AdamW {
        AdamW {
            lr: self.lr_at(step),
            beta1: self.beta1,
            beta2: self.beta2,
            eps: self.eps,
            weight_decay: self.weight_decay,
            step,
        }
    }
}

//! The shape of a GPT and its parameter tensors: names, sizes, initial values.

use super::params::{BlockParams, GptParams};
use crate::error::{Error, Result};
use crate::rng::Rng;

/// Shape of a GPT.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GptConfig {
    pub vocab: usize,
    /// Longest sequence the model sees (positions in `wpe`).
    pub context: usize,
    pub layers: usize,
    pub heads: usize,
    /// Channels (embedding width).
    pub width: usize,
}

impl GptConfig {
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Config(m));
        for (name, value) in [
            ("vocab", self.vocab),
            ("context", self.context),
            ("layers", self.layers),
            ("heads", self.heads),
            ("width", self.width),
        ] {
            if value == 0 {
                return bad(format!("{name} must be at least 1"));
            }
        }
        if !self.width.is_multiple_of(self.heads) {
            return bad(format!(
                "width {} must be a multiple of heads {}",
                self.width, self.heads
            ));
        }
        if !self.width.is_multiple_of(4) {
            return bad(format!("width {} must be a multiple of 4", self.width));
        }
        Ok(())
    }

    /// Parameter tensors, in the one order every part of the crate uses (the flat
    /// order of [`GptParams::into_flat`]). Names follow nanoGPT's GPT-2 state dict, and
    /// every matrix is stored as PyTorch's `nn.Linear` stores it (`[out, in]`,
    /// row-major), so PyTorch code loads them without renaming or transposing. The
    /// output head is tied to `transformer.wte.weight`.
    pub fn params(&self) -> Vec<ParamSpec> {
        self.param_specs().into_flat()
    }

    /// [`GptConfig::params`] by name: the one place parameter names, sizes and inits
    /// are written.
    pub fn param_specs(&self) -> GptParams<ParamSpec> {
        let (v, t, c, l) = (self.vocab, self.context, self.width, self.layers);
        let std = 0.02;
        // GPT-2: residual projections scaled down so the residual stream's variance
        // does not grow with depth.
        let proj_std = 0.02 / ((2 * l) as f32).sqrt();
        let block = |i: usize| {
            let spec = |name: &str, len, init, decay| {
                ParamSpec::new(&format!("transformer.h.{i}.{name}"), len, init, decay)
            };
            BlockParams {
                ln_1_weight: spec("ln_1.weight", c, Init::Ones, false),
                ln_1_bias: spec("ln_1.bias", c, Init::Zeros, false),
                c_attn_weight: spec("attn.c_attn.weight", 3 * c * c, Init::Normal(std), true),
                c_attn_bias: spec("attn.c_attn.bias", 3 * c, Init::Zeros, false),
                attn_proj_weight: spec("attn.c_proj.weight", c * c, Init::Normal(proj_std), true),
                attn_proj_bias: spec("attn.c_proj.bias", c, Init::Zeros, false),
                ln_2_weight: spec("ln_2.weight", c, Init::Ones, false),
                ln_2_bias: spec("ln_2.bias", c, Init::Zeros, false),
                c_fc_weight: spec("mlp.c_fc.weight", 4 * c * c, Init::Normal(std), true),
                c_fc_bias: spec("mlp.c_fc.bias", 4 * c, Init::Zeros, false),
                mlp_proj_weight: spec("mlp.c_proj.weight", 4 * c * c, Init::Normal(proj_std), true),
                mlp_proj_bias: spec("mlp.c_proj.bias", c, Init::Zeros, false),
            }
        };
        GptParams {
            wte: ParamSpec::new("transformer.wte.weight", v * c, Init::Normal(std), true),
            wpe: ParamSpec::new("transformer.wpe.weight", t * c, Init::Normal(std), true),
            blocks: (0..l).map(block).collect(),
            ln_f_weight: ParamSpec::new("transformer.ln_f.weight", c, Init::Ones, false),
            ln_f_bias: ParamSpec::new("transformer.ln_f.bias", c, Init::Zeros, false),
        }
    }

    pub fn num_params(&self) -> usize {
        self.params().iter().map(|p| p.len).sum()
    }

    /// Initial values of every parameter, deterministic in `seed`.
    pub fn init(&self, seed: u64) -> Vec<Vec<f32>> {
        let mut rng = Rng::new(seed);
        self.params()
            .iter()
            .map(|spec| match spec.init {
                Init::Normal(std) => (0..spec.len).map(|_| rng.normal() * std).collect(),
                Init::Ones => vec![1.0; spec.len],
                Init::Zeros => vec![0.0; spec.len],
            })
            .collect()
    }

    /// The largest single tensor a step of `batch` x `seq` tokens allocates, with
    /// its name: the first thing that stops fitting on a small device.
    pub fn largest_tensor(&self, batch: usize, seq: usize) -> (u64, &'static str) {
        let rows = (batch * seq) as u64;
        let c = self.width as u64;
        [
            (
                rows * 4 * c * 4,
                "the MLP activation (batch x context x 4 width)",
            ),
            (
                rows * self.vocab as u64 * 4,
                "the logits (batch x context x vocab)",
            ),
            (
                (batch * self.heads * seq * seq) as u64 * 4,
                "the attention matrix (batch x heads x context^2)",
            ),
            ((self.vocab * self.width) as u64 * 4, "the token embedding"),
        ]
        .into_iter()
        .max_by_key(|(bytes, _)| *bytes)
        .expect("non-empty")
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    Normal(f32),
    Ones,
    Zeros,
}

/// One parameter tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamSpec {
    pub name: String,
    pub len: usize,
    pub init: Init,
    /// Weight decay applies to matrices and embeddings, not to biases and layernorm
    /// gains (as nanoGPT does).
    pub decay: bool,
}

impl ParamSpec {
    fn new(name: &str, len: usize, init: Init, decay: bool) -> Self {
        ParamSpec {
            name: name.to_string(),
            len,
            init,
            decay,
        }
    }
}

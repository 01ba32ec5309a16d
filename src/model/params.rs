//! Every tensor of a GPT by name, in the one flat order the rest of the crate uses.

use crate::error::{Error, Result};

/// One block's parameters (nanoGPT's `transformer.h.{l}`), fields in flat order.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockParams<T> {
    pub ln_1_weight: T,
    pub ln_1_bias: T,
    /// `attn.c_attn`: the fused query/key/value projection, `[3c, c]`.
    pub c_attn_weight: T,
    pub c_attn_bias: T,
    /// `attn.c_proj`: the attention output projection, `[c, c]`.
    pub attn_proj_weight: T,
    pub attn_proj_bias: T,
    pub ln_2_weight: T,
    pub ln_2_bias: T,
    /// `mlp.c_fc`: `[4c, c]`.
    pub c_fc_weight: T,
    pub c_fc_bias: T,
    /// `mlp.c_proj`: `[c, 4c]`.
    pub mlp_proj_weight: T,
    pub mlp_proj_bias: T,
}

/// Tensors per block.
const BLOCK_TENSORS: usize = 12;

impl<T> BlockParams<T> {
    pub(super) fn from_array(a: [T; BLOCK_TENSORS]) -> Self {
        let [ln_1_weight, ln_1_bias, c_attn_weight, c_attn_bias, attn_proj_weight, attn_proj_bias, ln_2_weight, ln_2_bias, c_fc_weight, c_fc_bias, mlp_proj_weight, mlp_proj_bias] =
            a;
        BlockParams {
            ln_1_weight,
            ln_1_bias,
            c_attn_weight,
            c_attn_bias,
            attn_proj_weight,
            attn_proj_bias,
            ln_2_weight,
            ln_2_bias,
            c_fc_weight,
            c_fc_bias,
            mlp_proj_weight,
            mlp_proj_bias,
        }
    }

    fn into_array(self) -> [T; BLOCK_TENSORS] {
        [
            self.ln_1_weight,
            self.ln_1_bias,
            self.c_attn_weight,
            self.c_attn_bias,
            self.attn_proj_weight,
            self.attn_proj_bias,
            self.ln_2_weight,
            self.ln_2_bias,
            self.c_fc_weight,
            self.c_fc_bias,
            self.mlp_proj_weight,
            self.mlp_proj_bias,
        ]
    }
}

/// Every tensor of a GPT by name (llm.c's `ParameterTensors`): parameters, their
/// gradients ([`backward`]'s result) or their specs ([`GptConfig::param_specs`]).
/// [`GptParams::into_flat`] and [`GptParams::from_flat`] convert to and from the flat
/// order of [`GptConfig::params`], which trainer-level APIs keep.
///
/// [`backward`]: super::backward
/// [`GptConfig::param_specs`]: super::GptConfig::param_specs
/// [`GptConfig::params`]: super::GptConfig::params
#[derive(Clone, Debug, PartialEq)]
pub struct GptParams<T> {
    /// `transformer.wte.weight`, `[vocab, c]`; also the output head (tied).
    pub wte: T,
    /// `transformer.wpe.weight`, `[context, c]`.
    pub wpe: T,
    /// `transformer.h.{l}`.
    pub blocks: Vec<BlockParams<T>>,
    pub ln_f_weight: T,
    pub ln_f_bias: T,
}

impl<T> GptParams<T> {
    /// The tensors in [`GptConfig::params`](super::GptConfig::params) order.
    pub fn into_flat(self) -> Vec<T> {
        let mut flat = Vec::with_capacity(4 + BLOCK_TENSORS * self.blocks.len());
        flat.extend([self.wte, self.wpe]);
        for block in self.blocks {
            flat.extend(block.into_array());
        }
        flat.extend([self.ln_f_weight, self.ln_f_bias]);
        flat
    }

    /// Tensors in [`GptConfig::params`](super::GptConfig::params) order, named; fails
    /// unless there are `4 + 12 * layers` of them.
    pub fn from_flat(flat: Vec<T>) -> Result<Self> {
        let n = flat.len();
        if n < 4 || !(n - 4).is_multiple_of(BLOCK_TENSORS) {
            return Err(Error::Config(format!(
                "{n} parameter tensors do not make a GPT (want 4 + {BLOCK_TENSORS} per layer)"
            )));
        }
        let mut it = flat.into_iter();
        let mut next = || it.next().expect("length checked");
        let (wte, wpe) = (next(), next());
        let blocks = (0..(n - 4) / BLOCK_TENSORS)
            .map(|_| BlockParams::from_array(std::array::from_fn(|_| next())))
            .collect();
        let (ln_f_weight, ln_f_bias) = (next(), next());
        Ok(GptParams {
            wte,
            wpe,
            blocks,
            ln_f_weight,
            ln_f_bias,
        })
    }

    /// References to the tensors, in [`GptConfig::params`](super::GptConfig::params) order.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        let blocks = self.blocks.iter().flat_map(|b| {
            [
                &b.ln_1_weight,
                &b.ln_1_bias,
                &b.c_attn_weight,
                &b.c_attn_bias,
                &b.attn_proj_weight,
                &b.attn_proj_bias,
                &b.ln_2_weight,
                &b.ln_2_bias,
                &b.c_fc_weight,
                &b.c_fc_bias,
                &b.mlp_proj_weight,
                &b.mlp_proj_bias,
            ]
        });
        [&self.wte, &self.wpe]
            .into_iter()
            .chain(blocks)
            .chain([&self.ln_f_weight, &self.ln_f_bias])
    }

    /// The same structure with every tensor mapped by `f` (in flat order).
    pub fn map<U>(self, f: impl FnMut(T) -> U) -> GptParams<U> {
        GptParams::from_flat(self.into_flat().into_iter().map(f).collect()).expect("same structure")
    }
}

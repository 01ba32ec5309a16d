//! [`Ops`] on the CPU: the reference functions, for the step-parity test and the
//! reference trainer.

use super::ops::Ops;
use crate::reference::{
    self as r, AttentionShape, AttnDropout, CrossEntropyShape, DropoutMask, EmbeddingShape,
    LayerNormShape, MatmulShape,
};

/// The CPU backend: [`crate::reference`] behind [`Ops`].
pub struct CpuOps;

pub struct CpuBatch {
    pub tokens: Vec<u32>,
    pub targets: Vec<u32>,
}

type T = Vec<f32>;

impl Ops for CpuOps {
    type T = Vec<f32>;
    type W = Vec<f32>;
    type G = Vec<f32>;
    type Batch = CpuBatch;

    fn encoder_forward(
        &self,
        batch: &CpuBatch,
        (wte, wpe): (&T, &T),
        shape: EmbeddingShape,
        dropout: Option<DropoutMask>,
    ) -> T {
        r::encoder_forward_dropout(&batch.tokens, wte, wpe, shape, dropout)
    }
    fn encoder_backward(
        &self,
        dout: &T,
        batch: &CpuBatch,
        _embeddings: (&T, &T),
        shape: EmbeddingShape,
        head_dwte: &T,
    ) -> (T, T) {
        let (mut dwte, dwpe) = r::encoder_backward(dout, &batch.tokens, shape);
        dwte.iter_mut().zip(head_dwte).for_each(|(d, h)| *d += h);
        (dwte, dwpe)
    }
    fn layernorm_forward(&self, x: &T, (w, bias): (&T, &T), shape: LayerNormShape) -> (T, T, T) {
        r::layernorm_forward(x, w, bias, shape)
    }
    fn layernorm_backward(
        &self,
        dout: &T,
        (x, mean, rstd): (&T, &T, &T),
        (w, _bias): (&T, &T),
        shape: LayerNormShape,
        resid: Option<&T>,
        dropout: Option<DropoutMask>,
    ) -> (T, Option<T>, T, T) {
        let resid = resid.map(|r| r.as_slice());
        r::layernorm_backward_residual(dout, x, w, (mean, rstd), shape, resid, dropout)
    }
    fn matmul_forward(&self, x: &T, w: &T, bias: Option<&T>, shape: MatmulShape) -> T {
        r::matmul_forward(x, w, bias.map(|b| b.as_slice()), shape)
    }
    fn residual_branch_forward(
        &self,
        resid: &T,
        x: &T,
        (w, bias): (&T, &T),
        shape: MatmulShape,
        gelu_inp: bool,
        dropout: Option<DropoutMask>,
    ) -> T {
        r::residual_branch_forward(resid, x, (w, bias), shape, gelu_inp, dropout)
    }
    fn matmul_backward(
        &self,
        dout: &T,
        x: &T,
        (w, _bias): (&T, &T),
        shape: MatmulShape,
        gelu_inp: bool,
    ) -> (T, T, T) {
        let (dx, dw, db) = r::matmul_backward_act(dout, x, w, shape, true, gelu_inp);
        (dx, dw, db.expect("with a bias"))
    }
    fn head_backward(&self, dout: &T, x: &T, wte: &T, shape: MatmulShape) -> (T, T) {
        let (dx, dwte, _) = r::matmul_backward_act(dout, x, wte, shape, false, false);
        (dx, dwte)
    }
    fn attention_forward(
        &self,
        qkv: &T,
        shape: AttentionShape,
        dropout: Option<AttnDropout>,
    ) -> (T, T) {
        r::attention_forward(qkv, shape, dropout)
    }
    fn attention_backward(
        &self,
        dout: &T,
        (qkv, _out, att): (&T, &T, &T),
        shape: AttentionShape,
        dropout: Option<AttnDropout>,
    ) -> T {
        r::attention_backward(dout, qkv, att, shape, dropout)
    }
    fn crossentropy_forward(
        &self,
        logits: &T,
        batch: &CpuBatch,
        shape: CrossEntropyShape,
        dloss: f32,
    ) -> (T, T) {
        let (losses, probs) = r::crossentropy_forward(logits, &batch.targets, shape);
        let dlogits = r::crossentropy_backward(&probs, &batch.targets, shape, dloss);
        (losses, dlogits)
    }
    fn mean(&self, x: &T, _n: usize) -> T {
        vec![r::mean(x)]
    }
}

//! [`Ops`] on the CPU: the reference functions, for the step-parity test and the
//! reference trainer.

use super::Ops;
use crate::reference::{self as r, AttnDropout, DropoutMask};

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
        wte: &T,
        wpe: &T,
        b: usize,
        t: usize,
        c: usize,
        dropout: Option<DropoutMask>,
    ) -> T {
        r::encoder_forward_dropout(&batch.tokens, wte, wpe, b, t, c, dropout)
    }
    fn encoder_backward(
        &self,
        dout: &T,
        batch: &CpuBatch,
        _embeddings: (&T, &T),
        b: usize,
        t: usize,
        c: usize,
        v: usize,
        head_dwte: &T,
    ) -> (T, T) {
        let (mut dwte, dwpe) = r::encoder_backward(dout, &batch.tokens, b, t, c, v);
        dwte.iter_mut().zip(head_dwte).for_each(|(d, h)| *d += h);
        (dwte, dwpe)
    }
    fn layernorm_forward(&self, x: &T, w: &T, bias: &T, rows: usize, c: usize) -> (T, T, T) {
        r::layernorm_forward(x, w, bias, rows, c)
    }
    fn layernorm_backward(
        &self,
        dout: &T,
        x: &T,
        (w, _bias): (&T, &T),
        mean: &T,
        rstd: &T,
        rows: usize,
        c: usize,
        resid: Option<&T>,
        dropout: Option<DropoutMask>,
    ) -> (T, Option<T>, T, T) {
        let resid = resid.map(|r| r.as_slice());
        r::layernorm_backward_residual(dout, x, w, mean, rstd, rows, c, resid, dropout)
    }
    fn matmul_forward(&self, x: &T, w: &T, bias: Option<&T>, rows: usize, k: usize, n: usize) -> T {
        r::matmul_forward(x, w, bias.map(|b| b.as_slice()), rows, k, n)
    }
    fn residual_branch_forward(
        &self,
        resid: &T,
        x: &T,
        w: &T,
        bias: &T,
        rows: usize,
        k: usize,
        n: usize,
        gelu_inp: bool,
        dropout: Option<DropoutMask>,
    ) -> T {
        r::residual_branch_forward(resid, x, w, bias, rows, k, n, gelu_inp, dropout)
    }
    fn matmul_backward(
        &self,
        dout: &T,
        x: &T,
        (w, _bias): (&T, &T),
        rows: usize,
        k: usize,
        n: usize,
        gelu_inp: bool,
    ) -> (T, T, T) {
        let (dx, dw, db) = r::matmul_backward_act(dout, x, w, rows, k, n, true, gelu_inp);
        (dx, dw, db.expect("with a bias"))
    }
    fn head_backward(&self, dout: &T, x: &T, wte: &T, rows: usize, c: usize, v: usize) -> (T, T) {
        let (dx, dwte, _) = r::matmul_backward_act(dout, x, wte, rows, c, v, false, false);
        (dx, dwte)
    }
    fn attention_forward(
        &self,
        qkv: &T,
        b: usize,
        t: usize,
        c: usize,
        nh: usize,
        dropout: Option<AttnDropout>,
    ) -> (T, T) {
        r::attention_forward(qkv, b, t, c, nh, dropout)
    }
    fn attention_backward(
        &self,
        dout: &T,
        qkv: &T,
        _out: &T,
        att: &T,
        b: usize,
        t: usize,
        c: usize,
        nh: usize,
        dropout: Option<AttnDropout>,
    ) -> T {
        r::attention_backward(dout, qkv, att, b, t, c, nh, dropout)
    }
    fn crossentropy_forward(
        &self,
        logits: &T,
        batch: &CpuBatch,
        rows: usize,
        v: usize,
        dloss: f32,
    ) -> (T, T) {
        let (losses, probs) = r::crossentropy_forward(logits, &batch.targets, rows, v);
        let dlogits = r::crossentropy_backward(&probs, &batch.targets, rows, v, dloss);
        (losses, dlogits)
    }
    fn mean(&self, x: &T, _n: usize) -> T {
        vec![r::mean(x)]
    }
}

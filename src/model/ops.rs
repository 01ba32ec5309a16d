//! The ops a GPT is made of, as a trait: [`super::GpuOps`] runs each as a kernel,
//! [`super::CpuOps`] as its CPU reference.

use crate::reference::{
    AttentionShape, AttnDropout, CrossEntropyShape, DropoutMask, EmbeddingShape, LayerNormShape,
    MatmulShape,
};

/// The ops a GPT is made of, on some backend. Each mirrors one kernel op in
/// [`crate::kernels`] and one function in [`crate::reference`]; see those for
/// shapes. Weights come in pairs where an op has two (`(weight, bias)`, `(wte,
/// wpe)`), and what a forward saved for its backward as a tuple.
pub trait Ops {
    type T;
    /// A parameter tensor as the backend holds it (the GPU's: a range of the
    /// parameters' arena).
    type W;
    /// A parameter's gradient as the backward leaves it (the GPU's are in the
    /// step's [`crate::kernels::GradArena`]: nothing to hand back).
    type G;
    /// A batch's token ids and targets as the backend holds them.
    type Batch;
    /// The block the coming ops belong to (`None`: outside the blocks), for the
    /// allocation trace. Nothing to do by default.
    fn set_layer(&self, _layer: Option<usize>) {}
    /// The token and position embeddings (`wte`, `wpe`) of the batch; with
    /// `dropout`, through that mask.
    fn encoder_forward(
        &self,
        batch: &Self::Batch,
        embeddings: (&Self::W, &Self::W),
        shape: EmbeddingShape,
        dropout: Option<DropoutMask>,
    ) -> Self::T;
    /// The gradients of `wte` (the head's, `head_dwte`, added in) and `wpe`.
    fn encoder_backward(
        &self,
        dout: &Self::T,
        batch: &Self::Batch,
        embeddings: (&Self::W, &Self::W),
        shape: EmbeddingShape,
        head_dwte: &Self::T,
    ) -> (Self::G, Self::G);
    /// (out, mean, rstd).
    fn layernorm_forward(
        &self,
        x: &Self::T,
        weights: (&Self::W, &Self::W),
        shape: LayerNormShape,
    ) -> (Self::T, Self::T, Self::T);
    /// The gradients from what the forward saved, `(x, mean, rstd)`: (dx, masked,
    /// dweight, dbias). With `resid` (the residual stream's gradient, when `x` was
    /// the stream), `dx = resid + ` the layernorm's input gradient; with `dropout`,
    /// `masked` is `dx` through that mask (the gradient of the residual branch, or
    /// the embedding, whose dropped output was added into `x`).
    fn layernorm_backward(
        &self,
        dout: &Self::T,
        saved: (&Self::T, &Self::T, &Self::T),
        weights: (&Self::W, &Self::W),
        shape: LayerNormShape,
        resid: Option<&Self::T>,
        dropout: Option<DropoutMask>,
    ) -> (Self::T, Option<Self::T>, Self::G, Self::G);
    fn matmul_forward(
        &self,
        x: &Self::T,
        w: &Self::W,
        bias: Option<&Self::W>,
        shape: MatmulShape,
    ) -> Self::T;
    /// `resid + dropout(act(x) · wᵀ + bias)` (`weights`: `(w, bias)`), act GELU with
    /// `gelu_inp`: a residual branch's last `Linear`, its dropout and the residual
    /// add in one op.
    fn residual_branch_forward(
        &self,
        resid: &Self::T,
        x: &Self::T,
        weights: (&Self::W, &Self::W),
        shape: MatmulShape,
        gelu_inp: bool,
        dropout: Option<DropoutMask>,
    ) -> Self::T;
    /// Makes every weight gradient that `matmul_backward` returned so far hold its
    /// value (a backend may add their split partials together here, in fewer
    /// dispatches); `backward` calls it before it reads any of them.
    fn finish_weight_grads(&self) {}
    /// A block's `Linear` (`w`, `bias`): (dx, dweight, dbias). With `gelu_inp`, of
    /// a product of GELU(`x`) (as [`Ops::residual_branch_forward`] takes it): the
    /// input gradient is the GELU input's.
    fn matmul_backward(
        &self,
        dout: &Self::T,
        x: &Self::T,
        weights: (&Self::W, &Self::W),
        shape: MatmulShape,
        gelu_inp: bool,
    ) -> (Self::T, Self::G, Self::G);
    /// The head's product with the tied `wte` (`[v, c]`): (dx, its part of wte's
    /// gradient, which [`Ops::encoder_backward`] adds in).
    fn head_backward(
        &self,
        dout: &Self::T,
        x: &Self::T,
        wte: &Self::W,
        shape: MatmulShape,
    ) -> (Self::T, Self::T);
    /// (out, what the backward needs of the probabilities); with `dropout`, on the
    /// attention probabilities (the backward recomputes it).
    fn attention_forward(
        &self,
        qkv: &Self::T,
        shape: AttentionShape,
        dropout: Option<AttnDropout>,
    ) -> (Self::T, Self::T);
    /// The gradient of `qkv` from what the forward saved, `(qkv, out, saved)`.
    fn attention_backward(
        &self,
        dout: &Self::T,
        saved: (&Self::T, &Self::T, &Self::T),
        shape: AttentionShape,
        dropout: Option<AttnDropout>,
    ) -> Self::T;
    /// Losses of each row and their gradient: `dlogits` of `dloss * sum(losses)`.
    fn crossentropy_forward(
        &self,
        logits: &Self::T,
        batch: &Self::Batch,
        shape: CrossEntropyShape,
        dloss: f32,
    ) -> (Self::T, Self::T);
    fn mean(&self, x: &Self::T, n: usize) -> Self::T;
}

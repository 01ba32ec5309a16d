//! [`Ops`] on the GPU: every op a kernel launcher, every tensor a pooled buffer.

use std::cell::RefCell;

use super::Ops;
use crate::gpu::{PooledBuffer, WgpuContext};
use crate::kernels;
use crate::reference::{AttnDropout, DropoutMask};

/// The GPU backend: a thin adapter from [`Ops`] to the kernel launchers. Weight
/// gradients' split partials wait in it until [`Ops::finish_weight_grads`] adds
/// them all together ([`kernels::SplitSums`]).
pub struct GpuOps<'a>(pub &'a WgpuContext, RefCell<kernels::SplitSums>);

impl<'a> GpuOps<'a> {
    pub fn new(ctx: &'a WgpuContext) -> Self {
        GpuOps(ctx, RefCell::new(kernels::SplitSums::new()))
    }
}

/// A batch on the GPU: inputs and targets, and the inputs grouped by token id
/// (`offsets`, `positions`) for the race-free embedding backward.
pub struct GpuBatch {
    pub tokens: PooledBuffer,
    pub targets: PooledBuffer,
    pub offsets: PooledBuffer,
    pub positions: PooledBuffer,
}

impl GpuBatch {
    /// Uploads through the staging belt (`belt`: ordered and pooled, so steady-state
    /// steps create no buffers for their inputs either) or the seed's `upload`.
    pub fn upload(
        ctx: &WgpuContext,
        tokens: &[u32],
        targets: &[u32],
        vocab: usize,
        belt: bool,
    ) -> Self {
        let (offsets, positions) = kernels::token_index(tokens, vocab);
        let arrays = [tokens, targets, &offsets, &positions];
        let [tokens, targets, offsets, positions] = if belt {
            // One staging chunk for the four (one map cycle instead of four).
            let bytes = arrays.map(bytemuck::cast_slice::<u32, u8>);
            let all: [PooledBuffer; 4] = ctx
                .upload_pooled_all(&bytes)
                .try_into()
                .expect("four arrays in, four buffers out");
            all
        } else {
            arrays.map(|a| ctx.upload(a))
        };
        GpuBatch {
            tokens,
            targets,
            offsets,
            positions,
        }
    }
}

type T = PooledBuffer;

impl Ops for GpuOps<'_> {
    type T = PooledBuffer;
    type Batch = GpuBatch;

    fn set_layer(&self, layer: Option<usize>) {
        self.0.set_trace_layer(layer);
    }

    fn encoder_forward(
        &self,
        batch: &GpuBatch,
        wte: &T,
        wpe: &T,
        b: usize,
        t: usize,
        c: usize,
        dropout: Option<DropoutMask>,
    ) -> T {
        kernels::encoder_forward_dropout(self.0, &batch.tokens, wte, wpe, b, t, c, dropout)
    }
    fn encoder_backward(
        &self,
        dout: &T,
        batch: &GpuBatch,
        b: usize,
        t: usize,
        c: usize,
        v: usize,
        head_dwte: &T,
    ) -> (T, T) {
        kernels::encoder_backward(
            self.0,
            dout,
            &batch.offsets,
            &batch.positions,
            b,
            t,
            c,
            v,
            Some(head_dwte),
        )
    }
    fn layernorm_forward(&self, x: &T, w: &T, bias: &T, rows: usize, c: usize) -> (T, T, T) {
        kernels::layernorm_forward(self.0, x, w, bias, rows, c)
    }
    fn layernorm_backward(
        &self,
        dout: &T,
        x: &T,
        w: &T,
        mean: &T,
        rstd: &T,
        rows: usize,
        c: usize,
        resid: Option<&T>,
        dropout: Option<DropoutMask>,
    ) -> (T, Option<T>, T, T) {
        kernels::layernorm_backward_fused_on(
            self.0,
            kernels::Target::of(self.0),
            dout,
            x,
            w,
            mean,
            rstd,
            rows,
            c,
            resid,
            dropout,
        )
    }
    fn matmul_forward(&self, x: &T, w: &T, bias: Option<&T>, rows: usize, k: usize, n: usize) -> T {
        kernels::matmul_forward(self.0, x, w, bias, rows, k, n)
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
        let fusion = kernels::ForwardFusion {
            gelu_inp,
            dropout,
            residual: Some(resid),
        };
        kernels::matmul_forward_fused(self.0, x, w, Some(bias), rows, k, n, fusion)
    }
    fn matmul_backward(
        &self,
        dout: &T,
        x: &T,
        w: &T,
        rows: usize,
        k: usize,
        n: usize,
        with_bias: bool,
        gelu_inp: bool,
    ) -> (T, T, Option<T>) {
        let mut sums = self.1.borrow_mut();
        kernels::matmul_backward_deferred(
            self.0,
            dout,
            x,
            w,
            rows,
            k,
            n,
            with_bias,
            gelu_inp,
            Some(&mut sums),
        )
    }
    fn finish_weight_grads(&self) {
        self.1.borrow_mut().finish(self.0);
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
        kernels::attention_forward(self.0, qkv, b, t, c, nh, dropout)
    }
    fn attention_backward(
        &self,
        dout: &T,
        qkv: &T,
        out: &T,
        saved: &T,
        b: usize,
        t: usize,
        c: usize,
        nh: usize,
        dropout: Option<AttnDropout>,
    ) -> T {
        kernels::attention_backward(self.0, dout, qkv, out, saved, b, t, c, nh, dropout)
    }
    fn crossentropy_forward(
        &self,
        logits: &T,
        batch: &GpuBatch,
        rows: usize,
        v: usize,
        dloss: f32,
    ) -> (T, T) {
        kernels::crossentropy_forward(self.0, logits, &batch.targets, rows, v, dloss)
    }
    fn mean(&self, x: &T, n: usize) -> T {
        kernels::mean(self.0, x, n)
    }
}

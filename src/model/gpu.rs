//! [`Ops`] on the GPU: every op a kernel launcher, every tensor a pooled buffer.

use std::cell::RefCell;
use std::num::NonZeroU64;

use super::Ops;
use crate::gpu::{PooledBuffer, Slice, WgpuContext};
use crate::kernels;
use crate::reference::{AttnDropout, DropoutMask};

/// The GPU backend: a thin adapter from [`Ops`] to the kernel launchers. Weight
/// gradients' split partials wait in it until [`Ops::finish_weight_grads`] adds
/// them all together ([`kernels::SplitSums`]), or are left to the optimizer
/// ([`GpuOps::for_optimizer`]).
pub struct GpuOps<'a>(pub &'a WgpuContext, RefCell<kernels::SplitSums>);

impl<'a> GpuOps<'a> {
    pub fn new(ctx: &'a WgpuContext) -> Self {
        GpuOps(ctx, RefCell::new(kernels::SplitSums::new()))
    }

    /// Ops whose backward leaves weight gradients as split partials where it split
    /// them ([`kernels::SplitSums::for_optimizer`]): for gradients that only
    /// [`kernels::adamw_step`] reads, with [`GpuOps::splits_of`] as each one's
    /// [`kernels::StepTensor::splits`].
    pub fn for_optimizer(ctx: &'a WgpuContext) -> Self {
        GpuOps(ctx, RefCell::new(kernels::SplitSums::for_optimizer()))
    }

    /// How many split partials a gradient from this backend's backward holds (1: it
    /// holds its value).
    pub fn splits_of(&self, grad: &PooledBuffer) -> usize {
        self.1.borrow().splits_of(grad)
    }
}

/// A batch on the GPU: inputs and targets, and the inputs grouped by token id
/// (`offsets`, `positions`) for the race-free embedding backward.
pub struct GpuBatch {
    store: BatchStore,
}

enum BatchStore {
    /// The four arrays in one buffer, each bound as a range ([`Slice`]) at an
    /// aligned byte offset: one pooled buffer and one copy a batch.
    Packed(PooledBuffer, [(u64, NonZeroU64); 4]),
    /// Four buffers of the seed's `upload`.
    Separate([PooledBuffer; 4]),
}

/// Where each of a packed batch's four arrays of `bytes` starts (multiples of
/// `align`) and how long it is (whole words), and the total.
fn packed_layout(bytes: [usize; 4], align: usize) -> ([(u64, NonZeroU64); 4], usize) {
    let mut at = 0usize;
    let ranges = bytes.map(|n| {
        let start = at.next_multiple_of(align);
        let size = n.max(4).next_multiple_of(4);
        at = start + size;
        (
            start as u64,
            NonZeroU64::new(size as u64).expect("at least one word"),
        )
    });
    (ranges, at)
}

impl GpuBatch {
    /// Uploads one batch; see [`GpuBatch::upload_all`].
    pub fn upload(
        ctx: &WgpuContext,
        tokens: &[u32],
        targets: &[u32],
        vocab: usize,
        belt: bool,
    ) -> Self {
        let mut one = GpuBatch::upload_all(ctx, &[(tokens, targets)], vocab, belt);
        one.pop().expect("one batch in, one out")
    }

    /// Uploads batches of `(tokens, targets)` through the staging belt (`belt`) or
    /// the seed's `upload`. Through the belt each batch is one pooled buffer (so
    /// steady-state steps create no buffers for their inputs), all of them written
    /// through one staging chunk, one map cycle and one run of copies: a trainer
    /// uploads a call's batches at once ([`crate::train::Trainer::steps`]).
    pub fn upload_all(
        ctx: &WgpuContext,
        batches: &[(&[u32], &[u32])],
        vocab: usize,
        belt: bool,
    ) -> Vec<Self> {
        let indexed: Vec<[Vec<u32>; 4]> = batches
            .iter()
            .map(|&(tokens, targets)| {
                let (offsets, positions) = kernels::token_index(tokens, vocab);
                [tokens.to_vec(), targets.to_vec(), offsets, positions]
            })
            .collect();
        if !belt {
            return indexed
                .iter()
                .map(|arrays| GpuBatch {
                    store: BatchStore::Separate(arrays.each_ref().map(|a| ctx.upload(a))),
                })
                .collect();
        }
        let align = ctx.limits().min_storage_buffer_offset_alignment.max(4) as usize;
        let mut layouts = Vec::with_capacity(indexed.len());
        let packed: Vec<Vec<u8>> = indexed
            .iter()
            .map(|arrays| {
                let (ranges, total) = packed_layout(arrays.each_ref().map(|a| a.len() * 4), align);
                let mut bytes = vec![0u8; total];
                for (array, (start, _)) in arrays.iter().zip(ranges) {
                    let src: &[u8] = bytemuck::cast_slice(array);
                    bytes[start as usize..start as usize + src.len()].copy_from_slice(src);
                }
                layouts.push(ranges);
                bytes
            })
            .collect();
        let slices: Vec<&[u8]> = packed.iter().map(Vec::as_slice).collect();
        ctx.upload_pooled_all(&slices)
            .into_iter()
            .zip(layouts)
            .map(|(buffer, ranges)| GpuBatch {
                store: BatchStore::Packed(buffer, ranges),
            })
            .collect()
    }

    fn array(&self, i: usize) -> Slice<'_> {
        match &self.store {
            BatchStore::Packed(buffer, ranges) => Slice::range(buffer, ranges[i].0, ranges[i].1),
            BatchStore::Separate(buffers) => (&buffers[i]).into(),
        }
    }

    /// The input tokens, `b*t` u32.
    pub fn tokens(&self) -> Slice<'_> {
        self.array(0)
    }

    /// The targets, `b*t` u32.
    pub fn targets(&self) -> Slice<'_> {
        self.array(1)
    }

    /// [`kernels::token_index`]'s `offsets`, `vocab + 1` u32.
    pub fn offsets(&self) -> Slice<'_> {
        self.array(2)
    }

    /// [`kernels::token_index`]'s `positions`, `b*t` u32.
    pub fn positions(&self) -> Slice<'_> {
        self.array(3)
    }
}

type T = PooledBuffer;
type W<'a> = Slice<'a>;

impl<'a> Ops for GpuOps<'a> {
    type T = PooledBuffer;
    type W = Slice<'a>;
    type Batch = GpuBatch;

    fn set_layer(&self, layer: Option<usize>) {
        self.0.set_trace_layer(layer);
    }

    fn encoder_forward(
        &self,
        batch: &GpuBatch,
        wte: &W<'a>,
        wpe: &W<'a>,
        b: usize,
        t: usize,
        c: usize,
        dropout: Option<DropoutMask>,
    ) -> T {
        kernels::encoder_forward_dropout(self.0, batch.tokens(), *wte, *wpe, b, t, c, dropout)
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
        // The head's gradient may still be split partials: the kernel adds them.
        kernels::encoder_backward_on(
            self.0,
            kernels::Target::of(self.0),
            dout,
            batch.offsets(),
            batch.positions(),
            (b, t, c, v),
            Some((head_dwte, self.splits_of(head_dwte))),
        )
    }
    fn layernorm_forward(
        &self,
        x: &T,
        w: &W<'a>,
        bias: &W<'a>,
        rows: usize,
        c: usize,
    ) -> (T, T, T) {
        kernels::layernorm_forward(self.0, x, *w, *bias, rows, c)
    }
    fn layernorm_backward(
        &self,
        dout: &T,
        x: &T,
        w: &W<'a>,
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
            *w,
            mean,
            rstd,
            rows,
            c,
            resid,
            dropout,
        )
    }
    fn matmul_forward(
        &self,
        x: &T,
        w: &W<'a>,
        bias: Option<&W<'a>>,
        rows: usize,
        k: usize,
        n: usize,
    ) -> T {
        kernels::matmul_forward(self.0, x, *w, bias.copied(), rows, k, n)
    }
    fn residual_branch_forward(
        &self,
        resid: &T,
        x: &T,
        w: &W<'a>,
        bias: &W<'a>,
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
        kernels::matmul_forward_fused(self.0, x, *w, Some(*bias), rows, k, n, fusion)
    }
    fn matmul_backward(
        &self,
        dout: &T,
        x: &T,
        w: &W<'a>,
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
            *w,
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
        kernels::crossentropy_forward(self.0, logits, batch.targets(), rows, v, dloss)
    }
    fn mean(&self, x: &T, n: usize) -> T {
        kernels::mean(self.0, x, n)
    }
}

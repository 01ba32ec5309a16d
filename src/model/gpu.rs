//! [`Ops`] on the GPU: every op a kernel launcher, every tensor a pooled buffer.

use std::cell::RefCell;
use std::num::NonZeroU64;

use super::config::GptConfig;
use super::ops::Ops;
use super::params::GptParams;
use super::pass::Shapes;
use crate::gpu::{PooledBuffer, Slice, WgpuContext};
use crate::kernels::{
    self, Attention, AttentionSaved, CrossEntropy, Embedding, ExtraGrad, F16Weights, Fusion,
    GradArena, GradDest, LayerNorm, LayerNormSaved, Linear, Matmul, Mean, ParamArena, SplitSums,
    TokenIndex, WeightGrad,
};
use crate::reference::{
    AttentionShape, AttnDropout, CrossEntropyShape, DropoutMask, EmbeddingShape, LayerNormShape,
    MatmulShape,
};

/// The GPU backend: a thin adapter from [`Ops`] to the kernel launchers. The
/// backward writes every parameter's gradient into its slot of a [`GradArena`]
/// (as its value, or as split partials where the slot has room: the optimizer adds
/// those as it reads them); sums of partials that have no room wait in
/// [`SplitSums`] until [`Ops::finish_weight_grads`] adds them all together. The
/// matmuls read the f16 copy of the weights where the parameters keep one.
pub struct GpuOps<'a>(
    pub &'a WgpuContext,
    RefCell<SplitSums>,
    Option<&'a GradArena>,
    Option<F16Weights<'a>>,
);

impl<'a> GpuOps<'a> {
    /// Ops for forward passes over the weights of `params` (their f16 copy, where
    /// they keep one, is brought up to date first).
    pub fn new(ctx: &'a WgpuContext, params: &'a ParamArena) -> Self {
        let halves = params.f16_weights(ctx);
        GpuOps(ctx, RefCell::new(SplitSums::new()), None, halves)
    }

    /// Ops whose backward writes the gradients of `params` into `grads` (laid out
    /// for them). The head's part of `wte`'s gradient is left as partials where
    /// split, for the embedding's backward to add.
    pub fn with_grads(ctx: &'a WgpuContext, params: &'a ParamArena, grads: &'a GradArena) -> Self {
        let halves = params.f16_weights(ctx);
        GpuOps(
            ctx,
            RefCell::new(SplitSums::for_optimizer()),
            Some(grads),
            halves,
        )
    }

    /// The f16 copy of `weight`, where there is one.
    fn f16(&self, weight: &Slice) -> Option<Slice<'a>> {
        self.3.and_then(|halves| halves.of(*weight))
    }

    fn splits_of(&self, grad: &PooledBuffer) -> usize {
        self.1.borrow().splits_of(grad)
    }

    /// The slot of `weight`'s gradient, and its index.
    fn dest(&self, weight: &Slice) -> (usize, GradDest<'a>) {
        let grads = self
            .2
            .expect("a backward writes into a gradient arena (GpuOps::with_grads)");
        let i = grads
            .index_of(*weight)
            .expect("a weight of the parameters the gradient arena was made for");
        (i, grads.dest(i))
    }

    /// Notes how `grad` (tensor `i`'s, written to its slot) was left.
    fn note(&self, i: usize, grad: WeightGrad) {
        match grad {
            WeightGrad::InDest { splits } => self.2.expect("an arena").set_splits(i, splits),
            WeightGrad::Buffer(_) => unreachable!("a gradient with a slot is written there"),
        }
    }
}

/// Room for split partials in each parameter's gradient slot (flat order) for a
/// backward of `rows` rows on `ctx`: a block's `Linear` leaves its gradients as the
/// partials it splits them into, when at most [`SplitSums::OPTIMIZER_SPLITS`] and
/// while all such partials stay under [`SplitSums::MAX_BYTES`] (last block first,
/// as the backward makes them); every other slot holds a value.
pub fn grad_rooms(ctx: &WgpuContext, model: &GptConfig, rows: usize) -> Vec<usize> {
    let shapes = Shapes::new(model, rows, 1);
    let flat = vec![1usize; model.params().len()];
    let mut rooms = GptParams::from_flat(flat).expect("GptConfig::params");
    let mut bytes = 0u64;
    let mut room = |splits: usize, len: usize| {
        let more = (splits * len * 4) as u64;
        if (2..=SplitSums::OPTIMIZER_SPLITS).contains(&splits)
            && bytes + more <= SplitSums::MAX_BYTES
        {
            bytes += more;
            splits
        } else {
            1
        }
    };
    for block in rooms.blocks.iter_mut().rev() {
        let linears = [
            (
                &mut block.mlp_proj_weight,
                &mut block.mlp_proj_bias,
                shapes.mlp_proj,
            ),
            (&mut block.c_fc_weight, &mut block.c_fc_bias, shapes.c_fc),
            (
                &mut block.attn_proj_weight,
                &mut block.attn_proj_bias,
                shapes.attn_proj,
            ),
            (
                &mut block.c_attn_weight,
                &mut block.c_attn_bias,
                shapes.c_attn,
            ),
        ];
        for (weight, bias, shape) in linears {
            let (dweight, dbias) = kernels::matmul::weight_grad_splits(ctx, shape);
            *weight = room(dweight, shape.n * shape.k);
            *bias = room(dbias, shape.n);
        }
    }
    rooms.into_flat()
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
    /// Four buffers of [`WgpuContext::upload`], never recycled.
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

/// A packed batch's arrays start at the device's storage offset alignment.
fn batch_align(ctx: &WgpuContext) -> usize {
    ctx.limits().min_storage_buffer_offset_alignment.max(4) as usize
}

/// A batch's four arrays packed into one run of bytes, and their ranges in it.
fn pack(arrays: &[Vec<u32>; 4], align: usize) -> (Vec<u8>, [(u64, NonZeroU64); 4]) {
    let (ranges, total) = packed_layout(arrays.each_ref().map(|a| a.len() * 4), align);
    let mut bytes = vec![0u8; total];
    for (array, (start, _)) in arrays.iter().zip(ranges) {
        let src: &[u8] = bytemuck::cast_slice(array);
        bytes[start as usize..start as usize + src.len()].copy_from_slice(src);
    }
    (bytes, ranges)
}

/// One batch buffer kept across steps and rewritten for each through the queue
/// ([`WgpuContext::write_pooled`]). Every step then binds the same buffer, so the
/// bind groups that name it are made once, whatever the number of steps a call or
/// calls in flight; an upload a step would bind a new pooled buffer per batch of a
/// call. A batch of another shape replaces it (sampling keeps its own).
#[derive(Default)]
pub struct HeldBatch {
    batch: Option<GpuBatch>,
}

impl HeldBatch {
    /// Writes `(tokens, targets)` and their token index into the held buffer (made
    /// at first use, or again for a new shape) and returns it: what the commands
    /// recorded after this read; those recorded before read the previous batch.
    pub fn write(
        &mut self,
        ctx: &WgpuContext,
        tokens: &[u32],
        targets: &[u32],
        vocab: usize,
    ) -> &GpuBatch {
        let (offsets, positions) = kernels::token_index(tokens, vocab);
        let arrays = [tokens.to_vec(), targets.to_vec(), offsets, positions];
        let (bytes, ranges) = pack(&arrays, batch_align(ctx));
        let fits = matches!(
            &self.batch,
            Some(GpuBatch { store: BatchStore::Packed(buffer, kept) })
                if *kept == ranges && buffer.len() == bytes.len()
        );
        if fits {
            if let Some(GpuBatch {
                store: BatchStore::Packed(buffer, _),
            }) = &self.batch
            {
                ctx.write_pooled(buffer, &bytes);
            }
        } else {
            // Made holding its first batch and never pooled: a buffer that queue
            // writes fill must not be handed to other tensors (rule 3).
            self.batch = Some(GpuBatch {
                store: BatchStore::Packed(ctx.upload(&bytes), ranges),
            });
        }
        self.batch.as_ref().expect("written above")
    }

    /// The batch last written, if any.
    pub fn get(&self) -> Option<&GpuBatch> {
        self.batch.as_ref()
    }
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
    /// [`WgpuContext::upload`]. Through the belt each batch is one pooled buffer,
    /// all of them written through one staging chunk, one map cycle and one run of
    /// copies. (A trainer's steps write theirs into a [`HeldBatch`] instead.)
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
        let align = batch_align(ctx);
        let (packed, layouts): (Vec<Vec<u8>>, Vec<_>) =
            indexed.iter().map(|arrays| pack(arrays, align)).unzip();
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
            BatchStore::Packed(buffer, ranges) => buffer.range(ranges[i].0, ranges[i].1),
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

    /// The batch's tokens grouped by token id, for the embedding's backward.
    pub fn index(&self) -> TokenIndex<'_> {
        TokenIndex {
            offsets: self.offsets(),
            positions: self.positions(),
        }
    }
}

type T = PooledBuffer;
type W<'a> = Slice<'a>;

impl<'a> Ops for GpuOps<'a> {
    type T = PooledBuffer;
    type W = Slice<'a>;
    type G = ();
    type Batch = GpuBatch;

    fn set_layer(&self, layer: Option<usize>) {
        self.0.set_trace_layer(layer);
    }

    fn encoder_forward(
        &self,
        batch: &GpuBatch,
        (wte, wpe): (&W<'a>, &W<'a>),
        shape: EmbeddingShape,
        dropout: Option<DropoutMask>,
    ) -> T {
        let op = Embedding {
            dropout,
            ..Default::default()
        };
        op.forward(self.0, batch.tokens(), *wte, *wpe, shape)
    }
    fn encoder_backward(
        &self,
        dout: &T,
        batch: &GpuBatch,
        (wte, wpe): (&W<'a>, &W<'a>),
        shape: EmbeddingShape,
        head_dwte: &T,
    ) -> ((), ()) {
        let ((i, dwte), (j, dwpe)) = (self.dest(wte), self.dest(wpe));
        // The head's gradient may still be split partials: the kernel adds them.
        let head = ExtraGrad {
            grad: head_dwte,
            splits: self.splits_of(head_dwte),
        };
        let dests = [dwte.value(), dwpe.value()];
        let index = batch.index();
        Embedding::default().backward_into(self.0, dout, index, shape, Some(head), dests);
        self.note(i, WeightGrad::InDest { splits: 1 });
        self.note(j, WeightGrad::InDest { splits: 1 });
        ((), ())
    }
    fn layernorm_forward(
        &self,
        x: &T,
        (w, bias): (&W<'a>, &W<'a>),
        shape: LayerNormShape,
    ) -> (T, T, T) {
        LayerNorm::default().forward(self.0, x, *w, *bias, shape)
    }
    fn layernorm_backward(
        &self,
        dout: &T,
        (inp, mean, rstd): (&T, &T, &T),
        (w, bias): (&W<'a>, &W<'a>),
        shape: LayerNormShape,
        resid: Option<&T>,
        dropout: Option<DropoutMask>,
    ) -> (T, Option<T>, (), ()) {
        let ((i, dweight), (j, dbias)) = (self.dest(w), self.dest(bias));
        let op = LayerNorm {
            resid,
            mask: dropout,
            ..Default::default()
        };
        let saved = LayerNormSaved { inp, mean, rstd };
        let dests = [dweight.value(), dbias.value()];
        let (dinp, masked) = op.backward_into(self.0, dout, saved, *w, shape, dests);
        self.note(i, WeightGrad::InDest { splits: 1 });
        self.note(j, WeightGrad::InDest { splits: 1 });
        (dinp, masked, (), ())
    }
    fn matmul_forward(&self, x: &T, w: &W<'a>, bias: Option<&W<'a>>, shape: MatmulShape) -> T {
        let x = Linear {
            inp: x,
            weight: *w,
            bias: bias.copied(),
            weight_f16: self.f16(w),
        };
        Matmul::default().forward(self.0, x, shape)
    }
    fn residual_branch_forward(
        &self,
        resid: &T,
        x: &T,
        (w, bias): (&W<'a>, &W<'a>),
        shape: MatmulShape,
        gelu_inp: bool,
        dropout: Option<DropoutMask>,
    ) -> T {
        let op = Matmul {
            variant: None,
            fusion: Fusion {
                gelu_inp,
                dropout,
                residual: Some(resid),
            },
        };
        let x = Linear {
            inp: x,
            weight: *w,
            bias: Some(*bias),
            weight_f16: self.f16(w),
        };
        op.forward(self.0, x, shape)
    }
    fn matmul_backward(
        &self,
        dout: &T,
        x: &T,
        (w, bias): (&W<'a>, &W<'a>),
        shape: MatmulShape,
        gelu_inp: bool,
    ) -> (T, (), ()) {
        let ((i, dweight), (j, dbias)) = (self.dest(w), self.dest(bias));
        let mut sums = self.1.borrow_mut();
        let op = Matmul {
            variant: None,
            fusion: Fusion {
                gelu_inp,
                ..Default::default()
            },
        };
        let x = Linear {
            inp: x,
            weight: *w,
            bias: Some(*bias),
            weight_f16: self.f16(w),
        };
        let dests = [dweight, dbias];
        let (dinp, dweight, dbias) = op.backward_into(self.0, dout, x, shape, dests, &mut sums);
        self.note(i, dweight);
        self.note(j, dbias.expect("with a bias"));
        (dinp, (), ())
    }
    fn head_backward(&self, dout: &T, x: &T, wte: &W<'a>, shape: MatmulShape) -> (T, T) {
        let mut sums = self.1.borrow_mut();
        let x = Linear {
            inp: x,
            weight: *wte,
            bias: None,
            weight_f16: self.f16(wte),
        };
        let (dinp, dwte, _) =
            Matmul::default().backward_deferred(self.0, dout, x, shape, Some(&mut sums));
        (dinp, dwte)
    }
    fn finish_weight_grads(&self) {
        self.1.borrow_mut().finish(self.0);
    }
    fn attention_forward(
        &self,
        qkv: &T,
        shape: AttentionShape,
        dropout: Option<AttnDropout>,
    ) -> (T, T) {
        let op = Attention {
            dropout,
            ..Default::default()
        };
        op.forward(self.0, qkv, shape)
    }
    fn attention_backward(
        &self,
        dout: &T,
        (qkv, out, lse): (&T, &T, &T),
        shape: AttentionShape,
        dropout: Option<AttnDropout>,
    ) -> T {
        let op = Attention {
            dropout,
            ..Default::default()
        };
        op.backward(self.0, dout, AttentionSaved { qkv, out, lse }, shape)
    }
    fn crossentropy_forward(
        &self,
        logits: &T,
        batch: &GpuBatch,
        shape: CrossEntropyShape,
        dloss: f32,
    ) -> (T, T) {
        CrossEntropy::default().forward(self.0, logits, batch.targets(), shape, dloss)
    }
    fn mean(&self, x: &T, n: usize) -> T {
        Mean::default().of(self.0, x, n)
    }
}

//! The forward and backward passes, written once over [`Ops`].

use super::config::GptConfig;
use super::dropout::{attn_site, mlp_site, site_mask, Dropout};
use super::ops::Ops;
use super::params::{BlockParams, GptParams};
use crate::reference::{
    AttentionShape, CrossEntropyShape, EmbeddingShape, LayerNormShape, MatmulShape,
};

/// The shape of every op of a step of `b` sequences of `t` tokens.
#[derive(Clone, Copy, Debug)]
pub struct Shapes {
    pub embedding: EmbeddingShape,
    /// Every layernorm's: the rows of the residual stream.
    pub norm: LayerNormShape,
    pub attention: AttentionShape,
    /// The block's four `Linear`s: qkv, the attention's projection, the MLP's two.
    pub c_attn: MatmulShape,
    pub attn_proj: MatmulShape,
    pub c_fc: MatmulShape,
    pub mlp_proj: MatmulShape,
    /// The output head's product with the tied token embedding.
    pub head: MatmulShape,
    pub loss: CrossEntropyShape,
}

impl Shapes {
    pub fn new(cfg: &GptConfig, b: usize, t: usize) -> Self {
        let (c, v, rows) = (cfg.width, cfg.vocab, b * t);
        let linear = |k, n| MatmulShape { rows, k, n };
        Shapes {
            embedding: EmbeddingShape { b, t, c, v },
            norm: LayerNormShape { rows, c },
            attention: AttentionShape {
                b,
                t,
                c,
                heads: cfg.heads,
            },
            c_attn: linear(c, 3 * c),
            attn_proj: linear(c, c),
            c_fc: linear(c, 4 * c),
            mlp_proj: linear(4 * c, c),
            head: linear(c, v),
            loss: CrossEntropyShape { rows, v },
        }
    }
}

/// A layernorm's output and the mean and rstd its backward reads.
struct Normed<T> {
    out: T,
    mean: T,
    rstd: T,
}

impl<T> Normed<T> {
    fn new((out, mean, rstd): (T, T, T)) -> Self {
        Normed { out, mean, rstd }
    }
}

/// What one block keeps from forward for backward.
struct BlockActs<T> {
    /// `None` when recomputed: the backward makes it again from the block's input.
    ln1: Option<Normed<T>>,
    qkv: T,
    atty: T,
    att_saved: T,
    /// Residual stream after attention (the attention branch's output and its dropped
    /// copy are never written: see [`Ops::residual_branch_forward`]).
    x_mid: T,
    /// `None` when recomputed: the backward makes it again from `x_mid`.
    ln2: Option<Normed<T>>,
    /// The MLP's hidden layer before GELU (its output is recomputed where read).
    fch: T,
    /// Residual stream after the MLP: the next block's input.
    x_out: T,
}

/// Everything forward keeps for backward, and the losses ([`mean_loss`] averages
/// them).
pub struct Activations<T> {
    x0: T,
    blocks: Vec<BlockActs<T>>,
    lnf: T,
    lnf_mean: T,
    lnf_rstd: T,
    /// Logits, `b*t*vocab`.
    pub logits: T,
    /// The mean loss's gradient with respect to the logits, from the forward pass.
    dlogits: T,
    /// Per-position losses, `b*t`.
    pub losses: T,
    b: usize,
    t: usize,
}

/// The mean of the forward's losses, one element. The trainer writes it straight
/// into its per-call figures instead ([`crate::kernels::Mean::write`]).
pub fn mean_loss<O: Ops>(ops: &O, acts: &Activations<O::T>) -> O::T {
    ops.mean(&acts.losses, acts.b * acts.t)
}

/// Runs the GPT on `b` sequences of `t` tokens (`t <= context`), with dropout when
/// training, keeping everything [`backward`] reads.
pub fn forward<O: Ops>(
    ops: &O,
    cfg: &GptConfig,
    params: &GptParams<O::W>,
    batch: &O::Batch,
    b: usize,
    t: usize,
    dropout: Option<&Dropout>,
) -> Activations<O::T> {
    forward_with(ops, cfg, params, batch, (b, t), dropout, false)
}

/// [`forward`], and with `recompute` each block's layernorm outputs (and their
/// mean and rstd) are dropped as soon as their `Linear` has read them; [`backward`]
/// makes them again. Each is as large as the residual stream (`b * t * width`
/// floats), while its input, the residual stream itself, is kept for the backward
/// anyway: `2 * layers * b * t * width * 4` bytes fewer live across the step for
/// `2 * layers` more layernorm passes, with the same bits (the same kernel on the
/// same input).
pub fn forward_with<O: Ops>(
    ops: &O,
    cfg: &GptConfig,
    params: &GptParams<O::W>,
    batch: &O::Batch,
    (b, t): (usize, usize),
    dropout: Option<&Dropout>,
    recompute: bool,
) -> Activations<O::T> {
    let shapes = Shapes::new(cfg, b, t);
    let embeddings = (&params.wte, &params.wpe);
    let x0 = ops.encoder_forward(batch, embeddings, shapes.embedding, site_mask(dropout, 0));
    let mut blocks: Vec<BlockActs<O::T>> = Vec::with_capacity(cfg.layers);
    for (l, p) in params.blocks.iter().enumerate() {
        ops.set_layer(Some(l));
        let x = blocks.last().map_or(&x0, |blk| &blk.x_out);
        let ln_1 = (&p.ln_1_weight, &p.ln_1_bias);
        let ln1 = Normed::new(ops.layernorm_forward(x, ln_1, shapes.norm));
        let c_attn = shapes.c_attn;
        let qkv = ops.matmul_forward(&ln1.out, &p.c_attn_weight, Some(&p.c_attn_bias), c_attn);
        let ln1 = (!recompute).then_some(ln1);
        let att_drop = dropout.and_then(|d| d.attention(l));
        let (atty, att_saved) = ops.attention_forward(&qkv, shapes.attention, att_drop);
        let attn_proj = (&p.attn_proj_weight, &p.attn_proj_bias);
        let mask = site_mask(dropout, attn_site(l));
        let x_mid = ops.residual_branch_forward(x, &atty, attn_proj, shapes.attn_proj, false, mask);
        let ln_2 = (&p.ln_2_weight, &p.ln_2_bias);
        let ln2 = Normed::new(ops.layernorm_forward(&x_mid, ln_2, shapes.norm));
        let fch = ops.matmul_forward(&ln2.out, &p.c_fc_weight, Some(&p.c_fc_bias), shapes.c_fc);
        let ln2 = (!recompute).then_some(ln2);
        let mlp_proj = (&p.mlp_proj_weight, &p.mlp_proj_bias);
        let mask = site_mask(dropout, mlp_site(l));
        let x_out =
            ops.residual_branch_forward(&x_mid, &fch, mlp_proj, shapes.mlp_proj, true, mask);
        blocks.push(BlockActs {
            ln1,
            qkv,
            atty,
            att_saved,
            x_mid,
            ln2,
            fch,
            x_out,
        });
    }
    ops.set_layer(None);
    let x = blocks.last().map_or(&x0, |blk| &blk.x_out);
    let ln_f = (&params.ln_f_weight, &params.ln_f_bias);
    let (lnf, lnf_mean, lnf_rstd) = ops.layernorm_forward(x, ln_f, shapes.norm);
    let logits = ops.matmul_forward(&lnf, &params.wte, None, shapes.head);
    // The loss is the mean over rows: its gradient comes with it.
    let dloss = 1.0 / shapes.loss.rows as f32;
    let (losses, dlogits) = ops.crossentropy_forward(&logits, batch, shapes.loss, dloss);
    Activations {
        x0,
        blocks,
        lnf,
        lnf_mean,
        lnf_rstd,
        logits,
        dlogits,
        losses,
        b,
        t,
    }
}

/// A layernorm's output made again in the backward, from its input: the forward
/// kernel on the same input and weights, so the same bits as the forward's.
fn remake<O: Ops>(
    ops: &O,
    x: &O::T,
    weights: (&O::W, &O::W),
    shape: LayerNormShape,
) -> Normed<O::T> {
    Normed::new(ops.layernorm_forward(x, weights, shape))
}

/// Gradients of the mean loss for every parameter.
/// Consumes the activations, releasing each as soon as its last reader is recorded
/// (with the pool, the rest of the backward reuses those buffers); makes again
/// each layernorm output that [`forward_with`] dropped, just before the `Linear`
/// backward that reads it.
pub fn backward<O: Ops>(
    ops: &O,
    cfg: &GptConfig,
    params: &GptParams<O::W>,
    batch: &O::Batch,
    acts: Activations<O::T>,
    dropout: Option<&Dropout>,
) -> GptParams<O::G> {
    let Activations {
        x0,
        mut blocks,
        lnf,
        lnf_mean,
        lnf_rstd,
        logits,
        dlogits,
        losses,
        b,
        t,
    } = acts;
    drop((logits, losses));
    let shapes = Shapes::new(cfg, b, t);

    let (dlnf, head_dwte) = ops.head_backward(&dlogits, &lnf, &params.wte, shapes.head);
    drop((dlogits, lnf));
    // Each layernorm backward also adds the residual stream's gradient (`dx`), and
    // writes it through the mask of the dropout whose output was added into its
    // input (`dbranch`): the block's MLP branch, its attention branch, the block
    // below's MLP branch, and under the first block the embedding.
    let below = |l: usize| if l == 0 { 0 } else { mlp_site(l - 1) };
    let x_last = blocks.last().map_or(&x0, |blk| &blk.x_out);
    let (mut dx, mut dbranch, ln_f_weight, ln_f_bias) = ops.layernorm_backward(
        &dlnf,
        (x_last, &lnf_mean, &lnf_rstd),
        (&params.ln_f_weight, &params.ln_f_bias),
        shapes.norm,
        None,
        site_mask(dropout, below(cfg.layers)),
    );
    drop((dlnf, lnf_mean, lnf_rstd));

    // Filled last block first.
    let mut dblocks = Vec::with_capacity(cfg.layers);
    for (l, p) in params.blocks.iter().enumerate().rev() {
        ops.set_layer(Some(l));
        let BlockActs {
            ln1,
            qkv,
            atty,
            att_saved,
            x_mid,
            ln2,
            fch,
            x_out,
        } = blocks.pop().expect("one per layer");
        // Each activation goes back to the pool right after its last read. This
        // block's output has had its: the backward of the layernorm above it.
        drop(x_out);
        let x_in = blocks.last().map_or(&x0, |blk| &blk.x_out);

        // x_out = x_mid + drop(fcproj(gelu(fc(ln2(x_mid))))): dx flows to both terms,
        // through the branch's dropout mask into the branch (and through the GELU
        // that fcproj applied as it read fch).
        let (dfch, mlp_proj_weight, mlp_proj_bias) = ops.matmul_backward(
            dbranch.as_ref().unwrap_or(&dx),
            &fch,
            (&p.mlp_proj_weight, &p.mlp_proj_bias),
            shapes.mlp_proj,
            true,
        );
        drop((dbranch, fch));
        let ln_2 = (&p.ln_2_weight, &p.ln_2_bias);
        let ln2 = ln2.unwrap_or_else(|| remake(ops, &x_mid, ln_2, shapes.norm));
        let c_fc = (&p.c_fc_weight, &p.c_fc_bias);
        let (dln2, c_fc_weight, c_fc_bias) =
            ops.matmul_backward(&dfch, &ln2.out, c_fc, shapes.c_fc, false);
        drop((dfch, ln2.out));
        let (dx_mid, dattproj, ln_2_weight, ln_2_bias) = ops.layernorm_backward(
            &dln2,
            (&x_mid, &ln2.mean, &ln2.rstd),
            ln_2,
            shapes.norm,
            Some(&dx),
            site_mask(dropout, attn_site(l)),
        );
        drop((dln2, dx, x_mid, ln2.mean, ln2.rstd));

        // x_mid = x_in + drop(attproj(attention(qkv(ln1(x_in))))).
        let (datty, attn_proj_weight, attn_proj_bias) = ops.matmul_backward(
            dattproj.as_ref().unwrap_or(&dx_mid),
            &atty,
            (&p.attn_proj_weight, &p.attn_proj_bias),
            shapes.attn_proj,
            false,
        );
        drop(dattproj);
        let att_drop = dropout.and_then(|d| d.attention(l));
        let saved = (&qkv, &atty, &att_saved);
        let dqkv = ops.attention_backward(&datty, saved, shapes.attention, att_drop);
        drop((datty, qkv, atty, att_saved));
        let ln_1 = (&p.ln_1_weight, &p.ln_1_bias);
        let ln1 = ln1.unwrap_or_else(|| remake(ops, x_in, ln_1, shapes.norm));
        let c_attn = (&p.c_attn_weight, &p.c_attn_bias);
        let (dln1, c_attn_weight, c_attn_bias) =
            ops.matmul_backward(&dqkv, &ln1.out, c_attn, shapes.c_attn, false);
        drop((dqkv, ln1.out));
        let (dx_in, dbelow, ln_1_weight, ln_1_bias) = ops.layernorm_backward(
            &dln1,
            (x_in, &ln1.mean, &ln1.rstd),
            ln_1,
            shapes.norm,
            Some(&dx_mid),
            site_mask(dropout, below(l)),
        );
        drop((dln1, dx_mid, ln1.mean, ln1.rstd));
        (dx, dbranch) = (dx_in, dbelow);
        dblocks.push(BlockParams {
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
        });
    }
    dblocks.reverse();
    ops.set_layer(None);
    // The gradient of x0 = dropout(embedded), through the embedding's mask.
    let dx = dbranch.unwrap_or(dx);
    // encoder_backward adds the head's gradient into the embedding's.
    ops.finish_weight_grads();
    let embeddings = (&params.wte, &params.wpe);
    let (wte, wpe) = ops.encoder_backward(&dx, batch, embeddings, shapes.embedding, &head_dwte);
    GptParams {
        wte,
        wpe,
        blocks: dblocks,
        ln_f_weight,
        ln_f_bias,
    }
}

//! The GPT: configuration, parameters, and the forward and backward passes.
//!
//! The architecture is written once, generic over [`Ops`]: [`GpuOps`] runs every op
//! as a kernel on pooled buffers, [`CpuOps`] runs the CPU reference. The trainer uses
//! the first; the step-parity test runs both from the same seed and compares losses
//! and gradients (llm.c's check, with our own reference standing in for PyTorch).
//!
//! GPT-2 layout: token + position embedding, `layers` pre-LN blocks (causal
//! multi-head attention, GELU MLP 4x wide, residual adds), a final layernorm, and an
//! output head tied to the token embedding.

mod cpu;
mod gpu;

pub use cpu::{CpuBatch, CpuOps};
pub use gpu::{grad_rooms, GpuBatch, GpuOps};

/// Where dropout applies: a setting of the run, defined with the others.
pub use crate::config::DropoutPlacement;

use crate::error::{Error, Result};
use crate::reference::{AttnDropout, DropoutMask};
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
    fn from_array(a: [T; BLOCK_TENSORS]) -> Self {
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
    /// The tensors in [`GptConfig::params`] order.
    pub fn into_flat(self) -> Vec<T> {
        let mut flat = Vec::with_capacity(4 + BLOCK_TENSORS * self.blocks.len());
        flat.extend([self.wte, self.wpe]);
        for block in self.blocks {
            flat.extend(block.into_array());
        }
        flat.extend([self.ln_f_weight, self.ln_f_bias]);
        flat
    }

    /// Tensors in [`GptConfig::params`] order, named; fails unless there are
    /// `4 + 12 * layers` of them.
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

    /// References to the tensors, in [`GptConfig::params`] order.
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

/// The ops a GPT is made of, on some backend. Each mirrors one kernel launcher in
/// [`crate::kernels`] and one function in [`crate::reference`]; see those for shapes.
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
    /// With `dropout`, the embedding through that mask.
    #[allow(clippy::too_many_arguments)]
    fn encoder_forward(
        &self,
        batch: &Self::Batch,
        wte: &Self::W,
        wpe: &Self::W,
        b: usize,
        t: usize,
        c: usize,
        dropout: Option<DropoutMask>,
    ) -> Self::T;
    #[allow(clippy::too_many_arguments)]
    /// The gradients of `wte` (the head's, `head_dwte`, added in) and `wpe`.
    fn encoder_backward(
        &self,
        dout: &Self::T,
        batch: &Self::Batch,
        embeddings: (&Self::W, &Self::W),
        b: usize,
        t: usize,
        c: usize,
        v: usize,
        head_dwte: &Self::T,
    ) -> (Self::G, Self::G);
    fn layernorm_forward(
        &self,
        x: &Self::T,
        w: &Self::W,
        bias: &Self::W,
        rows: usize,
        c: usize,
    ) -> (Self::T, Self::T, Self::T);
    /// Returns (dx, masked, dweight, dbias). With `resid` (the residual stream's
    /// gradient, when `x` was the stream), `dx = resid + ` the layernorm's input
    /// gradient; with `dropout`, `masked` is `dx` through that mask (the gradient of
    /// the residual branch, or the embedding, whose dropped output was added into
    /// `x`).
    #[allow(clippy::too_many_arguments)]
    fn layernorm_backward(
        &self,
        dout: &Self::T,
        x: &Self::T,
        weights: (&Self::W, &Self::W),
        mean: &Self::T,
        rstd: &Self::T,
        rows: usize,
        c: usize,
        resid: Option<&Self::T>,
        dropout: Option<DropoutMask>,
    ) -> (Self::T, Option<Self::T>, Self::G, Self::G);
    fn matmul_forward(
        &self,
        x: &Self::T,
        w: &Self::W,
        bias: Option<&Self::W>,
        rows: usize,
        k: usize,
        n: usize,
    ) -> Self::T;
    /// `resid + dropout(act(x) · wᵀ + bias)`, act GELU with `gelu_inp`: a residual
    /// branch's last `Linear`, its dropout and the residual add in one op.
    #[allow(clippy::too_many_arguments)]
    fn residual_branch_forward(
        &self,
        resid: &Self::T,
        x: &Self::T,
        w: &Self::W,
        bias: &Self::W,
        rows: usize,
        k: usize,
        n: usize,
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
    #[allow(clippy::too_many_arguments)]
    fn matmul_backward(
        &self,
        dout: &Self::T,
        x: &Self::T,
        weights: (&Self::W, &Self::W),
        rows: usize,
        k: usize,
        n: usize,
        gelu_inp: bool,
    ) -> (Self::T, Self::G, Self::G);
    /// The head's product with the tied `wte` (`[v, c]`): (dx, its part of wte's
    /// gradient, which [`Ops::encoder_backward`] adds in).
    fn head_backward(
        &self,
        dout: &Self::T,
        x: &Self::T,
        wte: &Self::W,
        rows: usize,
        c: usize,
        v: usize,
    ) -> (Self::T, Self::T);
    /// With `dropout`, on the attention probabilities (the backward recomputes it).
    fn attention_forward(
        &self,
        qkv: &Self::T,
        b: usize,
        t: usize,
        c: usize,
        nh: usize,
        dropout: Option<AttnDropout>,
    ) -> (Self::T, Self::T);
    #[allow(clippy::too_many_arguments)]
    fn attention_backward(
        &self,
        dout: &Self::T,
        qkv: &Self::T,
        out: &Self::T,
        saved: &Self::T,
        b: usize,
        t: usize,
        c: usize,
        nh: usize,
        dropout: Option<AttnDropout>,
    ) -> Self::T;
    /// Losses of each row and their gradient: `dlogits` of `dloss * sum(losses)`.
    fn crossentropy_forward(
        &self,
        logits: &Self::T,
        batch: &Self::Batch,
        rows: usize,
        v: usize,
        dloss: f32,
    ) -> (Self::T, Self::T);
    fn mean(&self, x: &Self::T, n: usize) -> Self::T;
}

/// Dropout during training. Masks are a function of (run seed, step, site), so
/// forward and backward, and the GPU and CPU, draw the same ones.
#[derive(Clone, Copy, Debug)]
pub struct Dropout {
    pub p: f32,
    pub seed: u64,
    pub step: u32,
    pub placement: DropoutPlacement,
}

impl Dropout {
    /// `Some` only when it drops anything.
    pub fn new(p: f32, seed: u64, step: u32, placement: DropoutPlacement) -> Option<Self> {
        (p > 0.0).then_some(Dropout {
            p,
            seed,
            step,
            placement,
        })
    }

    /// The mask of `site`: site 0 is the embedding; a block's attention and MLP
    /// outputs follow.
    fn mask(&self, site: u32) -> DropoutMask {
        DropoutMask {
            p: self.p,
            seed: crate::reference::dropout_seed(self.seed, self.step, site),
        }
    }

    /// The attention-probability mask of layer `l`, with nanoGPT's placement.
    fn attention(&self, l: usize) -> Option<AttnDropout> {
        (self.placement == DropoutPlacement::Nanogpt).then(|| AttnDropout {
            p: self.p,
            seed: crate::reference::dropout_seed(self.seed, self.step, attn_probs_site(l)),
        })
    }
}

/// The mask of `site`, when there is dropout.
fn site_mask(dropout: Option<&Dropout>, site: u32) -> Option<DropoutMask> {
    dropout.map(|d| d.mask(site))
}

fn attn_site(l: usize) -> u32 {
    1 + 2 * l as u32
}

fn mlp_site(l: usize) -> u32 {
    2 + 2 * l as u32
}

/// Attention probabilities of layer `l`: apart from the residual sites at any depth.
fn attn_probs_site(l: usize) -> u32 {
    0x10000 + l as u32
}

/// What one block keeps from forward for backward.
struct BlockActs<T> {
    ln1: T,
    ln1_mean: T,
    ln1_rstd: T,
    qkv: T,
    atty: T,
    att_saved: T,
    /// Residual stream after attention (the attention branch's output and its dropped
    /// copy are never written: see [`Ops::residual_branch_forward`]).
    x_mid: T,
    ln2: T,
    ln2_mean: T,
    ln2_rstd: T,
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
/// into its per-call figures instead ([`crate::kernels::mean_into`]).
pub fn mean_loss<O: Ops>(ops: &O, acts: &Activations<O::T>) -> O::T {
    ops.mean(&acts.losses, acts.b * acts.t)
}

/// Runs the GPT on `b` sequences of `t` tokens (`t <= context`), with dropout when
/// training.
pub fn forward<O: Ops>(
    ops: &O,
    cfg: &GptConfig,
    params: &GptParams<O::W>,
    batch: &O::Batch,
    b: usize,
    t: usize,
    dropout: Option<&Dropout>,
) -> Activations<O::T> {
    let (c, nh, v, rows) = (cfg.width, cfg.heads, cfg.vocab, b * t);
    let x0 = ops.encoder_forward(
        batch,
        &params.wte,
        &params.wpe,
        b,
        t,
        c,
        site_mask(dropout, 0),
    );
    let mut blocks: Vec<BlockActs<O::T>> = Vec::with_capacity(cfg.layers);
    for (l, p) in params.blocks.iter().enumerate() {
        ops.set_layer(Some(l));
        let x = blocks.last().map_or(&x0, |blk| &blk.x_out);
        let (ln1, ln1_mean, ln1_rstd) =
            ops.layernorm_forward(x, &p.ln_1_weight, &p.ln_1_bias, rows, c);
        let qkv = ops.matmul_forward(&ln1, &p.c_attn_weight, Some(&p.c_attn_bias), rows, c, 3 * c);
        let att_drop = dropout.and_then(|d| d.attention(l));
        let (atty, att_saved) = ops.attention_forward(&qkv, b, t, c, nh, att_drop);
        let x_mid = ops.residual_branch_forward(
            x,
            &atty,
            &p.attn_proj_weight,
            &p.attn_proj_bias,
            rows,
            c,
            c,
            false,
            site_mask(dropout, attn_site(l)),
        );
        let (ln2, ln2_mean, ln2_rstd) =
            ops.layernorm_forward(&x_mid, &p.ln_2_weight, &p.ln_2_bias, rows, c);
        let fch = ops.matmul_forward(&ln2, &p.c_fc_weight, Some(&p.c_fc_bias), rows, c, 4 * c);
        let x_out = ops.residual_branch_forward(
            &x_mid,
            &fch,
            &p.mlp_proj_weight,
            &p.mlp_proj_bias,
            rows,
            4 * c,
            c,
            true,
            site_mask(dropout, mlp_site(l)),
        );
        blocks.push(BlockActs {
            ln1,
            ln1_mean,
            ln1_rstd,
            qkv,
            atty,
            att_saved,
            x_mid,
            ln2,
            ln2_mean,
            ln2_rstd,
            fch,
            x_out,
        });
    }
    ops.set_layer(None);
    let x = blocks.last().map_or(&x0, |blk| &blk.x_out);
    let (lnf, lnf_mean, lnf_rstd) =
        ops.layernorm_forward(x, &params.ln_f_weight, &params.ln_f_bias, rows, c);
    let logits = ops.matmul_forward(&lnf, &params.wte, None, rows, c, v);
    // The loss is the mean over rows: its gradient comes with it.
    let (losses, dlogits) = ops.crossentropy_forward(&logits, batch, rows, v, 1.0 / rows as f32);
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

/// Gradients of the mean loss for every parameter.
/// Consumes the activations, releasing each block's as soon as it is done with them
/// (with the pool, the next block's backward reuses those buffers).
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
    let (c, nh, v, rows) = (cfg.width, cfg.heads, cfg.vocab, b * t);

    let (dlnf, head_dwte) = ops.head_backward(&dlogits, &lnf, &params.wte, rows, c, v);
    drop((dlogits, lnf));
    // Each layernorm backward also adds the residual stream's gradient (`dx`), and
    // writes it through the mask of the dropout whose output was added into its
    // input (`dbranch`): the block's MLP branch, its attention branch, the block
    // below's MLP branch, and under the first block the embedding.
    let below = |l: usize| if l == 0 { 0 } else { mlp_site(l - 1) };
    let x_last = blocks.last().map_or(&x0, |blk| &blk.x_out);
    let (mut dx, mut dbranch, ln_f_weight, ln_f_bias) = ops.layernorm_backward(
        &dlnf,
        x_last,
        (&params.ln_f_weight, &params.ln_f_bias),
        &lnf_mean,
        &lnf_rstd,
        rows,
        c,
        None,
        site_mask(dropout, below(cfg.layers)),
    );
    drop((dlnf, lnf_mean, lnf_rstd));

    // Filled last block first.
    let mut dblocks = Vec::with_capacity(cfg.layers);
    for (l, p) in params.blocks.iter().enumerate().rev() {
        ops.set_layer(Some(l));
        let a = blocks.pop().expect("one per layer");
        let x_in = blocks.last().map_or(&x0, |blk| &blk.x_out);

        // x_out = x_mid + drop(fcproj(gelu(fc(ln2(x_mid))))): dx flows to both terms,
        // through the branch's dropout mask into the branch (and through the GELU
        // that fcproj applied as it read fch).
        let (dfch, mlp_proj_weight, mlp_proj_bias) = ops.matmul_backward(
            dbranch.as_ref().unwrap_or(&dx),
            &a.fch,
            (&p.mlp_proj_weight, &p.mlp_proj_bias),
            rows,
            4 * c,
            c,
            true,
        );
        drop(dbranch);
        let c_fc = (&p.c_fc_weight, &p.c_fc_bias);
        let (dln2, c_fc_weight, c_fc_bias) =
            ops.matmul_backward(&dfch, &a.ln2, c_fc, rows, c, 4 * c, false);
        drop(dfch);
        let (dx_mid, dattproj, ln_2_weight, ln_2_bias) = ops.layernorm_backward(
            &dln2,
            &a.x_mid,
            (&p.ln_2_weight, &p.ln_2_bias),
            &a.ln2_mean,
            &a.ln2_rstd,
            rows,
            c,
            Some(&dx),
            site_mask(dropout, attn_site(l)),
        );
        drop((dln2, dx));

        // x_mid = x_in + drop(attproj(attention(qkv(ln1(x_in))))).
        let (datty, attn_proj_weight, attn_proj_bias) = ops.matmul_backward(
            dattproj.as_ref().unwrap_or(&dx_mid),
            &a.atty,
            (&p.attn_proj_weight, &p.attn_proj_bias),
            rows,
            c,
            c,
            false,
        );
        drop(dattproj);
        let att_drop = dropout.and_then(|d| d.attention(l));
        let dqkv =
            ops.attention_backward(&datty, &a.qkv, &a.atty, &a.att_saved, b, t, c, nh, att_drop);
        drop(datty);
        let c_attn = (&p.c_attn_weight, &p.c_attn_bias);
        let (dln1, c_attn_weight, c_attn_bias) =
            ops.matmul_backward(&dqkv, &a.ln1, c_attn, rows, c, 3 * c, false);
        drop(dqkv);
        let (dx_in, dbelow, ln_1_weight, ln_1_bias) = ops.layernorm_backward(
            &dln1,
            x_in,
            (&p.ln_1_weight, &p.ln_1_bias),
            &a.ln1_mean,
            &a.ln1_rstd,
            rows,
            c,
            Some(&dx_mid),
            site_mask(dropout, below(l)),
        );
        drop((dln1, dx_mid));
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
        // `a` (this block's activations) drops here, back to the pool.
    }
    dblocks.reverse();
    ops.set_layer(None);
    // The gradient of x0 = dropout(embedded), through the embedding's mask.
    let dx = dbranch.unwrap_or(dx);
    // encoder_backward adds the head's gradient into the embedding's.
    ops.finish_weight_grads();
    let embeddings = (&params.wte, &params.wpe);
    let (wte, wpe) = ops.encoder_backward(&dx, batch, embeddings, b, t, c, v, &head_dwte);
    GptParams {
        wte,
        wpe,
        blocks: dblocks,
        ln_f_weight,
        ln_f_bias,
    }
}

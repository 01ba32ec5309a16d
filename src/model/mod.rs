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
pub use gpu::{GpuBatch, GpuOps};

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

    /// Parameter tensors, in the one order every part of the crate uses. Names follow
    /// nanoGPT's GPT-2 state dict, and every matrix is stored as PyTorch's `nn.Linear`
    /// stores it (`[out, in]`, row-major), so PyTorch code loads them without renaming
    /// or transposing. The output head is tied to `transformer.wte.weight`.
    pub fn params(&self) -> Vec<ParamSpec> {
        let (v, t, c, l) = (self.vocab, self.context, self.width, self.layers);
        let std = 0.02;
        // GPT-2: residual projections scaled down so the residual stream's variance
        // does not grow with depth.
        let proj_std = 0.02 / ((2 * l) as f32).sqrt();
        let mut specs = vec![
            ParamSpec::new("transformer.wte.weight", v * c, Init::Normal(std), true),
            ParamSpec::new("transformer.wpe.weight", t * c, Init::Normal(std), true),
        ];
        for i in 0..l {
            let p = |name: &str| format!("transformer.h.{i}.{name}");
            specs.extend([
                ParamSpec::new(&p("ln_1.weight"), c, Init::Ones, false),
                ParamSpec::new(&p("ln_1.bias"), c, Init::Zeros, false),
                ParamSpec::new(&p("attn.c_attn.weight"), 3 * c * c, Init::Normal(std), true),
                ParamSpec::new(&p("attn.c_attn.bias"), 3 * c, Init::Zeros, false),
                ParamSpec::new(&p("attn.c_proj.weight"), c * c, Init::Normal(proj_std), true),
                ParamSpec::new(&p("attn.c_proj.bias"), c, Init::Zeros, false),
                ParamSpec::new(&p("ln_2.weight"), c, Init::Ones, false),
                ParamSpec::new(&p("ln_2.bias"), c, Init::Zeros, false),
                ParamSpec::new(&p("mlp.c_fc.weight"), 4 * c * c, Init::Normal(std), true),
                ParamSpec::new(&p("mlp.c_fc.bias"), 4 * c, Init::Zeros, false),
                ParamSpec::new(&p("mlp.c_proj.weight"), 4 * c * c, Init::Normal(proj_std), true),
                ParamSpec::new(&p("mlp.c_proj.bias"), c, Init::Zeros, false),
            ]);
        }
        specs.push(ParamSpec::new("transformer.ln_f.weight", c, Init::Ones, false));
        specs.push(ParamSpec::new("transformer.ln_f.bias", c, Init::Zeros, false));
        specs
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

/// Index of each tensor in [`GptConfig::params`].
pub(crate) struct Idx;

impl Idx {
    pub const WTE: usize = 0;
    pub const WPE: usize = 1;
    pub fn layer(l: usize) -> usize {
        2 + 12 * l
    }
    pub fn lnf(layers: usize) -> usize {
        2 + 12 * layers
    }
}
// Offsets inside a layer's twelve tensors.
const LN1W: usize = 0;
const LN1B: usize = 1;
const QKVW: usize = 2;
const QKVB: usize = 3;
const ATTPROJW: usize = 4;
const ATTPROJB: usize = 5;
const LN2W: usize = 6;
const LN2B: usize = 7;
const FCW: usize = 8;
const FCB: usize = 9;
const FCPROJW: usize = 10;
const FCPROJB: usize = 11;

/// The ops a GPT is made of, on some backend. Each mirrors one kernel launcher in
/// [`crate::kernels`] and one function in [`crate::reference`]; see those for shapes.
pub trait Ops {
    type T;
    /// A batch's token ids and targets as the backend holds them.
    type Batch;
    /// The block the coming ops belong to (`None`: outside the blocks), for the
    /// allocation trace. Nothing to do by default.
    fn set_layer(&self, _layer: Option<usize>) {}
    fn encoder_forward(
        &self,
        batch: &Self::Batch,
        wte: &Self::T,
        wpe: &Self::T,
        b: usize,
        t: usize,
        c: usize,
    ) -> Self::T;
    #[allow(clippy::too_many_arguments)]
    fn encoder_backward(
        &self,
        dout: &Self::T,
        batch: &Self::Batch,
        b: usize,
        t: usize,
        c: usize,
        v: usize,
        head_dwte: &Self::T,
    ) -> (Self::T, Self::T);
    fn layernorm_forward(
        &self,
        x: &Self::T,
        w: &Self::T,
        bias: &Self::T,
        rows: usize,
        c: usize,
    ) -> (Self::T, Self::T, Self::T);
    #[allow(clippy::too_many_arguments)]
    fn layernorm_backward(
        &self,
        dout: &Self::T,
        x: &Self::T,
        w: &Self::T,
        mean: &Self::T,
        rstd: &Self::T,
        rows: usize,
        c: usize,
    ) -> (Self::T, Self::T, Self::T);
    fn matmul_forward(
        &self,
        x: &Self::T,
        w: &Self::T,
        bias: Option<&Self::T>,
        rows: usize,
        k: usize,
        n: usize,
    ) -> Self::T;
    #[allow(clippy::too_many_arguments)]
    fn matmul_backward(
        &self,
        dout: &Self::T,
        x: &Self::T,
        w: &Self::T,
        rows: usize,
        k: usize,
        n: usize,
        with_bias: bool,
    ) -> (Self::T, Self::T, Option<Self::T>);
    fn attention_forward(
        &self,
        qkv: &Self::T,
        b: usize,
        t: usize,
        c: usize,
        nh: usize,
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
    ) -> Self::T;
    fn gelu_forward(&self, x: &Self::T, n: usize) -> Self::T;
    fn gelu_backward(&self, x: &Self::T, dout: &Self::T, n: usize) -> Self::T;
    fn add(&self, a: &Self::T, b: &Self::T, n: usize) -> Self::T;
    fn crossentropy_forward(
        &self,
        logits: &Self::T,
        batch: &Self::Batch,
        rows: usize,
        v: usize,
    ) -> (Self::T, Self::T);
    fn crossentropy_backward(
        &self,
        probs: &Self::T,
        batch: &Self::Batch,
        rows: usize,
        v: usize,
        scale: f32,
    ) -> Self::T;
    fn mean(&self, x: &Self::T, n: usize) -> Self::T;
    fn dropout(&self, x: &Self::T, n: usize, p: f32, seed: u32) -> Self::T;
}

/// Dropout during training, as nanoGPT places it: on the embeddings and on the output
/// of each block's two residual branches. Masks are a function of (run seed, step,
/// site), so forward and backward, and the GPU and CPU, draw the same ones.
#[derive(Clone, Copy, Debug)]
pub struct Dropout {
    pub p: f32,
    pub seed: u64,
    pub step: u32,
}

impl Dropout {
    /// `Some` only when it drops anything.
    pub fn new(p: f32, seed: u64, step: u32) -> Option<Self> {
        (p > 0.0).then_some(Dropout { p, seed, step })
    }

    /// Site 0 is the embedding; a block's attention and MLP outputs follow.
    fn apply<O: Ops>(&self, ops: &O, x: &O::T, n: usize, site: u32) -> O::T {
        let seed = crate::reference::dropout_seed(self.seed, self.step, site);
        ops.dropout(x, n, self.p, seed)
    }
}

/// `x` after dropout at `site`, or `x` itself without dropout.
fn dropped<O: Ops>(ops: &O, dropout: Option<&Dropout>, x: O::T, n: usize, site: u32) -> O::T {
    match dropout {
        Some(d) => d.apply(ops, &x, n, site),
        None => x,
    }
}

/// The gradient through dropout at `site` (the same mask), when there is dropout.
fn masked<O: Ops>(
    ops: &O,
    dropout: Option<&Dropout>,
    g: &O::T,
    n: usize,
    site: u32,
) -> Option<O::T> {
    dropout.map(|d| d.apply(ops, g, n, site))
}

fn attn_site(l: usize) -> u32 {
    1 + 2 * l as u32
}

fn mlp_site(l: usize) -> u32 {
    2 + 2 * l as u32
}

/// What one block keeps from forward for backward.
struct BlockActs<T> {
    ln1: T,
    ln1_mean: T,
    ln1_rstd: T,
    qkv: T,
    atty: T,
    att_saved: T,
    /// Residual stream after attention.
    x_mid: T,
    ln2: T,
    ln2_mean: T,
    ln2_rstd: T,
    fch: T,
    fch_gelu: T,
    /// Residual stream after the MLP: the next block's input.
    x_out: T,
}

/// Everything forward keeps for backward, and the loss.
pub struct Activations<T> {
    x0: T,
    blocks: Vec<BlockActs<T>>,
    lnf: T,
    lnf_mean: T,
    lnf_rstd: T,
    /// Logits, `b*t*vocab`.
    pub logits: T,
    probs: T,
    /// Per-position losses, `b*t`.
    pub losses: T,
    /// Mean loss, one element.
    pub loss: T,
    b: usize,
    t: usize,
}

/// Runs the GPT on `b` sequences of `t` tokens (`t <= context`), with dropout when
/// training.
pub fn forward<O: Ops>(
    ops: &O,
    cfg: &GptConfig,
    params: &[O::T],
    batch: &O::Batch,
    b: usize,
    t: usize,
    dropout: Option<&Dropout>,
) -> Activations<O::T> {
    let (c, nh, v, rows) = (cfg.width, cfg.heads, cfg.vocab, b * t);
    let embedded = ops.encoder_forward(batch, &params[Idx::WTE], &params[Idx::WPE], b, t, c);
    let x0 = dropped(ops, dropout, embedded, rows * c, 0);
    let mut blocks: Vec<BlockActs<O::T>> = Vec::with_capacity(cfg.layers);
    for l in 0..cfg.layers {
        ops.set_layer(Some(l));
        let p = &params[Idx::layer(l)..Idx::layer(l) + 12];
        let x = blocks.last().map_or(&x0, |blk| &blk.x_out);
        let (ln1, ln1_mean, ln1_rstd) = ops.layernorm_forward(x, &p[LN1W], &p[LN1B], rows, c);
        let qkv = ops.matmul_forward(&ln1, &p[QKVW], Some(&p[QKVB]), rows, c, 3 * c);
        let (atty, att_saved) = ops.attention_forward(&qkv, b, t, c, nh);
        let attproj = ops.matmul_forward(&atty, &p[ATTPROJW], Some(&p[ATTPROJB]), rows, c, c);
        let attproj = dropped(ops, dropout, attproj, rows * c, attn_site(l));
        let x_mid = ops.add(x, &attproj, rows * c);
        drop(attproj);
        let (ln2, ln2_mean, ln2_rstd) = ops.layernorm_forward(&x_mid, &p[LN2W], &p[LN2B], rows, c);
        let fch = ops.matmul_forward(&ln2, &p[FCW], Some(&p[FCB]), rows, c, 4 * c);
        let fch_gelu = ops.gelu_forward(&fch, rows * 4 * c);
        let fcproj = ops.matmul_forward(&fch_gelu, &p[FCPROJW], Some(&p[FCPROJB]), rows, 4 * c, c);
        let fcproj = dropped(ops, dropout, fcproj, rows * c, mlp_site(l));
        let x_out = ops.add(&x_mid, &fcproj, rows * c);
        drop(fcproj);
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
            fch_gelu,
            x_out,
        });
    }
    ops.set_layer(None);
    let lnf_at = Idx::lnf(cfg.layers);
    let x = blocks.last().map_or(&x0, |blk| &blk.x_out);
    let (lnf, lnf_mean, lnf_rstd) =
        ops.layernorm_forward(x, &params[lnf_at], &params[lnf_at + 1], rows, c);
    let logits = ops.matmul_forward(&lnf, &params[Idx::WTE], None, rows, c, v);
    let (losses, probs) = ops.crossentropy_forward(&logits, batch, rows, v);
    let loss = ops.mean(&losses, rows);
    Activations {
        x0,
        blocks,
        lnf,
        lnf_mean,
        lnf_rstd,
        logits,
        probs,
        losses,
        loss,
        b,
        t,
    }
}

/// Gradients of the mean loss for every parameter, in [`GptConfig::params`] order.
/// Consumes the activations, releasing each block's as soon as it is done with them
/// (with the pool, the next block's backward reuses those buffers).
pub fn backward<O: Ops>(
    ops: &O,
    cfg: &GptConfig,
    params: &[O::T],
    batch: &O::Batch,
    acts: Activations<O::T>,
    dropout: Option<&Dropout>,
) -> Vec<O::T> {
    let Activations {
        x0,
        mut blocks,
        lnf,
        lnf_mean,
        lnf_rstd,
        logits,
        probs,
        losses,
        loss,
        b,
        t,
    } = acts;
    drop((logits, losses, loss));
    let (c, nh, v, rows) = (cfg.width, cfg.heads, cfg.vocab, b * t);
    let mut grads: Vec<Option<O::T>> = (0..params.len()).map(|_| None).collect();

    let dlogits = ops.crossentropy_backward(&probs, batch, rows, v, 1.0 / rows as f32);
    drop(probs);
    let (dlnf, head_dwte, _) =
        ops.matmul_backward(&dlogits, &lnf, &params[Idx::WTE], rows, c, v, false);
    drop((dlogits, lnf));
    let lnf_at = Idx::lnf(cfg.layers);
    let x_last = blocks.last().map_or(&x0, |blk| &blk.x_out);
    let (mut dx, dw, db) = ops.layernorm_backward(
        &dlnf,
        x_last,
        &params[lnf_at],
        &lnf_mean,
        &lnf_rstd,
        rows,
        c,
    );
    drop((dlnf, lnf_mean, lnf_rstd));
    grads[lnf_at] = Some(dw);
    grads[lnf_at + 1] = Some(db);

    for l in (0..cfg.layers).rev() {
        ops.set_layer(Some(l));
        let a = blocks.pop().expect("one per layer");
        let x_in = blocks.last().map_or(&x0, |blk| &blk.x_out);
        let base = Idx::layer(l);
        let p = &params[base..base + 12];
        let mut put = |offset: usize, grad: O::T| grads[base + offset] = Some(grad);

        // x_out = x_mid + fcproj(gelu(fc(ln2(x_mid)))): dx flows to both terms.
        let (dfch_gelu, dw, db) =
            ops.matmul_backward(&dx, &a.fch_gelu, &p[FCPROJW], rows, 4 * c, c, true);
        put(FCPROJW, dw);
        put(FCPROJB, db.expect("with bias"));
        let dfch = ops.gelu_backward(&a.fch, &dfch_gelu, rows * 4 * c);
        drop(dfch_gelu);
        let (dln2, dw, db) = ops.matmul_backward(&dfch, &a.ln2, &p[FCW], rows, c, 4 * c, true);
        drop(dfch);
        put(FCW, dw);
        put(FCB, db.expect("with bias"));
        let (dx_mid_ln, dw, db) =
            ops.layernorm_backward(&dln2, &a.x_mid, &p[LN2W], &a.ln2_mean, &a.ln2_rstd, rows, c);
        drop(dln2);
        put(LN2W, dw);
        put(LN2B, db);
        let dx_mid = ops.add(&dx, &dx_mid_ln, rows * c);
        drop(dx_mid_ln);

        // x_mid = x_in + drop(attproj(attention(qkv(ln1(x_in))))).
        let dattproj = masked(ops, dropout, &dx_mid, rows * c, attn_site(l));
        let (datty, dw, db) = ops.matmul_backward(
            dattproj.as_ref().unwrap_or(&dx_mid),
            &a.atty,
            &p[ATTPROJW],
            rows,
            c,
            c,
            true,
        );
        drop(dattproj);
        put(ATTPROJW, dw);
        put(ATTPROJB, db.expect("with bias"));
        let dqkv = ops.attention_backward(&datty, &a.qkv, &a.atty, &a.att_saved, b, t, c, nh);
        drop(datty);
        let (dln1, dw, db) = ops.matmul_backward(&dqkv, &a.ln1, &p[QKVW], rows, c, 3 * c, true);
        drop(dqkv);
        put(QKVW, dw);
        put(QKVB, db.expect("with bias"));
        let (dx_in_ln, dw, db) =
            ops.layernorm_backward(&dln1, x_in, &p[LN1W], &a.ln1_mean, &a.ln1_rstd, rows, c);
        drop(dln1);
        put(LN1W, dw);
        put(LN1B, db);
        dx = ops.add(&dx_mid, &dx_in_ln, rows * c);
        // `a` (this block's activations) drops here, back to the pool.
    }
    ops.set_layer(None);
    let dembedded = masked(ops, dropout, &dx, rows * c, 0);
    let dx = dembedded.unwrap_or(dx);
    let (dwte, dwpe) = ops.encoder_backward(&dx, batch, b, t, c, v, &head_dwte);
    grads[Idx::WTE] = Some(dwte);
    grads[Idx::WPE] = Some(dwpe);
    grads
        .into_iter()
        .map(|g| g.expect("every parameter gets a gradient"))
        .collect()
}

//! The CPU reference of every op: plain Rust written for clarity, the specification
//! the GPU kernels must meet. Sums accumulate in f64 where order matters.
//!
//! Shapes follow llm.c: `b` batch, `t` time (context), `c` channels, `v` vocab,
//! `nh` heads; tensors are row-major `Vec<f32>`.

// ---- residual add ----

/// `a + b`, elementwise.
pub fn residual_forward(a: &[f32], b: &[f32]) -> Vec<f32> {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| x + y).collect()
}

// ---- embedding ----

/// Token plus position embedding: `out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]`.
pub fn encoder_forward(
    tokens: &[u32],
    wte: &[f32],
    wpe: &[f32],
    b: usize,
    t: usize,
    c: usize,
) -> Vec<f32> {
    assert_eq!(tokens.len(), b * t);
    assert!(wpe.len() >= t * c);
    let mut out = vec![0.0; b * t * c];
    for (row, &tok) in tokens.iter().enumerate() {
        let pos = row % t;
        let tok = tok as usize;
        for i in 0..c {
            out[row * c + i] = wte[tok * c + i] + wpe[pos * c + i];
        }
    }
    out
}

/// Gradients of [`encoder_forward`]: `dwte` (`v*c`) gets `dout` of every position
/// holding that token, `dwpe` (`t*c`) sums `dout` over the batch.
pub fn encoder_backward(
    dout: &[f32],
    tokens: &[u32],
    b: usize,
    t: usize,
    c: usize,
    v: usize,
) -> (Vec<f32>, Vec<f32>) {
    assert_eq!(tokens.len(), b * t);
    assert_eq!(dout.len(), b * t * c);
    let mut dwte = vec![0.0f64; v * c];
    let mut dwpe = vec![0.0f64; t * c];
    for (row, &tok) in tokens.iter().enumerate() {
        let pos = row % t;
        let tok = tok as usize;
        for i in 0..c {
            let d = dout[row * c + i] as f64;
            dwte[tok * c + i] += d;
            dwpe[pos * c + i] += d;
        }
    }
    (to_f32(&dwte), to_f32(&dwpe))
}

fn to_f32(x: &[f64]) -> Vec<f32> {
    x.iter().map(|&y| y as f32).collect()
}

// ---- layernorm ----

/// LayerNorm's epsilon (PyTorch's default).
pub const LAYERNORM_EPS: f64 = 1e-5;

/// LayerNorm over the last dimension of `rows x c`, with the biased variance (as
/// PyTorch): returns `out`, and per row the `mean` and `rstd = 1/sqrt(var + eps)`
/// that the backward pass needs.
pub fn layernorm_forward(
    inp: &[f32],
    weight: &[f32],
    bias: &[f32],
    rows: usize,
    c: usize,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    assert_eq!(inp.len(), rows * c);
    let mut out = vec![0.0; rows * c];
    let mut means = vec![0.0; rows];
    let mut rstds = vec![0.0; rows];
    for r in 0..rows {
        let x = &inp[r * c..(r + 1) * c];
        let mean = x.iter().map(|&v| v as f64).sum::<f64>() / c as f64;
        let var = x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / c as f64;
        let rstd = 1.0 / (var + LAYERNORM_EPS).sqrt();
        for i in 0..c {
            let norm = (x[i] as f64 - mean) * rstd;
            out[r * c + i] = (norm * weight[i] as f64 + bias[i] as f64) as f32;
        }
        means[r] = mean as f32;
        rstds[r] = rstd as f32;
    }
    (out, means, rstds)
}

/// Gradients of [`layernorm_forward`]: `dinp` (`rows x c`), and `dweight`, `dbias`
/// (`c`, summed over rows). With `n = (x - mean) * rstd` and `g = weight * dout`:
/// `dinp = rstd * (g - mean(g) - n * mean(g * n))`.
pub fn layernorm_backward(
    dout: &[f32],
    inp: &[f32],
    weight: &[f32],
    mean: &[f32],
    rstd: &[f32],
    rows: usize,
    c: usize,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    assert_eq!(dout.len(), rows * c);
    assert_eq!(inp.len(), rows * c);
    let mut dinp = vec![0.0; rows * c];
    let mut dweight = vec![0.0f64; c];
    let mut dbias = vec![0.0f64; c];
    for r in 0..rows {
        let (m, s) = (mean[r] as f64, rstd[r] as f64);
        let norm = |i: usize| (inp[r * c + i] as f64 - m) * s;
        let g = |i: usize| weight[i] as f64 * dout[r * c + i] as f64;
        let g_mean = (0..c).map(g).sum::<f64>() / c as f64;
        let gn_mean = (0..c).map(|i| g(i) * norm(i)).sum::<f64>() / c as f64;
        for i in 0..c {
            let d = dout[r * c + i] as f64;
            dweight[i] += d * norm(i);
            dbias[i] += d;
            dinp[r * c + i] = (s * (g(i) - g_mean - norm(i) * gn_mean)) as f32;
        }
    }
    (dinp, to_f32(&dweight), to_f32(&dbias))
}

// ---- GELU ----

/// `sqrt(2 / pi)`, the tanh-GELU's inner scale.
const GELU_SCALE: f64 = 0.797_884_560_802_865_4;
const GELU_CUBIC: f64 = 0.044715;

/// GELU, tanh approximation (PyTorch's `approximate="tanh"`):
/// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
pub fn gelu_forward(x: &[f32]) -> Vec<f32> {
    x.iter()
        .map(|&x| {
            let x = x as f64;
            let u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
            (0.5 * x * (1.0 + u.tanh())) as f32
        })
        .collect()
}

/// Gradient of [`gelu_forward`] at `x`, times `dout`.
pub fn gelu_backward(x: &[f32], dout: &[f32]) -> Vec<f32> {
    assert_eq!(x.len(), dout.len());
    x.iter()
        .zip(dout)
        .map(|(&x, &d)| {
            let x = x as f64;
            let u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
            let th = u.tanh();
            let du = GELU_SCALE * (1.0 + 3.0 * GELU_CUBIC * x * x);
            let local = 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * du;
            (local * d as f64) as f32
        })
        .collect()
}

// ---- cross-entropy ----

/// Softmax of each row of `logits` (`rows x v`) and the cross-entropy loss of its
/// target: returns `losses` (`rows`) and `probs` (`rows x v`). The loss is
/// `logsumexp(row) - row[target]`, which stays finite when the target's probability
/// underflows.
pub fn crossentropy_forward(
    logits: &[f32],
    targets: &[u32],
    rows: usize,
    v: usize,
) -> (Vec<f32>, Vec<f32>) {
    assert_eq!(logits.len(), rows * v);
    assert_eq!(targets.len(), rows);
    let mut losses = vec![0.0; rows];
    let mut probs = vec![0.0; rows * v];
    for r in 0..rows {
        let row = &logits[r * v..(r + 1) * v];
        let max = row.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x as f64));
        let sum: f64 = row.iter().map(|&x| (x as f64 - max).exp()).sum();
        for i in 0..v {
            probs[r * v + i] = ((row[i] as f64 - max).exp() / sum) as f32;
        }
        let target = targets[r] as usize;
        assert!(target < v, "target {target} out of vocab {v}");
        losses[r] = (sum.ln() + max - row[target] as f64) as f32;
    }
    (losses, probs)
}

/// Gradient of `scale * sum(losses)` with respect to the logits:
/// `(probs - onehot(target)) * scale` (`scale = 1/rows` for the mean loss).
pub fn crossentropy_backward(
    probs: &[f32],
    targets: &[u32],
    rows: usize,
    v: usize,
    scale: f32,
) -> Vec<f32> {
    assert_eq!(probs.len(), rows * v);
    let mut dlogits = vec![0.0; rows * v];
    for r in 0..rows {
        for i in 0..v {
            let onehot = if targets[r] as usize == i { 1.0 } else { 0.0 };
            dlogits[r * v + i] = ((probs[r * v + i] as f64 - onehot) * scale as f64) as f32;
        }
    }
    dlogits
}

// ---- optimizer: mean, AdamW, gradient norms ----

/// The mean of `x` (0 for an empty slice).
pub fn mean(x: &[f32]) -> f32 {
    if x.is_empty() {
        return 0.0;
    }
    (x.iter().map(|&v| v as f64).sum::<f64>() / x.len() as f64) as f32
}

/// AdamW hyperparameters for one update.
#[derive(Clone, Copy, Debug)]
pub struct AdamW {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
    /// 1-based step number, for the bias corrections `1 - beta^step`.
    pub step: u32,
}

impl AdamW {
    /// `(1 - beta1^step, 1 - beta2^step)`, computed in f64 (both are near 0 early on).
    pub fn bias_corrections(&self) -> (f32, f32) {
        let step = self.step.max(1) as i32;
        (
            (1.0 - (self.beta1 as f64).powi(step)) as f32,
            (1.0 - (self.beta2 as f64).powi(step)) as f32,
        )
    }
}

/// One AdamW step on `param` with moments `m`, `v`, for `g = grad * grad_scale`
/// (the clipping scale). Weight decay is decoupled, as PyTorch's AdamW:
/// `param -= lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * param)`.
pub fn adamw_update(
    param: &mut [f32],
    grad: &[f32],
    m: &mut [f32],
    v: &mut [f32],
    hp: &AdamW,
    grad_scale: f32,
) {
    let n = param.len();
    assert!(grad.len() == n && m.len() == n && v.len() == n);
    let (bc1, bc2) = hp.bias_corrections();
    let (b1, b2) = (hp.beta1 as f64, hp.beta2 as f64);
    for i in 0..n {
        let g = grad[i] as f64 * grad_scale as f64;
        let mi = b1 * m[i] as f64 + (1.0 - b1) * g;
        let vi = b2 * v[i] as f64 + (1.0 - b2) * g * g;
        m[i] = mi as f32;
        v[i] = vi as f32;
        let m_hat = mi / bc1 as f64;
        let v_hat = vi / bc2 as f64;
        let p = param[i] as f64;
        let step = m_hat / (v_hat.sqrt() + hp.eps as f64) + hp.weight_decay as f64 * p;
        param[i] = (p - hp.lr as f64 * step) as f32;
    }
}

/// Sum of squares of one gradient tensor (a term of the global norm).
pub fn grad_sumsq(g: &[f32]) -> f64 {
    g.iter().map(|&x| x as f64 * x as f64).sum()
}

/// The global gradient norm from the sum of every tensor's [`grad_sumsq`], and the
/// factor that clips it: `max_norm / (norm + 1e-6)` when `max_norm > 0` and the norm
/// is above it, else 1.
pub fn clip_scale(total_sumsq: f64, max_norm: f32) -> (f32, f32) {
    let norm = total_sumsq.sqrt() as f32;
    let scale = if max_norm > 0.0 && norm > max_norm {
        max_norm / (norm + 1e-6)
    } else {
        1.0
    };
    (norm, scale)
}

/// `x *= s`.
pub fn scale_in_place(x: &mut [f32], s: f32) {
    for v in x {
        *v *= s;
    }
}

// ---- matmul ----

/// `out[r, j] = sum_i inp[r, i] * weight[j, i] + bias[j]`: a PyTorch `Linear`, with
/// `inp` `[rows, k]`, `weight` `[n, k]`, `bias` `[n]`, `out` `[rows, n]`.
pub fn matmul_forward(
    inp: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    rows: usize,
    k: usize,
    n: usize,
) -> Vec<f32> {
    assert_eq!(inp.len(), rows * k);
    assert_eq!(weight.len(), n * k);
    if let Some(bias) = bias {
        assert_eq!(bias.len(), n);
    }
    let mut out = vec![0.0f32; rows * n];
    for r in 0..rows {
        let x = &inp[r * k..(r + 1) * k];
        for j in 0..n {
            let w = &weight[j * k..(j + 1) * k];
            let mut acc = bias.map_or(0.0, |b| b[j] as f64);
            for i in 0..k {
                acc += x[i] as f64 * w[i] as f64;
            }
            out[r * n + j] = acc as f32;
        }
    }
    out
}

/// Gradients of [`matmul_forward`] given `dout` `[rows, n]`: `dinp = dout · weight`
/// (`[rows, k]`), `dweight = doutᵀ · inp` (`[n, k]`) and, `with_bias`, `dbias` the
/// column sums of `dout` (`[n]`). The weight gradients sum over every row.
pub fn matmul_backward(
    dout: &[f32],
    inp: &[f32],
    weight: &[f32],
    rows: usize,
    k: usize,
    n: usize,
    with_bias: bool,
) -> (Vec<f32>, Vec<f32>, Option<Vec<f32>>) {
    assert_eq!(dout.len(), rows * n);
    assert_eq!(inp.len(), rows * k);
    assert_eq!(weight.len(), n * k);
    let mut dinp = vec![0.0f32; rows * k];
    for r in 0..rows {
        for i in 0..k {
            let mut acc = 0.0f64;
            for j in 0..n {
                acc += dout[r * n + j] as f64 * weight[j * k + i] as f64;
            }
            dinp[r * k + i] = acc as f32;
        }
    }
    let mut dweight = vec![0.0f32; n * k];
    for j in 0..n {
        for i in 0..k {
            let mut acc = 0.0f64;
            for r in 0..rows {
                acc += dout[r * n + j] as f64 * inp[r * k + i] as f64;
            }
            dweight[j * k + i] = acc as f32;
        }
    }
    let dbias = with_bias.then(|| {
        (0..n)
            .map(|j| (0..rows).map(|r| dout[r * n + j] as f64).sum::<f64>() as f32)
            .collect()
    });
    (dinp, dweight, dbias)
}

// ---- fused ops: compositions of the ops above ----
//
// The kernels fuse elementwise ops into their neighbours; these compositions of the
// plain references are what the fused kernels must compute.

/// [`matmul_forward`] of `act(inp)`: GELU ([`gelu_forward`]) when `gelu_inp`, else
/// `inp` itself.
pub fn matmul_forward_act(
    inp: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    rows: usize,
    k: usize,
    n: usize,
    gelu_inp: bool,
) -> Vec<f32> {
    if !gelu_inp {
        return matmul_forward(inp, weight, bias, rows, k, n);
    }
    matmul_forward(&gelu_forward(inp), weight, bias, rows, k, n)
}

/// Gradients of [`matmul_forward_act`]: [`matmul_backward`] at `act(inp)`, and with
/// `gelu_inp` the input gradient taken through the GELU ([`gelu_backward`]).
#[allow(clippy::too_many_arguments)]
pub fn matmul_backward_act(
    dout: &[f32],
    inp: &[f32],
    weight: &[f32],
    rows: usize,
    k: usize,
    n: usize,
    with_bias: bool,
    gelu_inp: bool,
) -> (Vec<f32>, Vec<f32>, Option<Vec<f32>>) {
    if !gelu_inp {
        return matmul_backward(dout, inp, weight, rows, k, n, with_bias);
    }
    let (dact, dweight, dbias) =
        matmul_backward(dout, &gelu_forward(inp), weight, rows, k, n, with_bias);
    (gelu_backward(inp, &dact), dweight, dbias)
}

/// `resid + dropout(matmul_forward_act(...))`: the end of a residual branch, its
/// last `Linear` with the branch's dropout ([`dropout`] with `dropout`'s mask, if
/// any) and the residual add ([`residual_forward`]).
#[allow(clippy::too_many_arguments)]
pub fn residual_branch_forward(
    resid: &[f32],
    inp: &[f32],
    weight: &[f32],
    bias: &[f32],
    rows: usize,
    k: usize,
    n: usize,
    gelu_inp: bool,
    dropout_mask: Option<DropoutMask>,
) -> Vec<f32> {
    let branch = matmul_forward_act(inp, weight, Some(bias), rows, k, n, gelu_inp);
    residual_forward(resid, &dropped(&branch, dropout_mask))
}

/// [`layernorm_backward`] of a layernorm whose input was also the residual stream:
/// `dinp = resid + ` the layernorm's input gradient ([`residual_forward`]), and with
/// `mask` that sum through the dropout mask as well. Returns (dinp, masked, dweight,
/// dbias).
#[allow(clippy::too_many_arguments)]
pub fn layernorm_backward_residual(
    dout: &[f32],
    inp: &[f32],
    weight: &[f32],
    mean: &[f32],
    rstd: &[f32],
    rows: usize,
    c: usize,
    resid: Option<&[f32]>,
    mask: Option<DropoutMask>,
) -> (Vec<f32>, Option<Vec<f32>>, Vec<f32>, Vec<f32>) {
    let (dln, dweight, dbias) = layernorm_backward(dout, inp, weight, mean, rstd, rows, c);
    let dinp = match resid {
        Some(resid) => residual_forward(resid, &dln),
        None => dln,
    };
    let masked = mask.map(|_| dropped(&dinp, mask));
    (dinp, masked, dweight, dbias)
}

/// [`encoder_forward`] through the embedding's dropout `mask`, if any.
pub fn encoder_forward_dropout(
    tokens: &[u32],
    wte: &[f32],
    wpe: &[f32],
    b: usize,
    t: usize,
    c: usize,
    mask: Option<DropoutMask>,
) -> Vec<f32> {
    dropped(&encoder_forward(tokens, wte, wpe, b, t, c), mask)
}

/// `x` through `mask`, or `x` itself.
fn dropped(x: &[f32], mask: Option<DropoutMask>) -> Vec<f32> {
    match mask {
        Some(m) => dropout(x, m.p, m.seed),
        None => x.to_vec(),
    }
}

// ---- attention ----

/// Causal multi-head self-attention as in GPT-2 (llm.c's layout). `qkv` is
/// `[b, t, 3c]`: per position the queries, keys and values, each `c = nh * hs`
/// channels with head `h` at channels `h*hs..(h+1)*hs`. Scores are
/// `q·k / sqrt(hs)`, masked to keys at or before the query, softmaxed per row.
/// With `dropout`, each probability is kept or dropped by [`AttnDropout`]'s mask and
/// `out = (P * mask * scale) @ V` (nanoGPT's `attn_dropout`).
/// Returns `out` `[b, t, c]` and the probabilities `att` `[b, nh, t, t]` (zero above
/// the diagonal, before dropout), which [`attention_backward`] takes.
pub fn attention_forward(
    qkv: &[f32],
    b: usize,
    t: usize,
    c: usize,
    nh: usize,
    dropout: Option<AttnDropout>,
) -> (Vec<f32>, Vec<f32>) {
    assert_eq!(qkv.len(), b * t * 3 * c);
    assert!(nh > 0 && c.is_multiple_of(nh), "c must split into nh heads");
    let hs = c / nh;
    let scale = 1.0 / (hs as f64).sqrt();
    let at =
        |bi: usize, ti: usize, part: usize, h: usize| (bi * t + ti) * 3 * c + part * c + h * hs;
    let mut out = vec![0.0f32; b * t * c];
    let mut att = vec![0.0f32; b * nh * t * t];
    let mut scores = vec![0.0f64; t];
    for bi in 0..b {
        for h in 0..nh {
            for ti in 0..t {
                let q = &qkv[at(bi, ti, 0, h)..][..hs];
                let mut max = f64::NEG_INFINITY;
                for (tj, s) in scores.iter_mut().enumerate().take(ti + 1) {
                    let k = &qkv[at(bi, tj, 1, h)..][..hs];
                    *s = q
                        .iter()
                        .zip(k)
                        .map(|(x, y)| *x as f64 * *y as f64)
                        .sum::<f64>()
                        * scale;
                    max = max.max(*s);
                }
                let mut sum = 0.0f64;
                for s in scores.iter_mut().take(ti + 1) {
                    *s = (*s - max).exp();
                    sum += *s;
                }
                let row = &mut att[((bi * nh + h) * t + ti) * t..][..t];
                for tj in 0..=ti {
                    row[tj] = (scores[tj] / sum) as f32;
                }
                for (tj, s) in scores.iter_mut().enumerate().take(ti + 1) {
                    *s = *s / sum * attn_keep(dropout, t, nh, bi, h, ti, tj);
                }
                let o = &mut out[(bi * t + ti) * c + h * hs..][..hs];
                for (d, o) in o.iter_mut().enumerate() {
                    let mut acc = 0.0f64;
                    for tj in 0..=ti {
                        acc += scores[tj] * qkv[at(bi, tj, 2, h) + d] as f64;
                    }
                    *o = acc as f32;
                }
            }
        }
    }
    (out, att)
}

/// Gradient of [`attention_forward`] with respect to `qkv` (`[b, t, 3c]`), given
/// `dout` `[b, t, c]`, the forward's probabilities `att` and its `dropout` (the mask
/// `m`, scale included, is recomputed). Per row, with `dp = m * (dout·v)` the
/// softmax backward is `ds = p * (dp - sum(p * dp))`; then `dq = scale * ds·k`,
/// `dk = scale * dsᵀ·q`, `dv = (p * m)ᵀ·dout`.
#[allow(clippy::too_many_arguments)]
pub fn attention_backward(
    dout: &[f32],
    qkv: &[f32],
    att: &[f32],
    b: usize,
    t: usize,
    c: usize,
    nh: usize,
    dropout: Option<AttnDropout>,
) -> Vec<f32> {
    assert_eq!(dout.len(), b * t * c);
    assert_eq!(qkv.len(), b * t * 3 * c);
    assert_eq!(att.len(), b * nh * t * t);
    let hs = c / nh;
    let scale = 1.0 / (hs as f64).sqrt();
    let at =
        |bi: usize, ti: usize, part: usize, h: usize| (bi * t + ti) * 3 * c + part * c + h * hs;
    // Accumulate in f64, round once at the end.
    let mut grad = vec![0.0f64; b * t * 3 * c];
    let mut dp = vec![0.0f64; t];
    for bi in 0..b {
        for h in 0..nh {
            for ti in 0..t {
                let p = &att[((bi * nh + h) * t + ti) * t..][..t];
                let dq_i = &dout[(bi * t + ti) * c + h * hs..][..hs];
                // dp[j] = dout_i · v_j, and the row's sum(p * dp).
                let mut pdp = 0.0f64;
                for tj in 0..=ti {
                    let v = &qkv[at(bi, tj, 2, h)..][..hs];
                    let keep = attn_keep(dropout, t, nh, bi, h, ti, tj);
                    dp[tj] = keep
                        * dq_i
                            .iter()
                            .zip(v)
                            .map(|(x, y)| *x as f64 * *y as f64)
                            .sum::<f64>();
                    pdp += p[tj] as f64 * dp[tj];
                }
                for tj in 0..=ti {
                    let pj = p[tj] as f64;
                    let ds = pj * (dp[tj] - pdp) * scale;
                    let pj = pj * attn_keep(dropout, t, nh, bi, h, ti, tj);
                    for d in 0..hs {
                        let q = qkv[at(bi, ti, 0, h) + d] as f64;
                        let k = qkv[at(bi, tj, 1, h) + d] as f64;
                        grad[at(bi, ti, 0, h) + d] += ds * k;
                        grad[at(bi, tj, 1, h) + d] += ds * q;
                        grad[at(bi, tj, 2, h) + d] += pj * dq_i[d] as f64;
                    }
                }
            }
        }
    }
    grad.into_iter().map(|g| g as f32).collect()
}

// ---- dropout ----

/// murmur3's 32-bit finaliser (the same integer arithmetic as `hash.wgsl`).
fn mix(v: u32) -> u32 {
    let mut h = v;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

/// `(threshold, scale)` for drop probability `p`: an element is kept when 24 bits of
/// its hash are at least `threshold`; kept elements are scaled by `1 / (1 - p)`.
pub fn dropout_mask_params(p: f32) -> (u32, f32) {
    let threshold = (p.clamp(0.0, 1.0) as f64 * (1u64 << 24) as f64).round() as u32;
    (threshold, 1.0 / (1.0 - p))
}

/// Inverted dropout: element `i` is kept when `mix(seed ^ mix(i)) >> 8 >= threshold`,
/// and scaled by `1 / (1 - p)`. The mask depends only on `(seed, i)`, so the backward
/// is the same function applied to the gradient.
pub fn dropout(x: &[f32], p: f32, seed: u32) -> Vec<f32> {
    let (threshold, scale) = dropout_mask_params(p);
    x.iter()
        .enumerate()
        .map(|(i, &v)| {
            if kept(seed, i as u32, threshold) {
                v * scale
            } else {
                0.0
            }
        })
        .collect()
}

/// The mask of one dropout site: drop probability `p` and the site's mask seed
/// ([`dropout_seed`]), as [`dropout`] takes them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DropoutMask {
    pub p: f32,
    pub seed: u32,
}

/// Whether element `i` survives dropout with mask seed `seed`: the one keep rule of
/// every dropout site, the GPU kernels' included.
fn kept(seed: u32, i: u32, threshold: u32) -> bool {
    (mix(seed ^ mix(i)) >> 8) >= threshold
}

/// Dropout on attention probabilities (nanoGPT's `attn_dropout`): drop probability
/// `p`, mask seed `seed` (`dropout_seed(run seed, step, 0x10000 + layer)`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttnDropout {
    pub p: f32,
    pub seed: u32,
}

/// The mask element of probability `[bi, h, i, j]` of `nh` heads over `t`
/// positions: `((bi * nh + h) * t + i) * t + j`, wrapping in u32 as the kernels and
/// the PyTorch fixtures compute it.
pub fn attn_dropout_index(t: usize, nh: usize, bi: usize, h: usize, i: usize, j: usize) -> u32 {
    let (t, nh) = (t as u32, nh as u32);
    let row = (bi as u32).wrapping_mul(nh).wrapping_add(h as u32);
    let row = row.wrapping_mul(t).wrapping_add(i as u32);
    row.wrapping_mul(t).wrapping_add(j as u32)
}

/// The factor probability `[bi, h, i, j]` is multiplied by: 0 if dropped, else
/// `1 / (1 - p)`; 1 without dropout.
fn attn_keep(
    dropout: Option<AttnDropout>,
    t: usize,
    nh: usize,
    bi: usize,
    h: usize,
    i: usize,
    j: usize,
) -> f64 {
    let Some(d) = dropout else { return 1.0 };
    let (threshold, scale) = dropout_mask_params(d.p);
    let idx = attn_dropout_index(t, nh, bi, h, i, j);
    if kept(d.seed, idx, threshold) {
        scale as f64
    } else {
        0.0
    }
}

/// A mask seed for dropout site `site` at training step `step` of a run seeded `seed`.
pub fn dropout_seed(seed: u64, step: u32, site: u32) -> u32 {
    mix(mix(seed as u32 ^ mix((seed >> 32) as u32)) ^ mix(step) ^ site.wrapping_mul(0x9e37_79b9))
}

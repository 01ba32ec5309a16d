//! The CPU reference of every op: plain Rust written for clarity, the specification
//! the GPU kernels must meet. Sums accumulate in f64 where order matters.
//!
//! Shapes follow llm.c: `b` batch, `t` time (context), `c` channels, `v` vocab,
//! `nh` heads; tensors are row-major `Vec<f32>`.

/// `a + b`, elementwise.
pub fn residual_forward(a: &[f32], b: &[f32]) -> Vec<f32> {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| x + y).collect()
}

// ---- matmul / attention (kernels-b) ----

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

/// Causal multi-head self-attention as in GPT-2 (llm.c's layout). `qkv` is
/// `[b, t, 3c]`: per position the queries, keys and values, each `c = nh * hs`
/// channels with head `h` at channels `h*hs..(h+1)*hs`. Scores are
/// `q·k / sqrt(hs)`, masked to keys at or before the query, softmaxed per row.
/// Returns `out` `[b, t, c]` and the probabilities `att` `[b, nh, t, t]` (zero above
/// the diagonal), which [`attention_backward`] takes.
pub fn attention_forward(
    qkv: &[f32],
    b: usize,
    t: usize,
    c: usize,
    nh: usize,
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
                let o = &mut out[(bi * t + ti) * c + h * hs..][..hs];
                for (d, o) in o.iter_mut().enumerate() {
                    let mut acc = 0.0f64;
                    for tj in 0..=ti {
                        acc += scores[tj] / sum * qkv[at(bi, tj, 2, h) + d] as f64;
                    }
                    *o = acc as f32;
                }
            }
        }
    }
    (out, att)
}

/// Gradient of [`attention_forward`] with respect to `qkv` (`[b, t, 3c]`), given
/// `dout` `[b, t, c]` and the forward's probabilities `att`. Per row, with
/// `dp = dout·v` the softmax backward is `ds = p * (dp - sum(p * dp))`; then
/// `dq = scale * ds·k`, `dk = scale * dsᵀ·q`, `dv = pᵀ·dout`.
pub fn attention_backward(
    dout: &[f32],
    qkv: &[f32],
    att: &[f32],
    b: usize,
    t: usize,
    c: usize,
    nh: usize,
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
                    dp[tj] = dq_i.iter().zip(v).map(|(x, y)| *x as f64 * *y as f64).sum();
                    pdp += p[tj] as f64 * dp[tj];
                }
                for tj in 0..=ti {
                    let pj = p[tj] as f64;
                    let ds = pj * (dp[tj] - pdp) * scale;
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

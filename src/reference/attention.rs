//! Causal multi-head self-attention as in GPT-2, with dropout on the
//! probabilities.

use super::dropout::{attn_keep, AttnDropout};

/// `b` sequences of `t` positions, `c` channels in `heads` heads (head size `c /
/// heads`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionShape {
    pub b: usize,
    pub t: usize,
    pub c: usize,
    pub heads: usize,
}

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
    shape: AttentionShape,
    dropout: Option<AttnDropout>,
) -> (Vec<f32>, Vec<f32>) {
    let AttentionShape { b, t, c, heads: nh } = shape;
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
pub fn attention_backward(
    dout: &[f32],
    qkv: &[f32],
    att: &[f32],
    shape: AttentionShape,
    dropout: Option<AttnDropout>,
) -> Vec<f32> {
    let AttentionShape { b, t, c, heads: nh } = shape;
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

//! LayerNorm over the last dimension, and its backward fused with the residual
//! stream's gradient and a dropout mask.

use super::dropout::{dropped, DropoutMask};
use super::residual::residual_forward;
use super::to_f32;

/// LayerNorm's epsilon (PyTorch's default).
pub const LAYERNORM_EPS: f64 = 1e-5;

/// Rows of `c` channels, normalised each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerNormShape {
    pub rows: usize,
    pub c: usize,
}

/// LayerNorm over the last dimension of `rows x c`, with the biased variance (as
/// PyTorch): returns `out`, and per row the `mean` and `rstd = 1/sqrt(var + eps)`
/// that the backward pass needs.
pub fn layernorm_forward(
    inp: &[f32],
    weight: &[f32],
    bias: &[f32],
    shape: LayerNormShape,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let LayerNormShape { rows, c } = shape;
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

/// Gradients of [`layernorm_forward`] at `inp` with the forward's `(mean, rstd)`:
/// `dinp` (`rows x c`), and `dweight`, `dbias` (`c`, summed over rows). With `n =
/// (x - mean) * rstd` and `g = weight * dout`: `dinp = rstd * (g - mean(g) - n *
/// mean(g * n))`.
pub fn layernorm_backward(
    dout: &[f32],
    inp: &[f32],
    weight: &[f32],
    (mean, rstd): (&[f32], &[f32]),
    shape: LayerNormShape,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let LayerNormShape { rows, c } = shape;
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

/// [`layernorm_backward`] of a layernorm whose input was also the residual stream:
/// `dinp = resid + ` the layernorm's input gradient ([`residual_forward`]), and with
/// `mask` that sum through the dropout mask as well. Returns (dinp, masked, dweight,
/// dbias).
pub fn layernorm_backward_residual(
    dout: &[f32],
    inp: &[f32],
    weight: &[f32],
    stats: (&[f32], &[f32]),
    shape: LayerNormShape,
    resid: Option<&[f32]>,
    mask: Option<DropoutMask>,
) -> (Vec<f32>, Option<Vec<f32>>, Vec<f32>, Vec<f32>) {
    let (dln, dweight, dbias) = layernorm_backward(dout, inp, weight, stats, shape);
    let dinp = match resid {
        Some(resid) => residual_forward(resid, &dln),
        None => dln,
    };
    let masked = mask.map(|_| dropped(&dinp, mask));
    (dinp, masked, dweight, dbias)
}

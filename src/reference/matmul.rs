//! The matrix products of a `Linear` layer, and the fused ops built on them: GELU
//! on the input operand, and a residual branch's end.

use super::dropout::{dropped, DropoutMask};
use super::gelu::{gelu_backward, gelu_forward};
use super::residual::residual_forward;

/// A `Linear` layer of `rows` rows, `k` inputs and `n` outputs (PyTorch's layout:
/// `inp` `[rows, k]`, `weight` `[n, k]`, `bias` `[n]`, `out` `[rows, n]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulShape {
    pub rows: usize,
    pub k: usize,
    pub n: usize,
}

/// `out[r, j] = sum_i inp[r, i] * weight[j, i] + bias[j]`: a PyTorch `Linear`.
pub fn matmul_forward(
    inp: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    shape: MatmulShape,
) -> Vec<f32> {
    let MatmulShape { rows, k, n } = shape;
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
    shape: MatmulShape,
    with_bias: bool,
) -> (Vec<f32>, Vec<f32>, Option<Vec<f32>>) {
    let MatmulShape { rows, k, n } = shape;
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
    shape: MatmulShape,
    gelu_inp: bool,
) -> Vec<f32> {
    if !gelu_inp {
        return matmul_forward(inp, weight, bias, shape);
    }
    matmul_forward(&gelu_forward(inp), weight, bias, shape)
}

/// Gradients of [`matmul_forward_act`]: [`matmul_backward`] at `act(inp)`, and with
/// `gelu_inp` the input gradient taken through the GELU ([`gelu_backward`]).
pub fn matmul_backward_act(
    dout: &[f32],
    inp: &[f32],
    weight: &[f32],
    shape: MatmulShape,
    with_bias: bool,
    gelu_inp: bool,
) -> (Vec<f32>, Vec<f32>, Option<Vec<f32>>) {
    if !gelu_inp {
        return matmul_backward(dout, inp, weight, shape, with_bias);
    }
    let (dact, dweight, dbias) =
        matmul_backward(dout, &gelu_forward(inp), weight, shape, with_bias);
    (gelu_backward(inp, &dact), dweight, dbias)
}

/// `resid + dropout(matmul_forward_act(...))`: the end of a residual branch, its
/// last `Linear` (`weight`, `bias`) with the branch's dropout (`dropout_mask`, if
/// any) and the residual add ([`residual_forward`]).
pub fn residual_branch_forward(
    resid: &[f32],
    inp: &[f32],
    (weight, bias): (&[f32], &[f32]),
    shape: MatmulShape,
    gelu_inp: bool,
    dropout_mask: Option<DropoutMask>,
) -> Vec<f32> {
    let branch = matmul_forward_act(inp, weight, Some(bias), shape, gelu_inp);
    residual_forward(resid, &dropped(&branch, dropout_mask))
}

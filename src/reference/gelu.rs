//! GELU, tanh approximation.

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

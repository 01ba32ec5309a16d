//! The optimizer: the mean of the losses, AdamW, the global gradient norm and
//! clipping.

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
        // Past i32::MAX a cast would turn negative (and beta^-n past 1: NaN
        // updates); beta^n has long underflowed to 0 there.
        let step = i32::try_from(self.step.max(1)).unwrap_or(i32::MAX);
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

//! Helpers shared by the op tests: the common ones, tolerances with a floor,
//! random data and shapes, and (natively) finite differences.
#![allow(dead_code)]

pub use crate::common::{
    assert_close, parity_context as context, poisoned, read, reduction_contexts,
};
use tidepool::rng::Rng;

/// [`assert_close`] with the scale at least `floor`: for values whose absolute
/// error is what matters (a loss near 0 has ~1e-7 absolute error from log(sum)).
/// The appended pair adds no error and only raises the scale.
#[track_caller]
pub fn assert_close_floor(what: &str, got: &[f32], want: &[f32], tol: f32, floor: f32, seed: u64) {
    let got: Vec<f32> = got.iter().copied().chain([floor]).collect();
    let want: Vec<f32> = want.iter().copied().chain([floor]).collect();
    assert_close(what, &got, &want, tol, seed);
}

pub fn normals(rng: &mut Rng, n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|_| rng.normal() * scale).collect()
}

pub fn tokens(rng: &mut Rng, n: usize, v: usize) -> Vec<u32> {
    (0..n).map(|_| rng.below(v) as u32).collect()
}

/// A random number in `1..=hi` that is not a power of two (`hi >= 3`).
pub fn odd(rng: &mut Rng, hi: usize) -> usize {
    loop {
        let x = 1 + rng.below(hi);
        if !x.is_power_of_two() {
            break x;
        }
    }
}

/// `sum(a * b)` in f64: the loss `sum(out * w)` whose gradient is a backward at
/// `dout = w`.
pub fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum()
}

/// Central differences of `loss` at every element of `x`, against `analytic`, with
/// one Richardson step (steps h and h/2 combined, error O(h^4)) so that h can stay
/// large next to the f32 rounding of the outputs. Each step is the f32-rounded
/// `x +- h`, so the denominator is the step actually taken. Passes when the largest
/// difference is within `tol` of the largest gradient.
#[track_caller]
pub fn check_grad(
    what: &str,
    seed: u64,
    x: &[f32],
    analytic: &[f32],
    (h, tol): (f32, f64),
    loss: impl Fn(&[f32]) -> f64,
) {
    check_grad_against(what, seed, x, analytic, (h, tol, 1e-6), loss);
}

/// [`check_grad`] measuring the error against the largest gradient or `floor`,
/// whichever is larger: a gradient whose terms cancel far below their own size (a
/// layernorm's input gradient at c = 3) is measured against the size of the terms,
/// since the finite differences carry the f32 forward's rounding at that size.
#[track_caller]
pub fn check_grad_against(
    what: &str,
    seed: u64,
    x: &[f32],
    analytic: &[f32],
    (h, tol, floor): (f32, f64, f64),
    loss: impl Fn(&[f32]) -> f64,
) {
    assert_eq!(x.len(), analytic.len(), "{what}: length");
    let mut probe = x.to_vec();
    let scale = analytic
        .iter()
        .fold(floor.max(1e-6), |m, &g| m.max((g as f64).abs()));
    let mut worst = (0.0f64, 0usize, 0.0f64);
    for i in 0..x.len() {
        let mut central = |h: f32| {
            let (up, down) = (x[i] + h, x[i] - h);
            probe[i] = up;
            let l_up = loss(&probe);
            probe[i] = down;
            let l_down = loss(&probe);
            probe[i] = x[i];
            (l_up - l_down) / (up as f64 - down as f64)
        };
        let (coarse, fine) = (central(h), central(h / 2.0));
        let fd = (4.0 * fine - coarse) / 3.0;
        let err = (fd - analytic[i] as f64).abs();
        if err > worst.0 {
            worst = (err, i, fd);
        }
    }
    let (err, i, fd) = worst;
    assert!(
        err / scale <= tol,
        "{what}: element {i}: finite difference {fd} vs analytic {} (error {:e} of max |grad| {scale:e}; seed {seed}, replay with TIDEPOOL_SEED={seed})",
        analytic[i],
        err / scale
    );
}

/// Checks `grad` against `(loss(x + h e_i) - loss(x - h e_i)) / (2h)` for every i,
/// dividing by the step the f32 inputs really took. The worst difference over the
/// largest |grad| must be at most `tol`, beyond the rounding of the f32 forward: an
/// output much larger than the gradient (a 1x1x1 product whose bias dominates) moves
/// the loss by a few ulps of its own size, over a step of 2h.
#[track_caller]
pub fn assert_fd(
    what: &str,
    seed: u64,
    x: &[f32],
    grad: &[f32],
    (h, tol): (f32, f64),
    loss: impl Fn(&[f32]) -> f64,
) {
    assert_eq!(x.len(), grad.len(), "{what}: gradient length");
    let scale = grad.iter().fold(1e-9f64, |m, g| m.max(g.abs() as f64));
    let mut x_h = x.to_vec();
    let mut worst = (0.0f64, 0usize, 0.0f64);
    let mut noise = 0.0f64;
    for i in 0..x.len() {
        let (up, down) = (x[i] + h, x[i] - h);
        x_h[i] = up;
        let l_up = loss(&x_h);
        x_h[i] = down;
        let l_down = loss(&x_h);
        x_h[i] = x[i];
        let fd = (l_up - l_down) / (up as f64 - down as f64);
        let rounding = 4.0 * f32::EPSILON as f64 * l_up.abs().max(l_down.abs());
        noise = noise.max(rounding / (up as f64 - down as f64));
        let err = (fd - grad[i] as f64).abs();
        if err > worst.0 {
            worst = (err, i, fd);
        }
    }
    let (err, i, fd) = worst;
    assert!(
        (err - noise).max(0.0) / scale <= tol,
        "{what}: element {i}: finite difference {fd} vs backward {} ({:e} of max |grad| {scale:e}, rounding allowance {noise:e}; seed {seed}, replay with TIDEPOOL_SEED={seed})",
        grad[i],
        err / scale
    );
}

/// A `Linear` layer's operands from whole buffers.
pub fn linear<'a>(
    inp: &'a tidepool::PooledBuffer,
    weight: &'a tidepool::PooledBuffer,
    bias: Option<&'a tidepool::PooledBuffer>,
) -> tidepool::kernels::Linear<'a> {
    tidepool::kernels::Linear {
        inp,
        weight: weight.into(),
        bias: bias.map(Into::into),
        weight_f16: None,
    }
}

/// The launch of `variant` (with `fusion`).
pub fn by<'a>(
    variant: tidepool::kernels::MatmulVariant,
    fusion: tidepool::kernels::Fusion<'a>,
) -> tidepool::kernels::Matmul<'a> {
    tidepool::kernels::Matmul {
        variant: Some(variant),
        fusion,
    }
}

/// GELU on the layer's input, nothing else fused.
pub fn gelu_inp() -> tidepool::kernels::Fusion<'static> {
    tidepool::kernels::Fusion {
        gelu_inp: true,
        ..Default::default()
    }
}

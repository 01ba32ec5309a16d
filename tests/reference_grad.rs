//! The backward references against central finite differences of the forward
//! references, on tiny shapes. Each loss is `sum(out * w)` for fixed random `w`, so
//! the analytic gradient is the backward with `dout = w`.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::fresh_seed;
use tidepool::reference as cpu;
use tidepool::rng::Rng;

/// Central differences of `loss` at every element of `x`, against `analytic`, with
/// one Richardson step (steps h and h/2 combined, error O(h^4)) so that h can stay
/// large next to the f32 rounding of the outputs. Each step is the f32-rounded
/// `x +- h`, so the denominator is the step actually taken. Passes when the largest
/// difference is within `tol` of the largest gradient.
#[track_caller]
fn check_grad(
    what: &str,
    seed: u64,
    x: &[f32],
    analytic: &[f32],
    h: f32,
    tol: f64,
    loss: impl Fn(&[f32]) -> f64,
) {
    check_grad_against(what, seed, x, analytic, (h, tol, 1e-6), loss);
}

/// [`check_grad`] measuring the error against the largest gradient or `floor`,
/// whichever is larger: a gradient whose terms cancel far below their own size (a
/// layernorm's input gradient at c = 3) is measured against the size of the terms,
/// since the finite differences carry the f32 forward's rounding at that size.
#[track_caller]
fn check_grad_against(
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

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum()
}

fn normals(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.normal()).collect()
}

#[test]
fn encoder_backward_matches_finite_differences() {
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    let (b, t, c, v) = (2, 5, 3, 4);
    // Token 1 repeats, token 3 never appears (its gradient must be 0).
    let tokens = vec![1, 0, 1, 2, 1, 1, 1, 0, 2, 1];
    let wte = normals(&mut rng, v * c);
    let wpe = normals(&mut rng, t * c);
    let w = normals(&mut rng, b * t * c);
    let (dwte, dwpe) = cpu::encoder_backward(&w, &tokens, b, t, c, v);
    assert!(dwte[3 * c..].iter().all(|&g| g == 0.0));
    // Linear, so no truncation error: a large step (h = 1) shrinks the outputs' f32
    // rounding (divided by h) to well under the tolerance.
    check_grad("dwte", seed, &wte, &dwte, 1.0, 1e-5, |x| {
        dot(&cpu::encoder_forward(&tokens, x, &wpe, b, t, c), &w)
    });
    check_grad("dwpe", seed, &wpe, &dwpe, 1.0, 1e-5, |x| {
        dot(&cpu::encoder_forward(&tokens, &wte, x, b, t, c), &w)
    });
}

#[test]
fn layernorm_backward_matches_finite_differences() {
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for (rows, c) in [(1, 3), (3, 7), (2, 16)] {
        let inp: Vec<f32> = normals(&mut rng, rows * c)
            .iter()
            .map(|x| x + 0.7)
            .collect();
        let weight = rng.vec(c, 0.5, 1.5);
        let bias = rng.vec(c, -0.5, 0.5);
        let w = normals(&mut rng, rows * c);
        let (_, mean, rstd) = cpu::layernorm_forward(&inp, &weight, &bias, rows, c);
        let (dinp, dweight, dbias) =
            cpu::layernorm_backward(&w, &inp, &weight, &mean, &rstd, rows, c);
        let what = format!("rows {rows} c {c}");
        // Smooth, with f32 outputs: 1e-3 of the largest gradient leaves room for the
        // outputs' rounding (about 6e-8 / h relative). dinp's terms are rstd * weight
        // * dout each; they can cancel to far below that (seed 1796095165179297889:
        // 4.9e-5 at rows 1, c 3), so its error is measured against them.
        let terms = (0..rows * c)
            .map(|i| (rstd[i / c] * weight[i % c] * w[i]).abs() as f64)
            .fold(0.0, f64::max);
        check_grad_against(
            &format!("dinp, {what}"),
            seed,
            &inp,
            &dinp,
            (1e-2, 1e-3, terms),
            |x| dot(&cpu::layernorm_forward(x, &weight, &bias, rows, c).0, &w),
        );
        check_grad(
            &format!("dweight, {what}"),
            seed,
            &weight,
            &dweight,
            1e-2,
            1e-3,
            |x| dot(&cpu::layernorm_forward(&inp, x, &bias, rows, c).0, &w),
        );
        check_grad(
            &format!("dbias, {what}"),
            seed,
            &bias,
            &dbias,
            1e-2,
            1e-3,
            |x| dot(&cpu::layernorm_forward(&inp, &weight, x, rows, c).0, &w),
        );
    }
}

#[test]
fn gelu_backward_matches_finite_differences() {
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    let mut x = rng.vec(40, -5.0, 5.0);
    x.extend([0.0, 1e-3, -1e-3, 12.0, -12.0]);
    let w = normals(&mut rng, x.len());
    let dx = cpu::gelu_backward(&x, &w);
    check_grad("gelu", seed, &x, &dx, 1e-2, 1e-3, |x| {
        dot(&cpu::gelu_forward(x), &w)
    });
}

#[test]
fn crossentropy_backward_matches_finite_differences() {
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for (rows, v) in [(1, 2), (3, 5), (4, 11)] {
        let logits = rng.vec(rows * v, -3.0, 3.0);
        let targets: Vec<u32> = (0..rows).map(|_| rng.below(v) as u32).collect();
        // The mean loss: the backward's scale is 1/rows.
        let scale = 1.0 / rows as f32;
        let (_, probs) = cpu::crossentropy_forward(&logits, &targets, rows, v);
        let dlogits = cpu::crossentropy_backward(&probs, &targets, rows, v, scale);
        check_grad(
            &format!("dlogits rows {rows} v {v}"),
            seed,
            &logits,
            &dlogits,
            1e-2,
            1e-3,
            |x| {
                let (losses, _) = cpu::crossentropy_forward(x, &targets, rows, v);
                losses.iter().map(|&l| l as f64).sum::<f64>() * scale as f64
            },
        );
        // Each row of probs sums to 1, so each row of dlogits sums to 0.
        for r in 0..rows {
            let s: f32 = dlogits[r * v..(r + 1) * v].iter().sum();
            assert!(s.abs() < 1e-6, "row {r} of dlogits sums to {s}");
        }
    }
}

#[test]
fn crossentropy_loss_stays_finite_for_unlikely_targets() {
    // The target's probability underflows f32 (e^-200), yet the loss is exact.
    let logits = [200.0f32, 0.0, -5.0];
    let (losses, probs) = cpu::crossentropy_forward(&logits, &[1], 1, 3);
    assert_eq!(probs[1], 0.0);
    assert!((losses[0] - 200.0).abs() < 1e-4, "loss {}", losses[0]);
}

#[test]
fn adamw_first_step_and_clip_scale() {
    // Step 1 from zero moments: m_hat = g, v_hat = g^2, so the step is
    // lr * (sign(g) + weight_decay * param) up to eps.
    let hp = cpu::AdamW {
        lr: 0.1,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.5,
        step: 1,
    };
    let mut param = vec![1.0f32, -2.0, 0.5];
    let grad = [0.3f32, -4.0, 0.0];
    let (mut m, mut v) = (vec![0.0; 3], vec![0.0; 3]);
    cpu::adamw_update(&mut param, &grad, &mut m, &mut v, &hp, 0.5);
    let want = [
        1.0 - 0.1 * (1.0 + 0.5),
        -2.0 - 0.1 * (-1.0 - 1.0),
        0.5 - 0.1 * 0.25,
    ];
    for (p, w) in param.iter().zip(want) {
        assert!((p - w).abs() < 1e-6, "param {p} want {w}");
    }
    assert!(
        (m[1] - 0.1 * -2.0).abs() < 1e-6,
        "m uses the scaled gradient"
    );
    assert!(
        (v[1] - 0.001 * 4.0).abs() < 1e-7,
        "v uses the scaled gradient"
    );

    assert_eq!(cpu::clip_scale(16.0, 0.0), (4.0, 1.0));
    assert_eq!(cpu::clip_scale(16.0, 5.0), (4.0, 1.0));
    let (norm, scale) = cpu::clip_scale(16.0, 1.0);
    assert_eq!(norm, 4.0);
    assert!((scale - 0.25).abs() < 1e-6);
    assert_eq!(cpu::grad_sumsq(&[3.0, -4.0]), 25.0);
}

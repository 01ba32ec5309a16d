//! `matmul_backward` and `attention_backward` references against central finite
//! differences of their forward references, on tiny shapes. The loss is
//! `sum(out * w)` for fixed random `w`, whose gradient is the backward at `dout = w`.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::fresh_seed;
use tidepool::reference::{self as cpu, AttnDropout};
use tidepool::rng::Rng;

/// Checks `grad` against `(loss(x + h e_i) - loss(x - h e_i)) / (2h)` for every i,
/// dividing by the step the f32 inputs really took. The worst difference over the
/// largest |grad| must be at most `tol`, beyond the rounding of the f32 forward: an
/// output much larger than the gradient (a 1x1x1 product whose bias dominates) moves
/// the loss by a few ulps of its own size, over a step of 2h.
#[track_caller]
fn assert_fd(
    what: &str,
    seed: u64,
    x: &[f32],
    grad: &[f32],
    h: f32,
    tol: f64,
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

fn weighted_sum(out: &[f32], w: &[f32]) -> f64 {
    out.iter().zip(w).map(|(&o, &w)| o as f64 * w as f64).sum()
}

fn normals(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.normal()).collect()
}

#[test]
fn matmul_backward_matches_finite_differences() {
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for (rows, k, n) in [(1, 1, 1), (3, 4, 5), (6, 3, 2)] {
        let inp = normals(&mut rng, rows * k);
        let weight = normals(&mut rng, n * k);
        let bias = normals(&mut rng, n);
        let w = normals(&mut rng, rows * n);
        let (dinp, dweight, dbias) = cpu::matmul_backward(&w, &inp, &weight, rows, k, n, true);
        let dbias = dbias.expect("with_bias gives dbias");
        let (_, _, none) = cpu::matmul_backward(&w, &inp, &weight, rows, k, n, false);
        assert!(none.is_none());
        // Linear in each argument: the differences are exact but for f32 rounding of
        // the outputs (about 6e-8 of each, over a step of 1e-2).
        let tol = 1e-4;
        let shape = format!("{rows}x{k}x{n}");
        assert_fd(
            &format!("dinp {shape}"),
            seed,
            &inp,
            &dinp,
            1e-2,
            tol,
            |x| {
                weighted_sum(
                    &cpu::matmul_forward(x, &weight, Some(&bias), rows, k, n),
                    &w,
                )
            },
        );
        assert_fd(
            &format!("dweight {shape}"),
            seed,
            &weight,
            &dweight,
            1e-2,
            tol,
            |x| weighted_sum(&cpu::matmul_forward(&inp, x, Some(&bias), rows, k, n), &w),
        );
        assert_fd(
            &format!("dbias {shape}"),
            seed,
            &bias,
            &dbias,
            1e-2,
            tol,
            |x| weighted_sum(&cpu::matmul_forward(&inp, &weight, Some(x), rows, k, n), &w),
        );
    }
}

#[test]
fn attention_probabilities_are_causal_rows_summing_to_one() {
    let mut rng = Rng::new(fresh_seed());
    let (b, t, c, nh) = (2, 4, 6, 3);
    let qkv = normals(&mut rng, b * t * 3 * c);
    let (_, att) = cpu::attention_forward(&qkv, b, t, c, nh, None);
    for row in att.chunks(t).enumerate() {
        let (r, p) = row;
        let ti = r % t;
        assert!(
            p[ti + 1..].iter().all(|&x| x == 0.0),
            "row {r} sees the future"
        );
        let sum: f64 = p.iter().map(|&x| x as f64).sum();
        assert!((sum - 1.0).abs() < 1e-6, "row {r} sums to {sum}");
    }
}

/// The contract of attention dropout: probability `[bi, h, i, j]` is element
/// `((bi * nh + h) * t + i) * t + j` of a plain dropout mask of the same seed, so the
/// output is `(att * dropout(ones)) @ v`, computed here from the undropped `att`.
#[test]
fn attention_dropout_masks_probabilities_by_their_flat_index() {
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    let (b, t, c, nh) = (2, 9, 6, 3);
    let hs = c / nh;
    let qkv = normals(&mut rng, b * t * 3 * c);
    let d = AttnDropout {
        p: 0.4,
        seed: rng.next_u64() as u32,
    };
    let (out, att) = cpu::attention_forward(&qkv, b, t, c, nh, Some(d));
    let (plain, att_plain) = cpu::attention_forward(&qkv, b, t, c, nh, None);
    assert_eq!(att, att_plain, "att is the undropped probabilities");
    let mask = cpu::dropout(&vec![1.0; b * nh * t * t], d.p, d.seed);
    let dropped = mask.iter().filter(|&&m| m == 0.0).count() as f64 / mask.len() as f64;
    assert!(
        (0.25..0.55).contains(&dropped),
        "{dropped} of the mask dropped"
    );
    let mut worst = 0.0f64;
    for bi in 0..b {
        for h in 0..nh {
            for i in 0..t {
                assert_eq!(
                    cpu::attn_dropout_index(t, nh, bi, h, i, 3) as usize,
                    ((bi * nh + h) * t + i) * t + 3
                );
                for e in 0..hs {
                    let want: f64 = (0..=i)
                        .map(|j| {
                            let k = ((bi * nh + h) * t + i) * t + j;
                            att[k] as f64
                                * mask[k] as f64
                                * qkv[(bi * t + j) * 3 * c + 2 * c + h * hs + e] as f64
                        })
                        .sum();
                    let got = out[(bi * t + i) * c + h * hs + e] as f64;
                    worst = worst.max((got - want).abs());
                }
            }
        }
    }
    assert!(
        worst < 1e-5,
        "dropped attention off by {worst} (seed {seed})"
    );
    assert_ne!(out, plain, "dropout changed nothing (seed {seed})");
}

#[test]
fn attention_backward_matches_finite_differences() {
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    // Head sizes 1, 2 and 4; t = 1 (softmax of one key: only v gets a gradient).
    // Without and with dropout on the probabilities (fixed masks: p and the seed).
    let dropouts = [
        None,
        Some(AttnDropout {
            p: 0.3,
            seed: rng.next_u64() as u32,
        }),
    ];
    let shapes = [
        (1, 1, 2, 1),
        (1, 3, 2, 2),
        (2, 4, 4, 2),
        (1, 5, 4, 1),
        (2, 7, 6, 3),
    ];
    for (dropout, (b, t, c, nh)) in dropouts
        .iter()
        .flat_map(|&d| shapes.iter().map(move |&s| (d, s)))
    {
        let qkv = normals(&mut rng, b * t * 3 * c);
        let w = normals(&mut rng, b * t * c);
        let (_, att) = cpu::attention_forward(&qkv, b, t, c, nh, dropout);
        let dqkv = cpu::attention_backward(&w, &qkv, &att, b, t, c, nh, dropout);
        // Curved (softmax), so central differences are off by O(h^2) ~ 1e-6 of the
        // curvature; f32 rounding of outputs adds ~1e-5 at h = 1e-2.
        assert_fd(
            &format!("dqkv b {b} t {t} c {c} nh {nh} dropout {dropout:?}"),
            seed,
            &qkv,
            &dqkv,
            1e-2,
            1e-3,
            |x| weighted_sum(&cpu::attention_forward(x, b, t, c, nh, dropout).0, &w),
        );
    }
}

//! GELU in a pass of its own against the reference (the matmuls' fused GELU is
//! in `matmul_fused`), the reference's gradient against finite differences.

use crate::common::fresh_seed;
use crate::gpu_test;
use crate::support::*;
use tidepool::kernels;
use tidepool::reference as cpu;
use tidepool::rng::Rng;

const SIZES: &[usize] = &[1, 7, 130, 1000, 70_001];

gpu_test!(gelu_matches_reference, gelu_body());
/// The pass the CPU-adapter matmuls read GELU from. Tolerance 1e-5: elementwise,
/// f32 exp (a few ulp, worse on some drivers) on inputs of magnitude up to ~12.
/// Its gradient and the other matmuls' GELU on load: `fused_matmul` below.
async fn gelu_body() {
    let ctx = context().await;
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for &n in SIZES {
        let x = normals(&mut rng, n, 3.0);
        let gx = ctx.upload(&x);
        let out = poisoned(&ctx, &[n], || kernels::gelu_forward(&ctx, &gx, n));
        let got = read(&ctx, &out, n).await;
        assert_close(
            &format!("gelu forward n {n}"),
            &got,
            &cpu::gelu_forward(&x),
            1e-5,
            seed,
        );
    }
}

#[cfg(not(target_arch = "wasm32"))]
#[test]
fn gelu_backward_reference_matches_finite_differences() {
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    let mut x = rng.vec(40, -5.0, 5.0);
    x.extend([0.0, 1e-3, -1e-3, 12.0, -12.0]);
    let w = normals(&mut rng, x.len(), 1.0);
    let dx = cpu::gelu_backward(&x, &w);
    check_grad("gelu", seed, &x, &dx, (1e-2, 1e-3), |x| {
        dot(&cpu::gelu_forward(x), &w)
    });
}

//! `--precision f16`: the f16 matmul cores (tensor cores and the fallback) against a
//! CPU reference that rounds the operands to f16 itself, on outputs drawn from
//! NaN-poisoned pool buffers, natively and in headless Chromium; the refusal where
//! the adapter has no shader-f16; and, natively, the tensor-core shaders compiled to
//! SPIR-V by naga (no device here runs them).
//!
//! On a GPU with cooperative matrices, `TIDEPOOL_F16_CORE=coop` (or `coop2`, `coop3`) in
//! the test's environment makes its f16 context force that tensor-core core
//! (`ContextOptions::f16_core`): the test then fails unless that core runs.

mod common;

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

use common::fresh_seed;
use common::{context, max_rel_error, poisoned, read};
use half::f16;
use tidepool::config::Precision;
use tidepool::kernels::{F16Core, Fusion, Linear, Matmul, MatmulShape, MatmulVariant, GRAD_SCALE};
use tidepool::rng::Rng;
use tidepool::{ContextOptions, WgpuContext};

// ---- the reference ----
//
// Written from the definition, not from the kernels: every operand rounded to the
// nearest f16 (ties to even; `half`), the gradient operand of the backward products
// scaled by GRAD_SCALE before rounding and the sum unscaled after, products and sums
// in f64.

fn h(x: f32) -> f64 {
    f16::from_f32(x).to_f64()
}

fn hg(x: f32) -> f64 {
    f16::from_f32(x * GRAD_SCALE).to_f64() / GRAD_SCALE as f64
}

/// `out[r, j] = sum_i h(inp[r, i]) h(weight[j, i]) + bias[j]`.
fn forward_ref(
    inp: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    rows: usize,
    k: usize,
    n: usize,
) -> Vec<f32> {
    let mut out = vec![0.0; rows * n];
    for r in 0..rows {
        for j in 0..n {
            let dot: f64 = (0..k).map(|i| h(inp[r * k + i]) * h(w[j * k + i])).sum();
            out[r * n + j] = (dot + bias.map_or(0.0, |b| b[j] as f64)) as f32;
        }
    }
    out
}

/// `dinp[r, i] = sum_j hg(dout[r, j]) h(weight[j, i])`.
fn dinp_ref(dout: &[f32], w: &[f32], rows: usize, k: usize, n: usize) -> Vec<f32> {
    let mut out = vec![0.0; rows * k];
    for r in 0..rows {
        for i in 0..k {
            let dot: f64 = (0..n).map(|j| hg(dout[r * n + j]) * h(w[j * k + i])).sum();
            out[r * k + i] = dot as f32;
        }
    }
    out
}

/// `dweight[j, i] = sum_r hg(dout[r, j]) h(inp[r, i])`.
fn dweight_ref(dout: &[f32], inp: &[f32], rows: usize, k: usize, n: usize) -> Vec<f32> {
    let mut out = vec![0.0f64; n * k];
    for r in 0..rows {
        for j in 0..n {
            let g = hg(dout[r * n + j]);
            for i in 0..k {
                out[j * k + i] += g * h(inp[r * k + i]);
            }
        }
    }
    out.into_iter().map(|x| x as f32).collect()
}

/// The same products with no rounding at all, to show the kernels do round.
fn exact_ref(
    a: impl Fn(usize, usize) -> f32,
    b: impl Fn(usize, usize) -> f32,
    m: usize,
    k: usize,
    n: usize,
) -> Vec<f32> {
    let mut out = vec![0.0; m * n];
    for r in 0..m {
        for j in 0..n {
            out[r * n + j] = (0..k).map(|i| a(r, i) as f64 * b(i, j) as f64).sum::<f64>() as f32;
        }
    }
    out
}

// ---- tolerances ----
//
// max |got - want| over max |want| (`common::max_rel_error`). With the operands
// rounded alike on both sides, the products are exact (f16 x f16 fits f32's
// significand), so what is left is the f32 summation of k (or rows) terms: the f32
// matmul tests' bounds (1e-5 for k <= 1536, 2e-5 for the split sums over up to 4099
// rows), doubled because tensor cores are not bound to round each f32 addition to
// nearest inside one 16-term product (NVIDIA's truncate). Rounding the operands
// instead changes outputs by about 1e-4 of the largest here, and the test asserts
// the kernels differ from the unrounded products by more than the tolerance.
const FWD_TOL: f32 = 2e-5;
const DW_TOL: f32 = 4e-5;

#[track_caller]
fn check(what: &str, got: &[f32], want: &[f32], exact: &[f32], tol: f32, seed: u64) {
    let err = max_rel_error(got, want);
    assert!(
        err <= tol,
        "{what}: max relative error {err:e} > {tol:e} against the f16 reference (seed {seed})"
    );
    // Where rounding the operands matters clearly, the kernel must have rounded.
    if max_rel_error(want, exact) > 4.0 * tol {
        let off = max_rel_error(got, exact);
        assert!(
            off > tol,
            "{what}: within {off:e} of the unrounded products: the operands were not rounded to f16 (seed {seed})"
        );
    }
}

// ---- contexts ----

/// The tensor-core core the test's environment asks for: `TIDEPOOL_F16_CORE`
/// natively (a name of [`F16Core::ALL`]), none in the browser.
fn forced_core() -> Option<F16Core> {
    #[cfg(not(target_arch = "wasm32"))]
    if let Ok(value) = std::env::var("TIDEPOOL_F16_CORE") {
        let core = F16Core::parse(value.trim());
        let names: Vec<&str> = F16Core::ALL.iter().map(|c| c.name()).collect();
        assert!(
            core.is_some(),
            "TIDEPOOL_F16_CORE={value:?} is none of {}",
            names.join(", ")
        );
        return core;
    }
    None
}

/// An f16 context (forcing the core [`forced_core`] names), or `None` after
/// checking the refusal where the adapter has no shader-f16 (SwiftShader in
/// Chromium).
async fn f16_context() -> Option<WgpuContext> {
    f16_context_with(false).await
}

/// [`f16_context`], binding every buffer read_write where `read_write`.
async fn f16_context_with(read_write_bindings: bool) -> Option<WgpuContext> {
    let options = ContextOptions {
        precision: Precision::F16,
        f16_core: forced_core(),
        read_write_bindings,
        ..Default::default()
    };
    match WgpuContext::with_options(options).await {
        Ok(ctx) => {
            assert!(ctx.adapter_features().contains(wgpu::Features::SHADER_F16));
            assert_eq!(ctx.precision(), Precision::F16);
            Some(ctx)
        }
        Err(e) => {
            let plain = context().await;
            assert!(
                !plain
                    .adapter_features()
                    .contains(wgpu::Features::SHADER_F16),
                "refused although the adapter offers shader-f16: {e}"
            );
            assert_eq!(e.kind(), "config", "{e}");
            assert!(e.to_string().contains("shader-f16"), "{e}");
            None
        }
    }
}

/// The f16 variants `ctx` runs: the tensor-core ones only where it has them, and
/// then certainly when the context forces one.
fn variants(ctx: &WgpuContext) -> Vec<MatmulVariant> {
    if let Some(core) = ctx.f16_core() {
        if let Err(why) = MatmulVariant::of_core(core, false).runs_on(ctx) {
            panic!("the context forces the {} core, but {why}", core.name());
        }
    }
    MatmulVariant::F16_ALL
        .into_iter()
        .filter(|v| v.runs_on(ctx).is_ok())
        .collect()
}

/// (rows, k, n): none a multiple of the 128x128 tiles or the steps of 8 and 16,
/// reductions long enough to split (300 x 1536 -> 384), and a fresh random shape.
fn shapes(rng: &mut Rng) -> Vec<(usize, usize, usize)> {
    let odd = |rng: &mut Rng, hi: usize| loop {
        let x = 1 + rng.below(hi);
        if !x.is_power_of_two() {
            break x;
        }
    };
    let mut shapes = vec![(1, 1, 1), (7, 13, 5), (130, 67, 33), (129, 9, 257)];
    if cfg!(not(target_arch = "wasm32")) {
        shapes.push((300, 1536, 384));
    }
    shapes.push((odd(rng, 300), odd(rng, 600), odd(rng, 600)));
    // Whole 128x128 tiles and 8-deep steps in the forward, then in dinp: where the
    // tiled cores read their vec4 views (and an f16 weight copy given them).
    let tiles = 128 * (2 + rng.below(2));
    let deep = 8 * odd(rng, 40);
    shapes.extend([(tiles, deep, 128), (tiles, 128, deep)]);
    shapes
}

// ---- the tests ----

/// `w` rounded to f16 here (to nearest even), padded to whole vec4s and uploaded: the
/// f16 copy of a weight a `Linear` may give (`weight_f16`), made without the crate's
/// own conversion (`ParamArena::f16_weights`, checked against this in tests/ops).
fn upload_halves(ctx: &WgpuContext, w: &[f32]) -> tidepool::PooledBuffer {
    let mut bits: Vec<u16> = w.iter().map(|&x| f16::from_f32(x).to_bits()).collect();
    bits.resize(w.len().div_ceil(4) * 4, 0);
    ctx.upload(&bits)
}

gpu_test!(f16_forward_matches_reference, forward_body());
async fn forward_body() {
    let Some(ctx) = f16_context().await else {
        return;
    };
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for (rows, k, n) in shapes(&mut rng) {
        let inp = rng.vec(rows * k, -1.0, 1.0);
        let weight = rng.vec(n * k, -1.0, 1.0);
        let bias = rng.vec(n, -1.0, 1.0);
        let (g_inp, g_w, g_b) = (ctx.upload(&inp), ctx.upload(&weight), ctx.upload(&bias));
        let g_wh = upload_halves(&ctx, &weight);
        let exact_nb = exact_ref(|r, i| inp[r * k + i], |i, j| weight[j * k + i], rows, k, n);
        for with_bias in [false, true] {
            let b = with_bias.then_some(&bias[..]);
            let want = forward_ref(&inp, &weight, b, rows, k, n);
            let exact: Vec<f32> = (0..rows * n)
                .map(|x| exact_nb[x] + b.map_or(0.0, |b| b[x % n]))
                .collect();
            // Each variant, then the launcher's own choice under precision f16; each
            // reading the f32 weight, then given its f16 copy too.
            for variant in variants(&ctx).into_iter().map(Some).chain([None]) {
                for halves in [None, Some(&g_wh)] {
                    let out = poisoned(&ctx, &[rows * n], || {
                        let x = Linear {
                            inp: &g_inp,
                            weight: (&g_w).into(),
                            bias: with_bias.then(|| (&g_b).into()),
                            weight_f16: halves.map(Into::into),
                        };
                        let op = Matmul {
                            variant,
                            fusion: Fusion::default(),
                        };
                        op.forward(&ctx, x, MatmulShape { rows, k, n })
                    });
                    let got = read(&ctx, &out, rows * n).await;
                    let what = format!(
                        "forward {variant:?} {rows}x{k}x{n} bias {with_bias} f16 weight {}",
                        halves.is_some()
                    );
                    check(&what, &got, &want, &exact, FWD_TOL, seed);
                }
            }
        }
    }
}

// Where a dispatch binds every buffer read_write, a repeated binding gets a stand-in
// (gpu/recording.rs): the tensor-core cores' vec4 views of their operands then hold
// no operand, and the cores must see it and take their guarded loads. A shape with
// whole interior tiles, and one whose operands are under one vec4.
gpu_test!(f16_forward_with_read_write_bindings, read_write_body());
async fn read_write_body() {
    let Some(ctx) = f16_context_with(true).await else {
        return;
    };
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for (rows, k, n) in [(260, 264, 132), (1, 3, 1)] {
        let inp = rng.vec(rows * k, -1.0, 1.0);
        let weight = rng.vec(n * k, -1.0, 1.0);
        let (g_inp, g_w) = (ctx.upload(&inp), ctx.upload(&weight));
        let g_wh = upload_halves(&ctx, &weight);
        let want = forward_ref(&inp, &weight, None, rows, k, n);
        let exact = exact_ref(|r, i| inp[r * k + i], |i, j| weight[j * k + i], rows, k, n);
        for variant in variants(&ctx) {
            // An f16 weight copy is no repeat: it stays bound, A's view does not.
            for halves in [None, Some(&g_wh)] {
                let out = poisoned(&ctx, &[rows * n], || {
                    let x = Linear {
                        inp: &g_inp,
                        weight: (&g_w).into(),
                        bias: None,
                        weight_f16: halves.map(Into::into),
                    };
                    let op = Matmul {
                        variant: Some(variant),
                        fusion: Fusion::default(),
                    };
                    op.forward(&ctx, x, MatmulShape { rows, k, n })
                });
                let got = read(&ctx, &out, rows * n).await;
                let what = format!(
                    "read_write forward {variant:?} {rows}x{k}x{n} f16 weight {}",
                    halves.is_some()
                );
                check(&what, &got, &want, &exact, FWD_TOL, seed);
            }
        }
    }
    assert!(
        ctx.counters().read_write_dispatches > 0,
        "no dispatch bound read_write"
    );
}

gpu_test!(f16_backward_matches_reference, backward_body());
async fn backward_body() {
    let Some(ctx) = f16_context().await else {
        return;
    };
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    // Plus a weight gradient summed over many rows in splits.
    let many = (4099, 20, 12);
    for (rows, k, n) in shapes(&mut rng).into_iter().chain([many]) {
        // Gradients at the scale of a real step's (dlogits are about 1e-4 .. 1e-7),
        // where f16 without the gradient scale would be subnormal.
        let dout: Vec<f32> = rng
            .vec(rows * n, -1.0, 1.0)
            .iter()
            .map(|x| x * 1e-5)
            .collect();
        let inp = rng.vec(rows * k, -1.0, 1.0);
        let weight = rng.vec(n * k, -1.0, 1.0);
        let (g_dout, g_inp, g_w) = (ctx.upload(&dout), ctx.upload(&inp), ctx.upload(&weight));
        // The backward reads no bias: it only makes the bias's gradient.
        let g_b = ctx.upload(&vec![0.0f32; n]);
        let shape = MatmulShape { rows, k, n };
        let g_wh = upload_halves(&ctx, &weight);
        let x = Linear {
            inp: &g_inp,
            weight: (&g_w).into(),
            bias: None,
            weight_f16: None,
        };
        let want_dinp = dinp_ref(&dout, &weight, rows, k, n);
        let exact_dinp = exact_ref(|r, j| dout[r * n + j], |j, i| weight[j * k + i], rows, n, k);
        let want_dw = dweight_ref(&dout, &inp, rows, k, n);
        let exact_dw = exact_ref(|j, r| dout[r * n + j], |r, i| inp[r * k + i], n, rows, k);
        for variant in variants(&ctx) {
            let what = format!("{variant:?} {rows}x{k}x{n}");
            let op = Matmul {
                variant: Some(variant),
                fusion: Fusion::default(),
            };
            // Reading the f32 weight, then given its f16 copy too.
            let with_halves = Linear {
                weight_f16: Some((&g_wh).into()),
                ..x
            };
            for (x, weight) in [(x, "f32"), (with_halves, "f16")] {
                let dinp = poisoned(&ctx, &[rows * k], || op.dinp(&ctx, &g_dout, x, shape));
                let got = read(&ctx, &dinp, rows * k).await;
                check(
                    &format!("dinp {what} {weight} weight"),
                    &got,
                    &want_dinp,
                    &exact_dinp,
                    FWD_TOL,
                    seed,
                );
            }
            let dw = poisoned(&ctx, &[n * k], || {
                op.weight_grads(&ctx, &g_dout, x, shape).0
            });
            let got = read(&ctx, &dw, n * k).await;
            check(
                &format!("dweight {what}"),
                &got,
                &want_dw,
                &exact_dw,
                DW_TOL,
                seed,
            );
        }
        // As the model calls it: the chooser's variants, and dbias (f32 sums of the
        // f32 gradients: no f16 in it).
        let (dinp, dw, db) = poisoned(&ctx, &[n, n * k, rows * k], || {
            let x = Linear {
                bias: Some((&g_b).into()),
                weight_f16: Some((&g_wh).into()),
                ..x
            };
            Matmul::default().backward(&ctx, &g_dout, x, shape)
        });
        let what = format!("matmul_backward {rows}x{k}x{n}");
        let got = read(&ctx, &dinp, rows * k).await;
        check(
            &format!("dinp {what}"),
            &got,
            &want_dinp,
            &exact_dinp,
            FWD_TOL,
            seed,
        );
        let got = read(&ctx, &dw, n * k).await;
        check(
            &format!("dweight {what}"),
            &got,
            &want_dw,
            &exact_dw,
            DW_TOL,
            seed,
        );
        let want_db: Vec<f32> = (0..n)
            .map(|j| (0..rows).map(|r| dout[r * n + j] as f64).sum::<f64>() as f32)
            .collect();
        let got = read(&ctx, &db.expect("dbias"), n).await;
        let err = max_rel_error(&got, &want_db);
        assert!(err <= DW_TOL, "dbias {what}: {err:e} (seed {seed})");
    }
}

/// The shaders of the tensor-core core (and the fallback), every prelude, parsed,
/// validated with the capabilities wgpu gives a device with cooperative matrices,
/// and written as SPIR-V, as wgpu's Vulkan backend would: the CI here has no device
/// that runs them, so this is where a shader error shows.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn f16_kernels_compile_to_spirv() {
    use naga::valid::{Capabilities, ValidationFlags, Validator};
    let caps = Capabilities::SHADER_FLOAT16
        | Capabilities::COOPERATIVE_MATRIX
        | Capabilities::SUBGROUP
        | Capabilities::SUBGROUP_BARRIER;
    let f16 = tidepool::kernels::catalog(false)
        .into_iter()
        .filter(|k| ["_f16", "_coop"].iter().any(|s| k.name.contains(s)) && !k.name.contains('#'));
    for kernel in f16 {
        let module = naga::front::wgsl::parse_str(kernel.source)
            .unwrap_or_else(|e| panic!("{}: {}", kernel.name, e.emit_to_string(kernel.source)));
        let info = Validator::new(ValidationFlags::all(), caps)
            .subgroup_stages(naga::valid::ShaderStages::COMPUTE)
            .subgroup_operations(naga::valid::SubgroupOperationSet::all())
            .validate(&module)
            .unwrap_or_else(|e| panic!("{}: {}", kernel.name, e.emit_to_string(kernel.source)));
        let options = naga::back::spv::Options {
            lang_version: (1, 6),
            ..Default::default()
        };
        let pipeline = naga::back::spv::PipelineOptions {
            shader_stage: naga::ShaderStage::Compute,
            entry_point: kernel.entry.into(),
        };
        let words = naga::back::spv::write_vec(&module, &info, &options, Some(&pipeline))
            .unwrap_or_else(|e| panic!("{}: SPIR-V: {e}", kernel.name));
        // TIDEPOOL_SPIRV_DIR=DIR: the modules as files, for spirv-val / spirv-dis.
        if let Ok(dir) = std::env::var("TIDEPOOL_SPIRV_DIR") {
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            let path = std::path::Path::new(&dir).join(format!("{}.spv", kernel.name));
            std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
        // OpCapability (17) CooperativeMatrixKHR (6022): the tensor-core kernels use
        // cooperative matrices, the fallback does not.
        let coop = words.windows(2).any(|w| w == [(2 << 16) | 17, 6022]);
        assert_eq!(coop, kernel.name.contains("_coop"), "{}", kernel.name);
    }
}

// The tiny preset trained 40 steps in f32 and in f16 from the same seed: f16
// learns, and its loss stays within 0.02 of f32's (the rounding perturbs each step
// by about 1e-3 of the loss here).
gpu_test!(f16_training_follows_f32, training_body());
async fn training_body() {
    if f16_context().await.is_none() {
        return;
    }
    const STEPS: usize = 40;
    let mut runs = Vec::new();
    for precision in Precision::ALL {
        let cfg = tidepool::config::Overrides {
            precision: Some(precision.name().into()),
            ..Default::default()
        }
        .resolve()
        .expect("tiny preset");
        let mut trainer = tidepool::train::Trainer::new(cfg, common::corpus())
            .await
            .expect("trainer");
        assert_eq!(trainer.context().precision(), precision);
        let mut losses = Vec::new();
        for _ in 0..STEPS {
            losses.push(trainer.step().await.expect("step").loss);
        }
        runs.push(losses);
    }
    let (f32_run, f16_run) = (&runs[0], &runs[1]);
    assert_ne!(f32_run, f16_run, "f16 gave f32's losses bit for bit");
    assert!(
        f16_run[STEPS - 1] < f16_run[0] - 0.5,
        "f16 did not learn: {f16_run:?}"
    );
    let gap = (f16_run[STEPS - 1] - f32_run[STEPS - 1]).abs();
    assert!(
        gap < 0.02,
        "after {STEPS} steps f16's loss {} is {gap} from f32's {}",
        f16_run[STEPS - 1],
        f32_run[STEPS - 1]
    );
}

gpu_test!(f16_weight_copy_changes_no_loss, weight_copy_body());
/// The f16 copy of the weights holds the halves the cores would round the f32 weights
/// to, rewritten after every update: training with it gives the losses of training
/// without it, bit for bit (a copy left stale by an update would not). Shapes of whole
/// 128x128 tiles (128 rows a step, width 128), where the tiled fallback reads the copy.
async fn weight_copy_body() {
    if f16_context().await.is_none() {
        return;
    }
    const STEPS: usize = 5;
    let mut runs = Vec::new();
    for f16_weights in [true, false] {
        let cfg = tidepool::config::Overrides {
            precision: Some("f16".into()),
            layers: Some(1.0),
            heads: Some(2.0),
            width: Some(128.0),
            context: Some(32.0),
            batch: Some(4.0),
            ..Default::default()
        }
        .resolve()
        .expect("a config");
        let options = ContextOptions {
            f16_core: forced_core(),
            f16_weights,
            ..Default::default()
        };
        let mut trainer = tidepool::train::Trainer::with_options(cfg, common::corpus(), options)
            .await
            .expect("trainer");
        let reads = tidepool::kernels::matmul::reads_f16_weights(trainer.context());
        // A forced core that reads no copy (`coop`, `coop3`) is never handed one.
        let core_reads = !matches!(forced_core(), Some(F16Core::Coop | F16Core::Coop3));
        assert_eq!(
            reads,
            f16_weights && core_reads,
            "the copy is read exactly when asked for, by a core that reads one"
        );
        let mut losses = Vec::new();
        for _ in 0..STEPS {
            losses.push(trainer.step().await.expect("step").loss);
        }
        runs.push(losses);
    }
    assert_eq!(runs[0], runs[1], "losses with the f16 copy, then without");
}

// ---- the tensor-core core's own logic, on emulated cooperative matrices ----
//
// No device here has cooperative matrices, but everything in the coop cores around
// them (the hooks' tiles rounded into workgroup memory, the double buffers, which
// subgroup owns which block, the output staging and write4, edges and split slices)
// can still run: the test rewrites the cooperative operations into plain WGSL (each
// group of 32 invocations stands for a subgroup; lane l holds elements l, l + 32, ...
// of an accumulator) and checks the result against the reference. What this leaves
// to the GPU run is only the operations' own semantics (row-major loads, A·B + C),
// which the emulation spells out.

#[cfg(not(target_arch = "wasm32"))]
mod emulated {
    use super::*;
    use common::assert_close;
    use tidepool::gpu::Kernel;
    use tidepool::PooledBuffer;

    const EMULATION: &str = r#"
// An accumulator: lane l of 32 holds elements l, l + 32, ... (row i / 16, column i % 16).
alias Emu8 = array<f32, 8>;

// A loaded A or B operand stands for where it was loaded from (offset, then the
// strides of its rows and of its columns): within a step nothing writes those words
// between the load and the product.
fn emu_rm(at: u32, stride: u32) -> vec3<u32> { return vec3<u32>(at, stride, 1u); }
fn emu_cm(at: u32, stride: u32) -> vec3<u32> { return vec3<u32>(at, 1u, stride); }
// The same from tiles of vec4<f16>, whose offsets and strides count vec4s.
fn emu_rm4(at: u32, stride: u32) -> vec3<u32> { return vec3<u32>(4u * at, 4u * stride, 1u); }
fn emu_cm4(at: u32, stride: u32) -> vec3<u32> { return vec3<u32>(4u * at, 1u, 4u * stride); }

fn emu_mma(lane: u32, a: vec3<u32>, b: vec3<u32>, c: Emu8) -> Emu8 {
    var out = c;
    for (var j = 0u; j < 8u; j++) {
        let i = lane + 32u * j;
        var sum = out[j];
        for (var k = 0u; k < 16u; k++) {
            sum += emu_a(a.x + (i / 16u) * a.y + k * a.z)
                * emu_b(b.x + k * b.y + (i % 16u) * b.z);
        }
        out[j] = sum;
    }
    return out;
}

fn emu_store_cs(m: Emu8, at: u32, stride: u32, lane: u32) {
    for (var j = 0u; j < 8u; j++) {
        let i = lane + 32u * j;
        Cs[at + (i / 16u) * stride + i % 16u] = m[j];
    }
}
"#;

    /// Half i of the tiles, where they are arrays of f16.
    const HALF_TILES: &str = r#"
fn emu_a(i: u32) -> f32 { return f32(As[i]); }
fn emu_b(i: u32) -> f32 { return f32(Bs[i]); }
"#;

    /// Half i of the tiles, where they are arrays of vec4<f16>.
    const VEC4_TILES: &str = r#"
fn emu_a(i: u32) -> f32 { return f32(As[i / 4u][i % 4u]); }
fn emu_b(i: u32) -> f32 { return f32(Bs[i / 4u][i % 4u]); }
"#;

    /// The rewrite of the C1 core's own cooperative operations.
    const COOP_RULES: &[(&str, &str)] = &[
        ("coopLoadT<coop_mat16x16<f16, A>>(&As[", "emu_rm("),
        ("], A_STRIDE)", ", A_STRIDE)"),
        ("coopLoadT<coop_mat16x16<f16, B>>(&Bs[", "emu_rm("),
        ("], B_STRIDE)", ", B_STRIDE)"),
        (
            "coopStoreT(acc, &Cs[s * 256u], 16u);",
            "emu_store_cs(acc, s * 256u, 16u, lane);",
        ),
    ];

    /// The same for the C2 core (row- and column-major fragments of vec4<f16> tiles).
    const COOP2_RULES: &[(&str, &str)] = &[
        ("-> coop_mat16x16<f16, A>", "-> vec3<u32>"),
        ("-> coop_mat16x16<f16, B>", "-> vec3<u32>"),
        ("coopLoadT<coop_mat16x16<f16, A>>(&As[", "emu_rm4("),
        ("coopLoad<coop_mat16x16<f16, A>>(&As[", "emu_cm4("),
        ("coopLoadT<coop_mat16x16<f16, B>>(&Bs[", "emu_rm4("),
        ("coopLoad<coop_mat16x16<f16, B>>(&Bs[", "emu_cm4("),
        ("], LD_K4)", ", LD_K4)"),
        ("], LD_MN4)", ", LD_MN4)"),
        (
            "coopStoreT(acc, &Cs[s * 256u], 16u);",
            "emu_store_cs(acc, s * 256u, 16u, lane);",
        ),
    ];

    /// The same for matmul_coop3.wgsl: C2's fragment loads from f16 tiles, and its
    /// output staged a 16x64 strip at a time.
    fn coop3_rules() -> Vec<(&'static str, &'static str)> {
        let mut rules = vec![
            ("-> coop_mat16x16<f16, A>", "-> vec3<u32>"),
            ("-> coop_mat16x16<f16, B>", "-> vec3<u32>"),
            ("coopLoadT<coop_mat16x16<f16, A>>(&As[", "emu_rm("),
            ("coopLoad<coop_mat16x16<f16, A>>(&As[", "emu_cm("),
            ("coopLoadT<coop_mat16x16<f16, B>>(&Bs[", "emu_rm("),
            ("coopLoad<coop_mat16x16<f16, B>>(&Bs[", "emu_cm("),
            ("], LD_K)", ", LD_K)"),
            ("], LD_MN)", ", LD_MN)"),
        ];
        rules.extend([
            (
                "coopStoreT(acc0, &Cs[at], STRIP_LD);",
                "emu_store_cs(acc0, at, STRIP_LD, lane);",
            ),
            (
                "coopStoreT(acc1, &Cs[at + 16u], STRIP_LD);",
                "emu_store_cs(acc1, at + 16u, STRIP_LD, lane);",
            ),
            (
                "coopStoreT(acc2, &Cs[at + 32u], STRIP_LD);",
                "emu_store_cs(acc2, at + 32u, STRIP_LD, lane);",
            ),
            (
                "coopStoreT(acc3, &Cs[at + 48u], STRIP_LD);",
                "emu_store_cs(acc3, at + 48u, STRIP_LD, lane);",
            ),
        ]);
        rules
    }

    /// `source` with each cooperative operation replaced by its emulation (`core`:
    /// the core's own rules); panics if a pattern is missing (the core changed:
    /// update the rewrite).
    fn emulate(source: &str, core: &[(&str, &str)]) -> String {
        let common = [
            ("enable wgpu_cooperative_matrix;\n", ""),
            ("coop_mat16x16<f32, C>()", "Emu8()"),
            // The accumulators' type where the staging takes them.
            ("coop_mat16x16<f32, C>", "Emu8"),
            ("coopMultiplyAdd(", "emu_mma(lane, "),
            (
                "    @builtin(subgroup_id) s: u32,\n    @builtin(subgroup_invocation_id) lane: u32,\n    @builtin(subgroup_size) width: u32,\n) {\n",
                ") {\n    let s = t / 32u;\n    let lane = t % 32u;\n    let width = 32u;\n",
            ),
        ];
        let mut out = source.to_string();
        for &(from, to) in common.iter().chain(core) {
            assert!(out.contains(from), "the core has no {from:?} any more");
            out = out.replace(from, to);
        }
        // An emulated subgroup is 32 invocations, whatever the device's are: where a
        // core meets its subgroup's lanes, the workgroup meets.
        out = out.replace("subgroupBarrier()", "workgroupBarrier()");
        for op in [
            "coop_mat",
            "coopLoad",
            "coopStore",
            "coopMultiplyAdd",
            "@builtin(subgroup",
            "subgroupBarrier",
        ] {
            assert!(!out.contains(op), "{op} left unemulated");
        }
        let tiles = if out.contains("var<workgroup> As: array<vec4<f16>") {
            VEC4_TILES
        } else {
            HALF_TILES
        };
        out + EMULATION + tiles
    }

    fn kernel(name: &str, rules: &[(&str, &str)]) -> Kernel {
        let real = tidepool::kernels::catalog(false)
            .into_iter()
            .find(|k| k.name == name)
            .expect("kernel");
        Kernel {
            name: Box::leak(format!("emulated_{name}").into_boxed_str()),
            source: Box::leak(emulate(real.source, rules).into_boxed_str()),
            entry: "main",
            unchecked: false,
        }
    }

    /// `Params` of the GEMM preludes (matmul_nt/_nn/_tn.wgsl); no fusion but the bias.
    #[repr(C)]
    #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
    struct Params {
        m: u32,
        n: u32,
        k: u32,
        k_chunk: u32,
        flags: u32,
        seed: u32,
        threshold: u32,
        scale: f32,
    }

    /// Bits of `flags` in matmul_fuse.wgsl.
    const FUSE_BIAS: u32 = 1;
    const FUSE_GELU_INP: u32 = 2;
    const FUSE_RESIDUAL: u32 = 4;
    const FUSE_DROPOUT: u32 = 8;
    const FUSE_GELU_GRAD: u32 = 16;

    fn params(m: usize, n: usize, k: usize, k_chunk: usize, flags: u32) -> Params {
        let u = |x: usize| x as u32;
        Params {
            m: u(m),
            n: u(n),
            k: u(k),
            k_chunk: u(k_chunk),
            flags,
            seed: 0,
            threshold: 0,
            scale: 1.0,
        }
    }

    fn grid(m: usize, n: usize, splits: usize) -> [u32; 3] {
        [
            n.div_ceil(128) as u32,
            m.div_ceil(128) as u32,
            splits as u32,
        ]
    }

    /// The slices of a split output summed in order.
    fn sum_splits(part: &[f32], len: usize, splits: usize) -> Vec<f32> {
        (0..len)
            .map(|i| (0..splits).map(|s| part[s * len + i]).sum())
            .collect()
    }

    #[test]
    fn coop_core_logic_on_emulated_matrices() {
        pollster::block_on(body("coop", COOP_RULES))
    }

    #[test]
    fn coop2_core_logic_on_emulated_matrices() {
        pollster::block_on(body("coop2", COOP2_RULES))
    }

    #[test]
    fn coop3_core_logic_on_emulated_matrices() {
        pollster::block_on(body("coop3", &coop3_rules()))
    }

    /// `bound`, and where the core reads vec4 views (`views`: a 16-byte stand-in),
    /// its two operands again; as the launcher binds them, an operand under one vec4
    /// (a vec4 array's least binding) gets the stand-in there, and the core its
    /// guarded loads.
    fn with_views<'a>(
        views: Option<&'a PooledBuffer>,
        bound: &[&'a PooledBuffer],
    ) -> Vec<&'a PooledBuffer> {
        let mut all = bound.to_vec();
        if let Some(stand_in) = views {
            let view = |b: &'a PooledBuffer| if b.len() >= 16 { b } else { stand_in };
            all.extend([view(bound[0]), view(bound[1])]);
        }
        all
    }

    /// Runs `dispatch` into an output of `splits` partials of `len` floats drawn from
    /// the poisoned pool, so that a kernel that leaves any of it unwritten fails;
    /// read back with the partials summed.
    async fn launch(
        ctx: &WgpuContext,
        len: usize,
        splits: usize,
        dispatch: impl FnOnce(&PooledBuffer),
    ) -> Vec<f32> {
        let out = poisoned(ctx, &[splits * len], || {
            let out = ctx.create_pooled(splits * len * 4);
            dispatch(&out);
            out
        });
        sum_splits(&read(ctx, &out, splits * len).await, len, splits)
    }

    async fn body(core: &str, rules: &[(&str, &str)]) {
        let Some(ctx) = f16_context().await else {
            panic!("natively the CI adapter (lavapipe) has shader-f16");
        };
        let (forward, dinp, dweight) = (
            kernel(&format!("matmul_forward_{core}"), rules),
            kernel(&format!("matmul_dinp_{core}"), rules),
            kernel(&format!("matmul_dweight_{core}"), rules),
        );
        // The C2 and C3 cores read their operands' interior tiles through vec4 views:
        // bindings of their own, after the launch's buffers (the launchers add them).
        let stand_in = ctx.upload(&[0.0f32; 4]);
        let views = (core != "coop").then_some(&stand_in);
        // Where the core has them, the twins of forward and dinp whose B view is an
        // f16 copy of the weight.
        let has = |name: &str| {
            tidepool::kernels::catalog(false)
                .iter()
                .any(|k| k.name == name)
        };
        // Where the core has it, its dweight that also sums dbias's partials.
        let sums_name = format!("matmul_dweight_{core}_bias");
        let dweight_sums = has(&sums_name).then(|| kernel(&sums_name, rules));
        let twins = has(&format!("matmul_forward_{core}_w16")).then(|| {
            (
                kernel(&format!("matmul_forward_{core}_w16"), rules),
                kernel(&format!("matmul_dinp_{core}_w16"), rules),
            )
        });
        let seed = fresh_seed();
        common::note(&format!("emulated {core}: seed {seed}"));
        let mut rng = Rng::new(seed);
        // Past one tile in m and n, k not a multiple of 16 or 8; a random shape; and
        // multiples of 4 past one tile and one 32-deep step in every product, so that
        // the first tile of the C2 and C3 cores takes its unguarded interior path
        // for whole steps (with and without a split) and the other tiles and the
        // last step the guarded one.
        let extra = (1 + rng.below(200), 1 + rng.below(100), 1 + rng.below(200));
        let aligned = (
            132 + 4 * rng.below(40),
            132 + 4 * rng.below(20),
            132 + 4 * rng.below(40),
        );
        // And operands under one vec4, which the views cannot hold (a stand-in there).
        for (rows, k, n) in [(130, 67, 33), (37, 9, 150), extra, aligned, (2, 1, 3)] {
            let inp = rng.vec(rows * k, -1.0, 1.0);
            let weight = rng.vec(n * k, -1.0, 1.0);
            let bias = rng.vec(n, -1.0, 1.0);
            let dout: Vec<f32> = rng
                .vec(rows * n, -1.0, 1.0)
                .iter()
                .map(|x| x * 1e-5)
                .collect();
            let (g_inp, g_w, g_b, g_dout) = (
                ctx.upload(&inp),
                ctx.upload(&weight),
                ctx.upload(&bias),
                ctx.upload(&dout),
            );
            let what = format!("emulated {core} {rows}x{k}x{n}");
            let want_fwd = forward_ref(&inp, &weight, Some(&bias), rows, k, n);
            let want_dinp = dinp_ref(&dout, &weight, rows, k, n);
            let want_dw = dweight_ref(&dout, &inp, rows, k, n);

            let got = launch(&ctx, rows * n, 1, |out| {
                let bound = with_views(views, &[&g_inp, &g_w, &g_b, out, &g_inp]);
                let p = params(rows, n, k, k, FUSE_BIAS);
                ctx.dispatch(&forward, &p, &bound, grid(rows, n, 1));
            })
            .await;
            assert_close(&format!("forward {what}"), &got, &want_fwd, FWD_TOL, seed);

            // The epilogues, in write4 after the staging: a residual branch's end
            // (forward) and the gradient through a fused GELU (dinp).
            let resid = rng.vec(rows * n, -1.0, 1.0);
            let g_resid = ctx.upload(&resid);
            let got = launch(&ctx, rows * n, 1, |out| {
                let bound = with_views(views, &[&g_inp, &g_w, &g_b, out, &g_resid]);
                let p = params(rows, n, k, k, FUSE_BIAS | FUSE_RESIDUAL);
                ctx.dispatch(&forward, &p, &bound, grid(rows, n, 1));
            })
            .await;
            let want: Vec<f32> = want_fwd.iter().zip(&resid).map(|(w, r)| w + r).collect();
            let name = format!("forward residual {what}");
            assert_close(&name, &got, &want, FWD_TOL, seed);
            // And with dropout on the branch (element r * n + j of the mask, as
            // reference::dropout numbers them): the residual branch's end in training.
            let mask_seed = rng.next_u64() as u32;
            let (threshold, scale) = tidepool::reference::dropout_mask_params(0.3);
            let got = launch(&ctx, rows * n, 1, |out| {
                let bound = with_views(views, &[&g_inp, &g_w, &g_b, out, &g_resid]);
                let mut p = params(rows, n, k, k, FUSE_BIAS | FUSE_RESIDUAL | FUSE_DROPOUT);
                (p.seed, p.threshold, p.scale) = (mask_seed, threshold, scale);
                ctx.dispatch(&forward, &p, &bound, grid(rows, n, 1));
            })
            .await;
            let dropped = tidepool::reference::dropout(&want_fwd, 0.3, mask_seed);
            let want: Vec<f32> = dropped.iter().zip(&resid).map(|(w, r)| w + r).collect();
            let name = format!("forward residual dropout {what}");
            assert_close(&name, &got, &want, FWD_TOL, seed);
            let aux = rng.vec(rows * k, -3.0, 3.0);
            let g_aux = ctx.upload(&aux);
            let got = launch(&ctx, rows * k, 1, |out| {
                let bound = with_views(views, &[&g_dout, &g_w, out, &g_aux]);
                let p = params(rows, k, n, n, FUSE_GELU_GRAD);
                ctx.dispatch(&dinp, &p, &bound, grid(rows, k, 1));
            })
            .await;
            let want = tidepool::reference::gelu_backward(&aux, &want_dinp);
            let name = format!("dinp gelu grad {what}");
            assert_close(&name, &got, &want, FWD_TOL, seed);

            // The GELU prologue on the activation operand (forward and dweight). The
            // shader's GELU and the reference's differ in the last f32 bits, which
            // now and then round to a neighbouring f16: a looser bound, still far
            // below what a missing GELU gives (about 1).
            const GELU_TOL: f32 = 2e-3;
            let act = tidepool::reference::gelu_forward(&inp);
            let got = launch(&ctx, rows * n, 1, |out| {
                let bound = with_views(views, &[&g_inp, &g_w, &g_b, out, &g_inp]);
                let p = params(rows, n, k, k, FUSE_BIAS | FUSE_GELU_INP);
                ctx.dispatch(&forward, &p, &bound, grid(rows, n, 1));
            })
            .await;
            let want = forward_ref(&act, &weight, Some(&bias), rows, k, n);
            assert_close(&format!("forward gelu {what}"), &got, &want, GELU_TOL, seed);
            let got = launch(&ctx, n * k, 1, |out| {
                let bound = with_views(views, &[&g_dout, &g_inp, out]);
                let p = params(n, k, rows, rows, FUSE_GELU_INP);
                ctx.dispatch(&dweight, &p, &bound, grid(n, k, 1));
            })
            .await;
            let want = dweight_ref(&dout, &act, rows, k, n);
            assert_close(&format!("dweight gelu {what}"), &got, &want, GELU_TOL, seed);

            // dinp in two k splits (over n), dweight in two row splits.
            for (splits, chunk) in [(1, n), (2, n.div_ceil(2).div_ceil(8) * 8)] {
                let splits = if chunk >= n { 1 } else { splits };
                let got = launch(&ctx, rows * k, splits, |out| {
                    let bound = with_views(views, &[&g_dout, &g_w, out, &g_dout]);
                    let p = params(rows, k, n, chunk, 0);
                    ctx.dispatch(&dinp, &p, &bound, grid(rows, k, splits));
                })
                .await;
                let name = format!("dinp {what} splits {splits}");
                assert_close(&name, &got, &want_dinp, FWD_TOL, seed);
            }
            // The dweight that sums dbias too (its partials bound after the views),
            // unsplit and in two row splits: dbias from dout as loaded, in f32. Two
            // outputs, so its own poisoned launch.
            if let Some(sums) = &dweight_sums {
                for (splits, chunk) in [(1, rows), (2, rows.div_ceil(2).div_ceil(32) * 32)] {
                    let splits = if chunk >= rows { 1 } else { splits };
                    let (part, part_b) = poisoned(&ctx, &[splits * n * k, splits * n], || {
                        let part = ctx.create_pooled(splits * n * k * 4);
                        let part_b = ctx.create_pooled(splits * n * 4);
                        let p = params(n, k, rows, chunk, 0);
                        let mut bound = with_views(views, &[&g_dout, &g_inp, &part]);
                        bound.push(&part_b);
                        ctx.dispatch(sums, &p, &bound, grid(n, k, splits));
                        (part, part_b)
                    });
                    let got = sum_splits(&read(&ctx, &part, splits * n * k).await, n * k, splits);
                    let name = format!("dweight with dbias {what} splits {splits}");
                    assert_close(&name, &got, &want_dw, DW_TOL, seed);
                    let got = sum_splits(&read(&ctx, &part_b, splits * n).await, n, splits);
                    let want: Vec<f32> = (0..n)
                        .map(|j| (0..rows).map(|r| dout[r * n + j] as f64).sum::<f64>() as f32)
                        .collect();
                    let name = format!("dbias beside dweight {what} splits {splits}");
                    assert_close(&name, &got, &want, FWD_TOL, seed);
                }
            }
            // The twins reading the f16 copy (made here) in B's view, unsplit.
            if let Some((forward16, dinp16)) = &twins {
                let g_wh = upload_halves(&ctx, &weight);
                let got = launch(&ctx, rows * n, 1, |out| {
                    let mut bound = with_views(views, &[&g_inp, &g_w, &g_b, out, &g_inp]);
                    *bound.last_mut().expect("B's view") = &g_wh;
                    let p = params(rows, n, k, k, FUSE_BIAS);
                    ctx.dispatch(forward16, &p, &bound, grid(rows, n, 1));
                })
                .await;
                let name = format!("forward f16 weight {what}");
                assert_close(&name, &got, &want_fwd, FWD_TOL, seed);
                let got = launch(&ctx, rows * k, 1, |out| {
                    let mut bound = with_views(views, &[&g_dout, &g_w, out, &g_dout]);
                    *bound.last_mut().expect("B's view") = &g_wh;
                    let p = params(rows, k, n, n, 0);
                    ctx.dispatch(dinp16, &p, &bound, grid(rows, k, 1));
                })
                .await;
                let name = format!("dinp f16 weight {what}");
                assert_close(&name, &got, &want_dinp, FWD_TOL, seed);
            }
            for (splits, chunk) in [(1, rows), (2, rows.div_ceil(2).div_ceil(8) * 8)] {
                let splits = if chunk >= rows { 1 } else { splits };
                let got = launch(&ctx, n * k, splits, |out| {
                    let bound = with_views(views, &[&g_dout, &g_inp, out]);
                    let p = params(n, k, rows, chunk, 0);
                    ctx.dispatch(&dweight, &p, &bound, grid(n, k, splits));
                })
                .await;
                let name = format!("dweight {what} splits {splits}");
                assert_close(&name, &got, &want_dw, DW_TOL, seed);
            }
        }
        ctx.take_error().expect("no GPU errors");
    }
}

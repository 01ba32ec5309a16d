//! What the kernels need of a device, as the planner (`plan::check`) sums it from
//! each kernel's own statement: a step whose matmul grids pass a dimension on the
//! tuning that runs is refused up front, naming the limit and the setting, where
//! the launcher would have panicked.

use tidepool::kernels::matmul::{self, Layout};
use tidepool::kernels::{MatmulVariant, Target};
use tidepool::plan::{self, DeviceLimits};
use tidepool::reference::MatmulShape;
use tidepool::train::TrainConfig;

/// 32768 sequences of 64 tokens through a model 4 wide, over a 2-character corpus:
/// 2,097,152 rows, a 2097152 x 12 product.
fn many_rows() -> TrainConfig {
    TrainConfig {
        layers: 1,
        heads: 1,
        width: 4,
        context: 64,
        batch: 32768,
        ..TrainConfig::preset("tiny").expect("tiny")
    }
}

/// lavapipe's limits (128 MiB bindings, 32 KiB of workgroup memory), for `kernels`.
fn lavapipe(kernels: Option<Target>) -> DeviceLimits {
    DeviceLimits {
        max_workgroup_storage_bytes: 32768,
        kernels,
        ..DeviceLimits::webgpu_default()
    }
}

#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn rows_past_the_cpu_matmuls_grid_are_refused_on_cpu_adapters() {
    let cfg = many_rows();
    // The CPU adapters' matmuls take 16 (browser) or 32 rows a workgroup: 65536 or
    // more workgroups along the rows. Refused for them, and where the tuning is not
    // known yet.
    for kernels in [Some(Target::Cpu), None] {
        let e = plan::check(&cfg, 2, &lavapipe(kernels)).unwrap_err();
        assert_eq!(e.kind(), "too_large", "{e}");
        let m = e.to_string();
        assert!(
            m.contains("workgroups")
                && m.contains("65535")
                && m.contains("batch or context")
                && m.contains("cpu"),
            "the refusal names the limit, the setting and the kernels: {m}"
        );
    }
    // The GPU tuning's tiles (64 or 128 rows) fit.
    plan::check(&cfg, 2, &lavapipe(Some(Target::Gpu))).expect("fits the GPU kernels");
    // A quarter of the batch fits the CPU kernels too, 16 rows a workgroup or 32.
    let quarter = TrainConfig {
        batch: cfg.batch / 4,
        ..cfg
    };
    plan::check(&quarter, 2, &lavapipe(None)).expect("fits every tuning");
}

/// The planner asks the launchers' own question: the variant of each product, and
/// its grid, for the tuning the device runs.
#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn each_products_needs_follow_the_variant_that_runs() {
    use tidepool::config::Precision::{F16, F32};
    let shape = MatmulShape {
        rows: 2_097_152,
        k: 4,
        n: 12,
    };
    let cpu = matmul::needs(Target::Cpu, F32, Layout::Forward, shape);
    let rows_a_group = if cfg!(target_arch = "wasm32") { 16 } else { 32 };
    assert!(cpu.variant.is_cpu(), "{cpu:?}");
    assert_eq!(cpu.grid, [1, 2_097_152 / rows_a_group, 1]);
    assert_eq!(cpu.workgroup_bytes, 0);
    // k = 4 is too short to split, and the output has many tiles: Narrow's 64 rows.
    let gpu = matmul::needs(Target::Gpu, F32, Layout::Forward, shape);
    assert_eq!(gpu.variant, MatmulVariant::Narrow);
    assert_eq!(gpu.grid, [1, 2_097_152 / 64, 1]);
    // f16 tiles as Tiled on every tuning.
    let f16 = matmul::needs(Target::Cpu, F16, Layout::Forward, shape);
    assert_eq!(f16.variant, MatmulVariant::F16 { split: false });
    assert_eq!(f16.grid, [1, 2_097_152 / 128, 1]);
    // dweight (12 x 4, few tiles) takes Narrow and reduces over the rows in
    // splits, far under the limit: its partials are counted.
    let dweight = matmul::needs(Target::Gpu, F32, Layout::Dweight, shape);
    assert_eq!(dweight.variant, MatmulVariant::Narrow);
    assert!(dweight.grid.iter().all(|&g| g <= 65535), "{dweight:?}");
    assert_eq!(
        dweight.grid[2] as usize * 12 * 4,
        dweight.partial_floats as usize
    );
    assert!(dweight.grid[2] > 1, "{dweight:?}");
}

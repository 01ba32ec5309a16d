//! The f16 matmul cores of `--precision f16` (variants [`MatmulVariant::Coop`] and
//! [`MatmulVariant::F16`] of `matmul.rs`): operands rounded to f16, products summed
//! in f32, after the same preludes as the f32 core, so every fusion in the preludes'
//! hooks applies to them too.
//!
//! - `matmul_coop.wgsl`: tensor cores, through wgpu's cooperative matrices
//!   (16x16x16, f16 x f16 -> f32), where the device has them and subgroups are 32
//!   wide (NVIDIA).
//! - `matmul_f16.wgsl`: f16 workgroup tiles and f32 arithmetic, for every other
//!   adapter with shader-f16 (and for the CI here: lavapipe has shader-f16).
//!
//! - `matmul_coop2.wgsl`: the same tensor-core product with 32-deep k steps and
//!   unguarded interior loads (variant [`MatmulVariant::Coop2`]); `DEFAULT_COOP2`
//!   says which of the two the launchers pick.
//!
//! Natively, `TIDEPOOL_F16_CORE=coop` (or `coop2`) makes every f16 matmul use that
//! tensor-core core (and panic where the device cannot run it: a test run there must
//! not pass on the fallback), `fallback` the other one.

use super::matmul::{gemm_prelude, Layout, MatmulVariant};
use crate::gpu::{Kernel, WgpuContext};

/// The gradient operand (A) of the backward GEMMs is multiplied by this power of two
/// before it is rounded to f16 and the sums by its inverse after, so that gradients
/// down to about 1e-8 stay normal f16 numbers; overflow needs |gradient| > 16.
pub const GRAD_SCALE: f32 = 4096.0;

macro_rules! half_kernel {
    ($name:literal, $enable:literal, $scale:literal, $prelude:literal, $core:literal) => {
        Kernel {
            name: $name,
            source: concat!(
                $enable,
                "const A_SCALE: f32 = ",
                $scale,
                ";\n",
                gemm_prelude!($prelude),
                include_str!($core)
            ),
            entry: "main",
            // Every index is guarded as in matmul.wgsl; the launchers check lengths.
            unchecked: true,
        }
    };
}

// The scale literals must equal GRAD_SCALE (checked by a unit test below).
pub(super) const FORWARD_F16: Kernel = half_kernel!(
    "matmul_forward_f16",
    "enable f16;\n",
    "1.0",
    "matmul_nt.wgsl",
    "matmul_f16.wgsl"
);
pub(super) const DINP_F16: Kernel = half_kernel!(
    "matmul_dinp_f16",
    "enable f16;\n",
    "4096.0",
    "matmul_nn.wgsl",
    "matmul_f16.wgsl"
);
pub(super) const DWEIGHT_F16: Kernel = half_kernel!(
    "matmul_dweight_f16",
    "enable f16;\n",
    "4096.0",
    "matmul_tn.wgsl",
    "matmul_f16.wgsl"
);
pub(super) const FORWARD_COOP: Kernel = half_kernel!(
    "matmul_forward_coop",
    "enable f16;\nenable wgpu_cooperative_matrix;\n",
    "1.0",
    "matmul_nt.wgsl",
    "matmul_coop.wgsl"
);
pub(super) const DINP_COOP: Kernel = half_kernel!(
    "matmul_dinp_coop",
    "enable f16;\nenable wgpu_cooperative_matrix;\n",
    "4096.0",
    "matmul_nn.wgsl",
    "matmul_coop.wgsl"
);
pub(super) const DWEIGHT_COOP: Kernel = half_kernel!(
    "matmul_dweight_coop",
    "enable f16;\nenable wgpu_cooperative_matrix;\n",
    "4096.0",
    "matmul_tn.wgsl",
    "matmul_coop.wgsl"
);

pub(super) const FORWARD_COOP2: Kernel = half_kernel!(
    "matmul_forward_coop2",
    "enable f16;\nenable wgpu_cooperative_matrix;\n",
    "1.0",
    "matmul_nt.wgsl",
    "matmul_coop2.wgsl"
);
pub(super) const DINP_COOP2: Kernel = half_kernel!(
    "matmul_dinp_coop2",
    "enable f16;\nenable wgpu_cooperative_matrix;\n",
    "4096.0",
    "matmul_nn.wgsl",
    "matmul_coop2.wgsl"
);
pub(super) const DWEIGHT_COOP2: Kernel = half_kernel!(
    "matmul_dweight_coop2",
    "enable f16;\nenable wgpu_cooperative_matrix;\n",
    "4096.0",
    "matmul_tn.wgsl",
    "matmul_coop2.wgsl"
);

/// Every f16 kernel, for tests that compile them without a device.
pub const KERNELS: [&Kernel; 9] = [
    &FORWARD_F16,
    &DINP_F16,
    &DWEIGHT_F16,
    &FORWARD_COOP,
    &DINP_COOP,
    &DWEIGHT_COOP,
    &FORWARD_COOP2,
    &DINP_COOP2,
    &DWEIGHT_COOP2,
];

/// Whether the launchers' default tensor-core core is matmul_coop2.wgsl (deeper k
/// steps, unguarded interior loads) rather than matmul_coop.wgsl.
const DEFAULT_COOP2: bool = true;

/// The kernel of an f16 `variant` for `layout`.
pub(super) fn kernel(variant: MatmulVariant, layout: Layout) -> &'static Kernel {
    match (variant, layout) {
        (MatmulVariant::Coop { .. }, Layout::Forward) => &FORWARD_COOP,
        (MatmulVariant::Coop { .. }, Layout::Dinp) => &DINP_COOP,
        (MatmulVariant::Coop { .. }, Layout::Dweight) => &DWEIGHT_COOP,
        (MatmulVariant::Coop2 { .. }, Layout::Forward) => &FORWARD_COOP2,
        (MatmulVariant::Coop2 { .. }, Layout::Dinp) => &DINP_COOP2,
        (MatmulVariant::Coop2 { .. }, Layout::Dweight) => &DWEIGHT_COOP2,
        (_, Layout::Forward) => &FORWARD_F16,
        (_, Layout::Dinp) => &DINP_F16,
        (_, Layout::Dweight) => &DWEIGHT_F16,
    }
}

/// The f16 variant for a GEMM whose f32 variant would split k or not.
pub(super) fn choose(ctx: &WgpuContext, split: bool) -> MatmulVariant {
    let core = match forced() {
        Some(Core::Coop) => {
            if let Err(why) = coop_supported(ctx) {
                panic!("TIDEPOOL_F16_CORE=coop, but {why}");
            }
            Core::Coop
        }
        Some(Core::Coop2) => {
            if let Err(why) = coop2_supported(ctx) {
                panic!("TIDEPOOL_F16_CORE=coop2, but {why}");
            }
            Core::Coop2
        }
        Some(Core::Fallback) => Core::Fallback,
        None if coop_supported(ctx).is_err() => Core::Fallback,
        None if DEFAULT_COOP2 && coop2_supported(ctx).is_ok() => Core::Coop2,
        None => Core::Coop,
    };
    match core {
        Core::Coop => MatmulVariant::Coop { split },
        Core::Coop2 => MatmulVariant::Coop2 { split },
        Core::Fallback => MatmulVariant::F16 { split },
    }
}

/// Whether the tensor-core core runs on `ctx`, or why not.
pub fn coop_supported(ctx: &WgpuContext) -> Result<(), String> {
    use wgpu::Features as F;
    let needed = F::SHADER_F16 | F::SUBGROUP | F::EXPERIMENTAL_COOPERATIVE_MATRIX;
    if !ctx.adapter_features().contains(needed) {
        return Err(format!(
            "{} offers no cooperative matrices with shader-f16 and subgroups",
            ctx.adapter_name()
        ));
    }
    if !ctx.device.features().contains(needed) {
        return Err("the context was not made with precision f16".into());
    }
    if !ctx.cooperative_matrices().iter().any(is_f16_16x16) {
        return Err(format!(
            "no cooperative-matrix configuration is 16x16x16 f16 x f16 -> f32 (the adapter has {:?})",
            ctx.cooperative_matrices()
        ));
    }
    let info = ctx.adapter_info();
    if (info.subgroup_min_size, info.subgroup_max_size) != (32, 32) {
        return Err(format!(
            "matmul_coop.wgsl is written for 8 subgroups of 32; this adapter's subgroups are {} to {} wide",
            info.subgroup_min_size, info.subgroup_max_size
        ));
    }
    Ok(())
}

/// Bytes of workgroup memory matmul_coop2.wgsl declares.
const COOP2_WORKGROUP_BYTES: u32 = 49152;

/// Whether matmul_coop2.wgsl runs on `ctx` (as matmul_coop.wgsl, with 48 KiB of
/// workgroup memory), or why not.
pub fn coop2_supported(ctx: &WgpuContext) -> Result<(), String> {
    coop_supported(ctx)?;
    let have = ctx.limits().max_compute_workgroup_storage_size;
    if have < COOP2_WORKGROUP_BYTES {
        return Err(format!(
            "matmul_coop2.wgsl needs {COOP2_WORKGROUP_BYTES} bytes of workgroup memory; this device has {have}"
        ));
    }
    Ok(())
}

/// The configuration matmul_coop.wgsl uses.
pub fn is_f16_16x16(c: &wgpu::CooperativeMatrixProperties) -> bool {
    use wgpu::CooperativeScalarType::{F16, F32};
    (c.m_size, c.n_size, c.k_size) == (16, 16, 16) && c.ab_type == F16 && c.cr_type == F32
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(target_arch = "wasm32", allow(dead_code))]
enum Core {
    Coop,
    Coop2,
    Fallback,
}

#[cfg(not(target_arch = "wasm32"))]
fn forced() -> Option<Core> {
    static ENV: std::sync::OnceLock<Option<Core>> = std::sync::OnceLock::new();
    *ENV.get_or_init(|| {
        let value = std::env::var("TIDEPOOL_F16_CORE").ok()?;
        match value.trim() {
            "coop" => Some(Core::Coop),
            "coop2" => Some(Core::Coop2),
            "fallback" => Some(Core::Fallback),
            _ => {
                eprintln!(
                    "TIDEPOOL_F16_CORE={value:?} is none of coop, coop2, fallback; choosing by device"
                );
                None
            }
        }
    })
}

#[cfg(target_arch = "wasm32")]
fn forced() -> Option<Core> {
    None
}

#[cfg(test)]
mod tests {
    #[test]
    fn scale_literals_match_grad_scale() {
        for kernel in super::KERNELS {
            let want = if kernel.name.starts_with("matmul_forward") {
                1.0
            } else {
                super::GRAD_SCALE
            };
            let line = format!("const A_SCALE: f32 = {want:.1};");
            assert!(kernel.source.contains(&line), "{}: {line}", kernel.name);
        }
    }
}

//! The WGSL of each GEMM kernel: a layout prelude (`matmul_nt` / `_nn` /
//! `_tn.wgsl`, with the fusions' helpers in front) joined with a variant's core, and
//! a launch's fusion flags fixed in the source ([`specialized`]).

use std::sync::OnceLock;

use super::{Layout, MatmulVariant};
use crate::gpu::Kernel;
use crate::kernels::wgsl::unroll;

/// A GEMM prelude with what its fusions call joined in front (the dropout hash, GELU,
/// and the flags of `matmul_fuse.wgsl`): every core is joined after one of these.
macro_rules! gemm_prelude {
    ($prelude:literal) => {
        concat!(
            include_str!("../hash.wgsl"),
            include_str!("../gelu.wgsl"),
            include_str!("matmul_fuse.wgsl"),
            include_str!($prelude)
        )
    };
}

macro_rules! gemm_kernel {
    ($name:literal, $prelude:literal, $core:literal) => {
        gemm_kernel!($name, $prelude, "", $core)
    };
    ($name:literal, $prelude:literal, $consts:literal, $core:literal) => {
        Kernel {
            name: $name,
            source: concat!(gemm_prelude!($prelude), $consts, include_str!($core)),
            entry: "main",
            unchecked: UNCHECKED,
        }
    };
}

/// An f16 core after a prelude, with the extensions it enables and its A_SCALE in
/// front.
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
            unchecked: UNCHECKED,
        }
    };
}

/// Every index in these shaders is guarded (or clamped), and each launcher checks
/// its buffers (`check_len`), so they run without wgpu's per-access bounds checks.
const UNCHECKED: bool = true;

/// The gradient operand (A) of the backward GEMMs is multiplied by this power of two
/// before it is rounded to f16 and the sums by its inverse after, so that gradients
/// down to about 1e-8 stay normal f16 numbers; overflow needs |gradient| > 16.
pub const GRAD_SCALE: f32 = 4096.0;

const FORWARD: Kernel = gemm_kernel!("matmul_forward", "matmul_nt.wgsl", "matmul.wgsl");
const DINP: Kernel = gemm_kernel!("matmul_backward_dinp", "matmul_nn.wgsl", "matmul.wgsl");
const DWEIGHT: Kernel = gemm_kernel!(
    "matmul_backward_dweight",
    "matmul_tn.wgsl",
    "const A_SUMS: bool = false;\nfn write_a_sums(z: u32, j: u32, v: vec4<f32>) {}\n",
    "matmul.wgsl"
);
/// [`DWEIGHT`] that also sums dbias's partials (`MatmulVariant::sums_bias`).
pub(super) const DWEIGHT_BIAS: Kernel = Kernel {
    name: "matmul_backward_dweight_bias",
    source: concat!(
        gemm_prelude!("matmul_tn.wgsl"),
        include_str!("matmul_tn_sums.wgsl"),
        include_str!("matmul.wgsl")
    ),
    entry: "main",
    unchecked: UNCHECKED,
};
const FORWARD_NARROW: Kernel = gemm_kernel!(
    "matmul_forward_narrow",
    "matmul_nt.wgsl",
    "matmul_narrow.wgsl"
);
const DINP_NARROW: Kernel = gemm_kernel!(
    "matmul_backward_dinp_narrow",
    "matmul_nn.wgsl",
    "matmul_narrow.wgsl"
);
const DWEIGHT_NARROW: Kernel = gemm_kernel!(
    "matmul_backward_dweight_narrow",
    "matmul_tn.wgsl",
    "matmul_narrow.wgsl"
);

// The scale literals equal GRAD_SCALE (checked by a unit test below).
const FORWARD_F16: Kernel = half_kernel!(
    "matmul_forward_f16",
    "enable f16;\n",
    "1.0",
    "matmul_nt.wgsl",
    "matmul_f16.wgsl"
);
const DINP_F16: Kernel = half_kernel!(
    "matmul_dinp_f16",
    "enable f16;\n",
    "4096.0",
    "matmul_nn.wgsl",
    "matmul_f16.wgsl"
);
const DWEIGHT_F16: Kernel = half_kernel!(
    "matmul_dweight_f16",
    "enable f16;\n",
    "4096.0",
    "matmul_tn.wgsl",
    "matmul_f16.wgsl"
);
const FORWARD_COOP: Kernel = half_kernel!(
    "matmul_forward_coop",
    "enable f16;\nenable wgpu_cooperative_matrix;\n",
    "1.0",
    "matmul_nt.wgsl",
    "matmul_coop.wgsl"
);
const DINP_COOP: Kernel = half_kernel!(
    "matmul_dinp_coop",
    "enable f16;\nenable wgpu_cooperative_matrix;\n",
    "4096.0",
    "matmul_nn.wgsl",
    "matmul_coop.wgsl"
);
const DWEIGHT_COOP: Kernel = half_kernel!(
    "matmul_dweight_coop",
    "enable f16;\nenable wgpu_cooperative_matrix;\n",
    "4096.0",
    "matmul_tn.wgsl",
    "matmul_coop.wgsl"
);
const FORWARD_COOP2: Kernel = half_kernel!(
    "matmul_forward_coop2",
    "enable f16;\nenable wgpu_cooperative_matrix;\n",
    "1.0",
    "matmul_nt.wgsl",
    "matmul_coop2.wgsl"
);
const DINP_COOP2: Kernel = half_kernel!(
    "matmul_dinp_coop2",
    "enable f16;\nenable wgpu_cooperative_matrix;\n",
    "4096.0",
    "matmul_nn.wgsl",
    "matmul_coop2.wgsl"
);
const DWEIGHT_COOP2: Kernel = half_kernel!(
    "matmul_dweight_coop2",
    "enable f16;\nenable wgpu_cooperative_matrix;\n",
    "4096.0",
    "matmul_tn.wgsl",
    "matmul_coop2.wgsl"
);

/// `matmul_reduce.wgsl` with the fusions' helpers (its fused sum applies epilogues).
const REDUCE_SOURCE: &str = gemm_prelude!("matmul_reduce.wgsl");

pub(super) const SUM_SPLITS_FUSED: Kernel = Kernel {
    name: "matmul_sum_splits_fused",
    source: REDUCE_SOURCE,
    entry: "sum_splits_fused",
    unchecked: UNCHECKED,
};
pub(super) const COLSUM: Kernel = Kernel {
    name: "matmul_colsum",
    source: REDUCE_SOURCE,
    entry: "colsum_part",
    unchecked: UNCHECKED,
};

/// The kernel `variant` computes `layout`'s product with.
pub(super) fn kernel(variant: MatmulVariant, layout: Layout) -> &'static Kernel {
    use MatmulVariant as V;
    match (variant, layout) {
        (V::Tiled | V::SplitK, Layout::Forward) => &FORWARD,
        (V::Tiled | V::SplitK, Layout::Dinp) => &DINP,
        (V::Tiled | V::SplitK, Layout::Dweight) => &DWEIGHT,
        (V::Narrow, Layout::Forward) => &FORWARD_NARROW,
        (V::Narrow, Layout::Dinp) => &DINP_NARROW,
        (V::Narrow, Layout::Dweight) => &DWEIGHT_NARROW,
        (V::Cpu16, _) => cpu_kernel(0, layout),
        (V::Cpu32, _) => cpu_kernel(1, layout),
        (V::Coop { .. }, Layout::Forward) => &FORWARD_COOP,
        (V::Coop { .. }, Layout::Dinp) => &DINP_COOP,
        (V::Coop { .. }, Layout::Dweight) => &DWEIGHT_COOP,
        (V::Coop2 { .. }, Layout::Forward) => &FORWARD_COOP2,
        (V::Coop2 { .. }, Layout::Dinp) => &DINP_COOP2,
        (V::Coop2 { .. }, Layout::Dweight) => &DWEIGHT_COOP2,
        (V::F16 { .. }, Layout::Forward) => &FORWARD_F16,
        (V::F16 { .. }, Layout::Dinp) => &DINP_F16,
        (V::F16 { .. }, Layout::Dweight) => &DWEIGHT_F16,
    }
}

/// The CPU cores (`matmul_cpu.wgsl`, its rows written out by [`unroll`]) of
/// `Cpu16` (`v` 0) and `Cpu32` (1) for `layout`, built once.
fn cpu_kernel(v: usize, layout: Layout) -> &'static Kernel {
    const ROWS: [usize; 2] = [16, 32];
    static NAMES: [[&str; 3]; 2] = [
        [
            "matmul_forward_cpu16",
            "matmul_dinp_cpu16",
            "matmul_dweight_cpu16",
        ],
        [
            "matmul_forward_cpu32",
            "matmul_dinp_cpu32",
            "matmul_dweight_cpu32",
        ],
    ];
    static KERNELS: [[OnceLock<Kernel>; 3]; 2] = [const { [const { OnceLock::new() }; 3] }; 2];
    let (l, prelude) = match layout {
        Layout::Forward => (0, gemm_prelude!("matmul_nt.wgsl")),
        Layout::Dinp => (1, gemm_prelude!("matmul_nn.wgsl")),
        Layout::Dweight => (2, gemm_prelude!("matmul_tn.wgsl")),
    };
    KERNELS[v][l].get_or_init(|| {
        let rows = ROWS[v];
        let core = unroll(include_str!("matmul_cpu.wgsl"), "#R", rows);
        let source = format!("{prelude}const ROWS: u32 = {rows}u;\n{core}");
        Kernel {
            name: NAMES[v][l],
            // Leaked once a kernel a process: kernels are `'static` like the others.
            source: Box::leak(source.into_boxed_str()),
            entry: "main",
            unchecked: UNCHECKED,
        }
    })
}

/// `kernel` with its fusion flags fixed: each `p.flags` of its source becomes the
/// launch's literal, so the shader compiler drops the loads' and the epilogue's
/// branches a launch does not take (tested through the uniform, they slowed the f32
/// core on the H200; BENCHMARKS.md has the figures). The uniform keeps the flags, so
/// the unspecialized source still runs (the tests compile it). One leaked
/// kernel per (kernel, flags) pair a run launches: a handful, each built once.
pub(super) fn specialized(kernel: &'static Kernel, flags: u32) -> &'static Kernel {
    use std::collections::HashMap;
    use std::sync::Mutex;
    type Cache = Mutex<HashMap<(&'static str, u32), &'static Kernel>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let mut cache = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    cache.entry((kernel.name, flags)).or_insert_with(|| {
        let source = kernel.source.replace("p.flags", &format!("{flags}u"));
        Box::leak(Box::new(Kernel {
            name: Box::leak(format!("{}#{flags}", kernel.name).into_boxed_str()),
            source: Box::leak(source.into_boxed_str()),
            ..*kernel
        }))
    })
}

/// Bits of `flags` in the GEMM and reduce uniforms (`matmul_fuse.wgsl`).
pub(super) mod fuse {
    pub const BIAS: u32 = 1;
    pub const GELU_INP: u32 = 2;
    pub const RESIDUAL: u32 = 4;
    pub const DROPOUT: u32 = 8;
    pub const GELU_GRAD: u32 = 16;
}

/// Every GEMM kernel as launched: each variant's kernel for each layout (with
/// `DWEIGHT_BIAS`), unspecialized and specialized to every combination of the
/// flags its layout reads, and the reduce pass's.
pub(super) fn catalog() -> Vec<Kernel> {
    use fuse::*;
    let subsets = |bits: &[u32]| -> Vec<u32> {
        (0..1u32 << bits.len())
            .map(|mask| {
                bits.iter()
                    .enumerate()
                    .filter(|(i, _)| mask & (1 << i) != 0)
                    .fold(0, |f, (_, b)| f | b)
            })
            .collect()
    };
    let mut all = Vec::new();
    let mut with_flags = |kernel: &'static Kernel, flags: &[u32]| {
        all.push(*kernel);
        for &f in flags {
            all.push(*specialized(kernel, f));
        }
    };
    // Split variants launch their unsplit twin's kernels.
    let unsplit = MatmulVariant::ALL
        .iter()
        .chain(&MatmulVariant::F16_ALL)
        .filter(|v| {
            !matches!(
                v,
                MatmulVariant::SplitK
                    | MatmulVariant::Coop { split: true }
                    | MatmulVariant::Coop2 { split: true }
                    | MatmulVariant::F16 { split: true }
            )
        });
    for &variant in unsplit {
        with_flags(
            kernel(variant, Layout::Forward),
            &subsets(&[BIAS, GELU_INP, RESIDUAL, DROPOUT]),
        );
        with_flags(kernel(variant, Layout::Dinp), &subsets(&[GELU_GRAD]));
        with_flags(kernel(variant, Layout::Dweight), &subsets(&[GELU_INP]));
    }
    with_flags(&DWEIGHT_BIAS, &subsets(&[GELU_INP]));
    let mut reduce = subsets(&[BIAS, RESIDUAL, DROPOUT]);
    reduce.push(GELU_GRAD);
    with_flags(&SUM_SPLITS_FUSED, &reduce);
    all.push(COLSUM);
    all
}

#[cfg(test)]
mod tests {
    #[test]
    fn scale_literals_match_grad_scale() {
        for kernel in super::catalog() {
            let f16 = ["_f16", "_coop"].iter().any(|s| kernel.name.contains(s));
            if !f16 {
                continue;
            }
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

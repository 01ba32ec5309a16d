//! The WGSL of each GEMM kernel: a layout prelude (`matmul_nt` / `_nn` /
//! `_tn.wgsl`, with the fusions' helpers in front) joined with a variant's core, and
//! a launch's fusion flags fixed in the source ([`specialized`]). The cores come
//! from four templates: `matmul_tiled.wgsl` (`Tiled`, `Narrow`, `F16`),
//! `matmul_coop.wgsl` (`Coop`, `Coop2`), `matmul_coop3.wgsl` (`Coop3`) and
//! `matmul_cpu.wgsl` (`Cpu16`, `Cpu32`).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use super::operands::Layout;
use super::variant::MatmulVariant;
use crate::gpu::Kernel;
use crate::kernels::wgsl::{select, unroll};

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

/// Every index in these shaders is guarded (or clamped), and each launcher checks
/// its buffers (`check_len`), so they run without wgpu's per-access bounds checks.
const UNCHECKED: bool = true;

/// The gradient operand (A) of the backward GEMMs is multiplied by this power of two
/// before it is rounded to f16 and the sums by its inverse after, so that gradients
/// down to about 1e-8 stay normal f16 numbers; overflow needs |gradient| > 16.
pub const GRAD_SCALE: f32 = 4096.0;

/// The templates of the cores ([`select`]'s tags name each core's lines).
const TILED: &str = include_str!("matmul_tiled.wgsl");
const TILED_TAGS: &[&str] = &["F32", "F16", "WIDE", "NARROW", "SUMS"];
/// `Tiled`'s and `Narrow`'s cores, which also sum A's columns beside dweight
/// (`A_SUMS`, `MatmulVariant::sums_bias`), by their tags.
const TILED_F32: [&str; 3] = ["F32", "WIDE", "SUMS"];
const NARROW_F32: [&str; 3] = ["F32", "NARROW", "SUMS"];
const COOP: &str = include_str!("matmul_coop.wgsl");
const COOP_TAGS: &[&str] = &["C1", "C2"];
/// `Coop3`'s core, its 4 x 4 accumulators written out by [`unroll`] (`#I` the row of
/// 16x16 blocks, `#J` the column).
const COOP3: &str = include_str!("matmul_coop3.wgsl");
/// The CPU adapters' core, its rows written out by [`unroll`].
const CPU: &str = include_str!("matmul_cpu.wgsl");

/// The core of each variant: what its kernels are named, their source before the
/// layout prelude, and their own source after it.
struct Core {
    /// Forward, dinp, dweight.
    names: [&'static str; 3],
    /// Extensions a core needs enabled, first in the module.
    enable: &'static str,
    /// Whether the core rounds its operands to f16 (it reads `A_SCALE`).
    f16: bool,
    /// Whether it reads its operands' interior tiles through the preludes' vec4
    /// views (`#VEC4`: the launcher binds the two operands again after its own).
    views: bool,
    /// Whether its forward and dinp have twins whose weight view is an f16 copy of
    /// the weights ([`kernel_f16_weights`]): the core holds B's loads as `BVec`.
    f16_weights: bool,
    /// The core's own source (with [`Layout`] for what depends on it).
    own: fn(Layout) -> String,
}

const F16_ENABLE: &str = "enable f16;\n";
const COOP_ENABLE: &str = "enable f16;\nenable wgpu_cooperative_matrix;\n";

/// `Tiled`'s core, which can sum A (`SUMS`), for `layout`'s kernel: only
/// matmul_tn_sums.wgsl's kernel sums A, the other preludes say so and the dweight
/// one says no here.
fn summing_core(layout: Layout) -> String {
    format!(
        "{}{}",
        no_sums(layout),
        select(TILED, TILED_TAGS, &TILED_F32)
    )
}

/// `Narrow`'s core, which can sum A too, as [`summing_core`].
fn narrow_core(layout: Layout) -> String {
    format!(
        "{}{}",
        no_sums(layout),
        select(TILED, TILED_TAGS, &NARROW_F32)
    )
}

/// `Coop2`'s core, which can sum A too (its `A_SUMS` lines), for `layout`'s kernel
/// (the dweight one says no here, as in [`summing_core`]).
fn coop2_core(layout: Layout) -> String {
    format!("{}{}", no_sums(layout), select(COOP, COOP_TAGS, &["C2"]))
}

/// What a summing core's dweight kernel is told where it does not sum A (the other
/// preludes say so themselves).
fn no_sums(layout: Layout) -> &'static str {
    match layout {
        Layout::Dweight => {
            "const A_SUMS: bool = false;\nfn write_a_sums(z: u32, j: u32, v: vec4<f32>) {}\n"
        }
        _ => "",
    }
}

/// The cores, in [`core_index`]'s order.
const CORES: [Core; 8] = [
    Core {
        names: [
            "matmul_forward",
            "matmul_backward_dinp",
            "matmul_backward_dweight",
        ],
        enable: "",
        f16: false,
        views: true,
        f16_weights: false,
        own: summing_core,
    },
    Core {
        names: [
            "matmul_forward_narrow",
            "matmul_backward_dinp_narrow",
            "matmul_backward_dweight_narrow",
        ],
        enable: "",
        f16: false,
        views: true,
        f16_weights: false,
        own: narrow_core,
    },
    Core {
        names: [
            "matmul_forward_cpu16",
            "matmul_dinp_cpu16",
            "matmul_dweight_cpu16",
        ],
        enable: "",
        f16: false,
        views: false,
        f16_weights: false,
        own: |_| format!("const ROWS: u32 = 16u;\n{}", unroll(CPU, "#R", 16)),
    },
    Core {
        names: [
            "matmul_forward_cpu32",
            "matmul_dinp_cpu32",
            "matmul_dweight_cpu32",
        ],
        enable: "",
        f16: false,
        views: false,
        f16_weights: false,
        own: |_| format!("const ROWS: u32 = 32u;\n{}", unroll(CPU, "#R", 32)),
    },
    Core {
        names: [
            "matmul_forward_f16",
            "matmul_dinp_f16",
            "matmul_dweight_f16",
        ],
        enable: F16_ENABLE,
        f16: true,
        views: true,
        f16_weights: true,
        own: |_| select(TILED, TILED_TAGS, &["F16", "WIDE"]),
    },
    Core {
        names: [
            "matmul_forward_coop",
            "matmul_dinp_coop",
            "matmul_dweight_coop",
        ],
        enable: COOP_ENABLE,
        f16: true,
        views: false,
        f16_weights: false,
        own: |_| select(COOP, COOP_TAGS, &["C1"]),
    },
    Core {
        names: [
            "matmul_forward_coop2",
            "matmul_dinp_coop2",
            "matmul_dweight_coop2",
        ],
        enable: COOP_ENABLE,
        f16: true,
        views: true,
        f16_weights: true,
        own: coop2_core,
    },
    Core {
        names: [
            "matmul_forward_coop3",
            "matmul_dinp_coop3",
            "matmul_dweight_coop3",
        ],
        enable: COOP_ENABLE,
        f16: true,
        views: true,
        f16_weights: false,
        own: |_| unroll(&unroll(COOP3, "#I", 4), "#J", 4),
    },
];

/// Where `variant`'s core is in [`CORES`] (split variants launch their unsplit
/// twin's kernels).
fn core_index(variant: MatmulVariant) -> usize {
    match variant {
        MatmulVariant::Tiled | MatmulVariant::SplitK => 0,
        MatmulVariant::Narrow => 1,
        MatmulVariant::Cpu16 => 2,
        MatmulVariant::Cpu32 => 3,
        MatmulVariant::F16 { .. } => 4,
        MatmulVariant::Coop { .. } => 5,
        MatmulVariant::Coop2 { .. } => 6,
        MatmulVariant::Coop3 { .. } => 7,
    }
}

/// Without the vec4 views no step takes the unguarded loads: what the cores call
/// in their place, never past `views_whole()`.
const NO_VIEWS: &str = "
fn views_whole() -> bool { return false; }
fn load_a_fast(m0: u32, k0: u32, t: u32) -> vec4<f32> { return vec4<f32>(0.0); }
fn load_b_fast(n0: u32, k0: u32, t: u32) -> BVec { return BVec(0.0); }
";

/// What a prelude reads its operands through.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Views {
    /// The bindings alone (`#VEC4` lines out, [`NO_VIEWS`] in their place).
    None,
    /// Vec4 views of both operands.
    F32,
    /// Vec4 views, B's of an f16 copy of the weights (forward and dinp only).
    F16Weights,
}

/// The layout prelude of `layout`'s product, with what its fusions call in front,
/// reading its operands through `views`, its output and epilogue operands as vec4s
/// where `out4` (`#OUT4` lines and spans, else `#OUT1`). It names the type of B's
/// loads `BVec`: `vec4<f16>` where B's view is an f16 copy, else `vec4<f32>`.
fn prelude(layout: Layout, views: Views, out4: bool) -> String {
    let prelude = match layout {
        Layout::Forward => gemm_prelude!("matmul_nt.wgsl"),
        Layout::Dinp => gemm_prelude!("matmul_nn.wgsl"),
        Layout::Dweight => gemm_prelude!("matmul_tn.wgsl"),
    };
    let b = match views {
        Views::F16Weights => "f16",
        _ => "f32",
    };
    let alias = format!("alias BVec = vec4<{b}>;\n");
    let out = if out4 { "OUT4" } else { "OUT1" };
    match views {
        Views::None => alias + &select(prelude, &["VEC4", "OUT4", "OUT1"], &[out]) + NO_VIEWS,
        _ => alias + &select(prelude, &["VEC4", "OUT4", "OUT1"], &["VEC4", out]),
    }
}

/// Whether `variant`'s kernels bind their two operands a second time, as vec4s,
/// after the launch's own buffers (`Core::views`).
pub(super) fn binds_views(variant: MatmulVariant) -> bool {
    CORES[core_index(variant)].views
}

/// Whether `variant`'s forward and dinp can read an f16 copy of the weights
/// ([`kernel_f16_weights`]).
pub(super) fn reads_f16_weights(variant: MatmulVariant) -> bool {
    CORES[core_index(variant)].f16_weights
}

fn layout_index(layout: Layout) -> usize {
    match layout {
        Layout::Forward => 0,
        Layout::Dinp => 1,
        Layout::Dweight => 2,
    }
}

/// Made once a process and leaked: kernels are `'static` like the others.
fn leak(source: String) -> &'static str {
    Box::leak(source.into_boxed_str())
}

/// The kernel `variant` computes `layout`'s product with, built on first use.
pub(super) fn kernel(variant: MatmulVariant, layout: Layout) -> &'static Kernel {
    static KERNELS: [[OnceLock<Kernel>; 3]; CORES.len()] =
        [const { [const { OnceLock::new() }; 3] }; CORES.len()];
    let (c, l) = (core_index(variant), layout_index(layout));
    let views = if CORES[c].views {
        Views::F32
    } else {
        Views::None
    };
    KERNELS[c][l].get_or_init(|| build(c, layout, views, CORES[c].names[l]))
}

/// `variant`'s kernel of `layout`'s product whose B view (its last binding) is an
/// f16 copy of the weights (`[n, k]` forward, `[k, n]` dinp; `ParamArena`'s halves):
/// for the cores that read one, forward and dinp; else `None`.
pub(super) fn kernel_f16_weights(
    variant: MatmulVariant,
    layout: Layout,
) -> Option<&'static Kernel> {
    static KERNELS: [[OnceLock<Kernel>; 2]; CORES.len()] =
        [const { [const { OnceLock::new() }; 2] }; CORES.len()];
    let c = core_index(variant);
    if !CORES[c].f16_weights || layout == Layout::Dweight {
        return None;
    }
    let l = layout_index(layout);
    Some(KERNELS[c][l].get_or_init(|| {
        let name = leak(format!("{}_w16", CORES[c].names[l]));
        build(c, layout, Views::F16Weights, name)
    }))
}

/// Core `c`'s kernel of `layout`'s product, reading through `views`. Where the core
/// reads views and the layout has an epilogue (forward, dinp), its `OUT4` twin's
/// source is kept for [`specialized`] launches with `fuse::OUT_VEC4`.
fn build(c: usize, layout: Layout, views: Views, name: &'static str) -> Kernel {
    let core = &CORES[c];
    // The forward's A is an activation: no scale (see GRAD_SCALE).
    let scale = match (core.f16, layout) {
        (false, _) => String::new(),
        (true, Layout::Forward) => "const A_SCALE: f32 = 1.0;\n".into(),
        (true, _) => format!("const A_SCALE: f32 = {GRAD_SCALE:.1};\n"),
    };
    let source = |out4| {
        let prelude = prelude(layout, views, out4);
        leak(format!(
            "{}{scale}{prelude}{}",
            core.enable,
            (core.own)(layout)
        ))
    };
    if views != Views::None && layout != Layout::Dweight {
        vec4_out_sources().insert(name, source(true));
    }
    Kernel {
        name,
        source: source(false),
        entry: "main",
        unchecked: UNCHECKED,
    }
}

/// The `OUT4` twins' sources by kernel name ([`build`]).
fn vec4_out_sources() -> std::sync::MutexGuard<'static, HashMap<&'static str, &'static str>> {
    static SOURCES: OnceLock<Mutex<HashMap<&'static str, &'static str>>> = OnceLock::new();
    SOURCES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Whether `kernel` has an `OUT4` twin: launches of it may add `fuse::OUT_VEC4`.
pub(super) fn writes_vec4(kernel: &Kernel) -> bool {
    vec4_out_sources().contains_key(kernel.name)
}

/// The dweight of `variant` that also sums dbias's partials
/// (`MatmulVariant::sums_bias`): matmul_tn_sums.wgsl between the prelude and the
/// core. Each reads its operands' vec4 views at 4 and 5 and binds dbias's partials
/// at 6.
pub(super) fn dweight_bias(variant: MatmulVariant) -> &'static Kernel {
    static TILED_KERNEL: OnceLock<Kernel> = OnceLock::new();
    static NARROW_KERNEL: OnceLock<Kernel> = OnceLock::new();
    static COOP2_KERNEL: OnceLock<Kernel> = OnceLock::new();
    const SUMS: &str = include_str!("matmul_tn_sums.wgsl");
    let sums_at_6 = || {
        let sums = SUMS.replace("@binding(4)", "@binding(6)");
        assert_ne!(sums, SUMS, "matmul_tn_sums.wgsl binds its partials at 4");
        sums
    };
    match variant {
        MatmulVariant::Tiled | MatmulVariant::SplitK => TILED_KERNEL.get_or_init(|| {
            let core = select(TILED, TILED_TAGS, &TILED_F32);
            Kernel {
                name: "matmul_backward_dweight_bias",
                source: leak(format!(
                    "{}{}{core}",
                    prelude(Layout::Dweight, Views::F32, false),
                    sums_at_6()
                )),
                entry: "main",
                unchecked: UNCHECKED,
            }
        }),
        MatmulVariant::Narrow => NARROW_KERNEL.get_or_init(|| {
            let core = select(TILED, TILED_TAGS, &NARROW_F32);
            Kernel {
                name: "matmul_backward_dweight_narrow_bias",
                source: leak(format!(
                    "{}{}{core}",
                    prelude(Layout::Dweight, Views::F32, false),
                    sums_at_6()
                )),
                entry: "main",
                unchecked: UNCHECKED,
            }
        }),
        MatmulVariant::Coop2 { .. } => COOP2_KERNEL.get_or_init(|| {
            let sums = sums_at_6();
            Kernel {
                name: "matmul_dweight_coop2_bias",
                source: leak(format!(
                    "{COOP_ENABLE}const A_SCALE: f32 = {GRAD_SCALE:.1};\n{}{sums}{}",
                    prelude(Layout::Dweight, Views::F32, false),
                    select(COOP, COOP_TAGS, &["C2"])
                )),
                entry: "main",
                unchecked: UNCHECKED,
            }
        }),
        _ => panic!("{} sums no dbias beside dweight", variant.name()),
    }
}

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

/// `kernel` with its fusion flags fixed: each `p.flags` of its source becomes the
/// launch's literal, so the shader compiler drops the loads' and the epilogue's
/// branches a launch does not take (tested through the uniform, they slowed the f32
/// core on the H200; BENCHMARKS.md has the figures). The uniform keeps the flags, so
/// the unspecialized source still runs (the tests compile it). With
/// `fuse::OUT_VEC4` the source is the kernel's `OUT4` twin. One leaked
/// kernel per (kernel, flags) pair a run launches: a handful, each built once.
pub(super) fn specialized(kernel: &'static Kernel, flags: u32) -> &'static Kernel {
    type Cache = Mutex<HashMap<(&'static str, u32), &'static Kernel>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let mut cache = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    cache.entry((kernel.name, flags)).or_insert_with(|| {
        let source = if flags & fuse::OUT_VEC4 == 0 {
            kernel.source
        } else {
            let twin = vec4_out_sources().get(kernel.name).copied();
            twin.unwrap_or_else(|| panic!("{} has no OUT4 twin", kernel.name))
        };
        let source = source.replace("p.flags", &format!("{flags}u"));
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
    /// Every tile and step inside the product, the vec4 views bound
    /// (`MatmulVariant::whole_tiles`).
    pub const WHOLE_TILES: u32 = 32;
    /// The output's width a multiple of 4 and every buffer bound whole: the source
    /// is the kernel's `OUT4` twin, 4 columns one vec4 (`source::writes_vec4`).
    pub const OUT_VEC4: u32 = 64;
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
    let every = MatmulVariant::ALL.iter().chain(&MatmulVariant::F16_ALL);
    let unsplit = every.filter(|v| !v.is_split());
    for &variant in unsplit {
        // The tiled cores read WHOLE_TILES too; forward and dinp kernels with an
        // OUT4 twin launch it with OUT_VEC4.
        let whole: &[u32] = if variant.has_whole_tiles() {
            &[WHOLE_TILES]
        } else {
            &[]
        };
        let with = |kernel: &Kernel, bits: &[u32]| {
            let out4: &[u32] = if writes_vec4(kernel) {
                &[OUT_VEC4]
            } else {
                &[]
            };
            subsets(&[bits, whole, out4].concat())
        };
        let forward = kernel(variant, Layout::Forward);
        with_flags(
            forward,
            &with(forward, &[BIAS, GELU_INP, RESIDUAL, DROPOUT]),
        );
        let dinp = kernel(variant, Layout::Dinp);
        with_flags(dinp, &with(dinp, &[GELU_GRAD]));
        let dweight = kernel(variant, Layout::Dweight);
        with_flags(dweight, &with(dweight, &[GELU_INP]));
        if let Some(k) = kernel_f16_weights(variant, Layout::Forward) {
            with_flags(k, &with(k, &[BIAS, GELU_INP, RESIDUAL, DROPOUT]));
        }
        if let Some(k) = kernel_f16_weights(variant, Layout::Dinp) {
            with_flags(k, &with(k, &[GELU_GRAD]));
        }
    }
    for variant in [
        MatmulVariant::Tiled,
        MatmulVariant::Narrow,
        MatmulVariant::Coop2 { split: false },
    ] {
        with_flags(dweight_bias(variant), &subsets(&[GELU_INP, WHOLE_TILES]));
    }
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

//! Matrix products of a `Linear` layer, forward and backward, as GEMMs in one of
//! several variants ([`MatmulVariant`]): a core (`matmul.wgsl`, `matmul_narrow.wgsl`,
//! `matmul_cpu.wgsl`) after one prelude per operand layout (`matmul_nt` / `_nn` /
//! `_tn.wgsl`), and for split reductions the fixed-order sums of `matmul_reduce.wgsl`.

use std::sync::OnceLock;

use super::matmul_coop;
use super::split_sums::{finish_grads, sum_splits, GradDest, Partials, SplitSums, WeightGrad};
use super::target::Target;
use super::unroll;
use crate::config::Precision;
use crate::gpu::{grid_1d, Kernel, PooledBuffer, Slice, WgpuContext};
use crate::reference::{dropout_mask_params, DropoutMask};

/// Output tile of one workgroup of the tiled variant (square) and its step along
/// the reduction.
const TILE: usize = 128;
/// Rows of the `Narrow` variant's tiles (its columns are `TILE`).
const NARROW_ROWS: usize = 64;
const BK: usize = 8;
/// Output columns of one workgroup of the CPU variants (8 lanes, 8 columns each);
/// its rows are the variant's (`MatmulVariant::cpu_rows`).
const CPU_COLS: usize = 64;
/// Workgroups to aim for when a reduction is split (dweight, dbias): several waves
/// of a large GPU (an H200 holds about 264 of these at once), so that few output
/// tiles still fill it and the last wave's idle share stays small.
const TARGET_WORKGROUPS: usize = 1024;
/// The same for CPU adapters, whose workgroups of 32 rows x 64 columns are large: a
/// weight gradient's rows are split only when its output has fewer than this many,
/// since each split costs a pass that adds the partial outputs.
const CPU_TARGET_WORKGROUPS: usize = 4;
/// Fewest reduction steps (rows) one split of dweight / dbias takes on a GPU: below
/// that the extra partials cost more than the parallelism gains. On the H200 64 beat
/// 256 (the page's presets 12-17% faster natively and through Dawn), 128 and 32
/// (BENCHMARKS.md, round six); the shakespeare step splits by TARGET_WORKGROUPS first
/// and does not change.
const MIN_SPLIT: usize = 64;
/// The same on CPU adapters, where a split's partials cost a pass over memory.
const CPU_MIN_SPLIT: usize = 256;
/// The same for the split-K forward and dinp, whose partials are whole outputs.
const MIN_SPLIT_K: usize = 128;

/// How a GEMM is computed. Every variant gives the same results up to f32 rounding
/// (each is checked against the CPU reference by the op-parity tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MatmulVariant {
    /// 128x128 output tiles staged through workgroup memory by 256 threads, 8x8 a
    /// thread: for GPUs.
    Tiled,
    /// The tiled kernel with the reduction (k) split over several workgroups a
    /// tile, whose partial outputs are then added in a fixed order (plus the bias):
    /// for outputs too narrow to fill a GPU with 128x128 tiles (n = 384 and 65 at
    /// 16k rows). dweight is split over rows in every variant, so here it equals
    /// `Tiled`.
    SplitK,
    /// The tiled kernel on 64x128 output tiles (`matmul_narrow.wgsl`), 4x8 a thread:
    /// twice the workgroups of `Tiled` and fewer registers each, for reductions too
    /// short to split (the head's dinp, k = 65), where each workgroup's set-up and
    /// stores weigh more than its products. Split like `Tiled` (dweight over rows,
    /// nothing else).
    Narrow,
    /// No workgroup memory and no barriers, 16 rows x 8 columns a lane (workgroups of
    /// 16 x 64 outputs): for CPU adapters in the browser (SwiftShader in Chromium).
    Cpu16,
    /// The same with 32 rows a lane: for CPU adapters natively (lavapipe), where the
    /// lanes' gathered loads of B serve twice the rows. Faster on lavapipe, slower
    /// on SwiftShader (BENCHMARKS.md, round five).
    Cpu32,
    /// `--precision f16` on tensor cores (`matmul_coop.rs`): operands rounded to
    /// f16, sums in f32; `split` as in `SplitK`.
    Coop { split: bool },
    /// The same on `matmul_coop2.wgsl` (deeper k steps, unguarded interior loads).
    Coop2 { split: bool },
    /// `--precision f16` without tensor cores: the same rounding, `Tiled`'s tiling.
    F16 { split: bool },
}

impl MatmulVariant {
    /// The f32 variants.
    pub const ALL: [MatmulVariant; 5] = [
        MatmulVariant::Tiled,
        MatmulVariant::SplitK,
        MatmulVariant::Narrow,
        MatmulVariant::Cpu16,
        MatmulVariant::Cpu32,
    ];
    /// The f16 variants (tests/matmul_f16.rs).
    pub const F16_ALL: [MatmulVariant; 6] = [
        MatmulVariant::F16 { split: false },
        MatmulVariant::F16 { split: true },
        MatmulVariant::Coop { split: false },
        MatmulVariant::Coop { split: true },
        MatmulVariant::Coop2 { split: false },
        MatmulVariant::Coop2 { split: true },
    ];

    /// Whether this variant runs on tensor cores.
    pub fn is_coop(self) -> bool {
        matches!(
            self,
            MatmulVariant::Coop { .. } | MatmulVariant::Coop2 { .. }
        )
    }

    /// Whether a context made for this variant's precision runs it, or why not: the
    /// tensor-core variants need what [`matmul_coop::coop_supported`] and
    /// [`matmul_coop::coop2_supported`] check.
    pub fn runs_on(self, ctx: &WgpuContext) -> Result<(), String> {
        match self {
            MatmulVariant::Coop { .. } => matmul_coop::coop_supported(ctx),
            MatmulVariant::Coop2 { .. } => matmul_coop::coop2_supported(ctx),
            _ => Ok(()),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            MatmulVariant::Tiled => "tiled",
            MatmulVariant::SplitK => "splitk",
            MatmulVariant::Narrow => "narrow",
            MatmulVariant::Cpu16 => "cpu16",
            MatmulVariant::Cpu32 => "cpu32",
            MatmulVariant::Coop { split: false } => "coop",
            MatmulVariant::Coop { split: true } => "coop-splitk",
            MatmulVariant::Coop2 { split: false } => "coop2",
            MatmulVariant::Coop2 { split: true } => "coop2-splitk",
            MatmulVariant::F16 { split: false } => "f16",
            MatmulVariant::F16 { split: true } => "f16-splitk",
        }
    }

    /// The variant the launchers use on `ctx` for an `m x n` output reduced over
    /// `k`: on GPUs, split-K when the output has very few 128x128 tiles (the weight
    /// gradients: a long reduction over every row), or few tiles and a reduction long
    /// both absolutely and against the output's width. Shorter reductions lose more
    /// to the extra reduce pass than they gain (the H200 table in BENCHMARKS.md).
    /// Reductions too short to split over a wave of tiles or more take `Narrow`.
    /// Under `--precision f16`, an f16 variant split the same way.
    pub fn choose(ctx: &WgpuContext, m: usize, n: usize, k: usize) -> MatmulVariant {
        let f32_variant = Self::choose_f32(ctx, m, n, k);
        match ctx.precision() {
            Precision::F32 => f32_variant,
            Precision::F16 => matmul_coop::choose(ctx, f32_variant == MatmulVariant::SplitK),
        }
    }

    fn choose_f32(ctx: &WgpuContext, m: usize, n: usize, k: usize) -> MatmulVariant {
        match Target::of(ctx) {
            // CPU adapters in a browser: SwiftShader in Chromium.
            Target::Cpu if cfg!(target_arch = "wasm32") => MatmulVariant::Cpu16,
            Target::Cpu => MatmulVariant::Cpu32,
            Target::Gpu => Self::choose_gpu(m, n, k),
        }
    }

    /// [`MatmulVariant::choose`]'s f32 choice on GPUs.
    fn choose_gpu(m: usize, n: usize, k: usize) -> MatmulVariant {
        let tiles = m.div_ceil(TILE) * n.div_ceil(TILE);
        let few_tiles = tiles < TARGET_WORKGROUPS / 16 && k >= 2 * MIN_SPLIT_K;
        let long_k = tiles < TARGET_WORKGROUPS / 2 && k >= 1024 && k >= 4 * n;
        // The head's dinp (k = 65, 384 tiles): faster in Narrow's smaller tiles on
        // the H200; at k >= 384 Narrow was slower.
        let short_k = k < MIN_SPLIT_K && tiles >= TARGET_WORKGROUPS / 4;
        if few_tiles || long_k {
            MatmulVariant::SplitK
        } else if short_k {
            MatmulVariant::Narrow
        } else {
            MatmulVariant::Tiled
        }
    }

    /// Workgroups for an `m x n` output in `splits` slices.
    fn grid(self, m: usize, n: usize, splits: usize) -> [u32; 3] {
        let (rows, cols) = match (self, self.cpu_rows()) {
            (_, Some(rows)) => (rows, CPU_COLS),
            (MatmulVariant::Narrow, None) => (NARROW_ROWS, TILE),
            (_, None) => (TILE, TILE),
        };
        let groups = [n.div_ceil(cols), m.div_ceil(rows), splits];
        groups.map(|g| {
            assert!(
                g <= 65535,
                "a {m}x{n} matmul needs {g} workgroups along one axis (at most 65535)"
            );
            g as u32
        })
    }

    /// Whether the core applies a GELU prologue as it loads. The CPU core reloads each
    /// element of A for every 8 output columns (and of B for every 8 rows), so there a
    /// GELU on load would cost several times the product: it reads GELU's output from
    /// a transient buffer instead (made just before, dropped just after).
    fn gelu_on_load(self) -> bool {
        !self.is_cpu()
    }

    /// Whether this variant's dweight core also sums dout's columns, giving dbias
    /// (`DWEIGHT_BIAS`, matmul_tn_sums.wgsl): matmul.wgsl's, that of `Tiled` and
    /// `SplitK`.
    fn sums_bias(self) -> bool {
        matches!(self, MatmulVariant::Tiled | MatmulVariant::SplitK)
    }

    /// Whether this is one of the CPU adapters' cores.
    pub fn is_cpu(self) -> bool {
        self.cpu_rows().is_some()
    }

    /// Rows of a CPU core's workgroup (and of each lane's block).
    fn cpu_rows(self) -> Option<usize> {
        match self {
            MatmulVariant::Cpu16 => Some(16),
            MatmulVariant::Cpu32 => Some(32),
            _ => None,
        }
    }

    /// Workgroups to aim for when the reduction is split.
    fn target_workgroups(self) -> usize {
        match self {
            MatmulVariant::Cpu16 | MatmulVariant::Cpu32 => CPU_TARGET_WORKGROUPS,
            _ => TARGET_WORKGROUPS,
        }
    }

    /// Fewest rows a split of a weight gradient takes.
    fn min_split(self) -> usize {
        match self {
            MatmulVariant::Cpu16 | MatmulVariant::Cpu32 => CPU_MIN_SPLIT,
            _ => MIN_SPLIT,
        }
    }

    fn kernel(self, layout: Layout) -> &'static Kernel {
        match (self, layout) {
            (MatmulVariant::Tiled | MatmulVariant::SplitK, Layout::Forward) => &FORWARD,
            (MatmulVariant::Tiled | MatmulVariant::SplitK, Layout::Dinp) => &DINP,
            (MatmulVariant::Tiled | MatmulVariant::SplitK, Layout::Dweight) => &DWEIGHT,
            (MatmulVariant::Narrow, Layout::Forward) => &FORWARD_NARROW,
            (MatmulVariant::Narrow, Layout::Dinp) => &DINP_NARROW,
            (MatmulVariant::Narrow, Layout::Dweight) => &DWEIGHT_NARROW,
            (MatmulVariant::Cpu16, _) => cpu_kernel(0, layout),
            (MatmulVariant::Cpu32, _) => cpu_kernel(1, layout),
            (
                MatmulVariant::Coop { .. }
                | MatmulVariant::Coop2 { .. }
                | MatmulVariant::F16 { .. },
                _,
            ) => matmul_coop::kernel(self, layout),
        }
    }

    /// (chunk, splits) of an `m x n` output's reduction over `k`: one split except
    /// in `SplitK`.
    fn k_splits(self, m: usize, n: usize, k: usize) -> (usize, usize) {
        let splits = matches!(
            self,
            MatmulVariant::SplitK
                | MatmulVariant::Coop { split: true }
                | MatmulVariant::Coop2 { split: true }
                | MatmulVariant::F16 { split: true }
        );
        if !splits {
            return (k, 1);
        }
        let [gx, gy, _] = self.grid(m, n, 1);
        let want = TARGET_WORKGROUPS.div_ceil((gx * gy) as usize);
        split(k, want, BK, MIN_SPLIT_K)
    }
}

/// The three products, by their operand layouts (one prelude each).
#[derive(Clone, Copy)]
pub(super) enum Layout {
    /// `A·Bᵀ` (`matmul_nt.wgsl`).
    Forward,
    /// `A·B` (`matmul_nn.wgsl`).
    Dinp,
    /// `Aᵀ·B` (`matmul_tn.wgsl`).
    Dweight,
}

/// A GEMM prelude with what its fusions call joined in front (the dropout hash, GELU,
/// and the flags of `matmul_fuse.wgsl`): every core is joined after one of these.
macro_rules! gemm_prelude {
    ($prelude:literal) => {
        concat!(
            include_str!("hash.wgsl"),
            include_str!("gelu.wgsl"),
            include_str!("matmul_fuse.wgsl"),
            include_str!($prelude)
        )
    };
}
pub(super) use gemm_prelude;

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

/// `kernel` with its fusion flags fixed: each `p.flags` of its source becomes the
/// launch's literal, so the shader compiler drops the loads' and the epilogue's
/// branches a launch does not take (tested through the uniform, they slowed the f32
/// core on the H200; BENCHMARKS.md has the figures). The uniform keeps the flags, so
/// the unspecialized source still runs as before (the tests compile it). One leaked
/// kernel per (kernel, flags) pair a run launches: a handful, each built once.
pub(crate) fn specialized(kernel: &'static Kernel, flags: u32) -> &'static Kernel {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
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

/// `matmul_reduce.wgsl` with the fusions' helpers (its fused sum applies epilogues).
const REDUCE_SOURCE: &str = gemm_prelude!("matmul_reduce.wgsl");

/// Every index in these shaders is guarded (or clamped), and each launcher checks
/// its buffers (`check_len`), so they run without wgpu's per-access bounds checks.
const UNCHECKED: bool = true;

const FORWARD: Kernel = gemm_kernel!("matmul_forward", "matmul_nt.wgsl", "matmul.wgsl");
const DINP: Kernel = gemm_kernel!("matmul_backward_dinp", "matmul_nn.wgsl", "matmul.wgsl");
const DWEIGHT: Kernel = gemm_kernel!(
    "matmul_backward_dweight",
    "matmul_tn.wgsl",
    "const A_SUMS: bool = false;\nfn write_a_sums(z: u32, j: u32, v: vec4<f32>) {}\n",
    "matmul.wgsl"
);
/// [`DWEIGHT`] that also sums dbias's partials (`MatmulVariant::sums_bias`).
const DWEIGHT_BIAS: Kernel = Kernel {
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
const SUM_SPLITS_FUSED: Kernel = Kernel {
    name: "matmul_sum_splits_fused",
    source: REDUCE_SOURCE,
    entry: "sum_splits_fused",
    unchecked: UNCHECKED,
};
const COLSUM: Kernel = Kernel {
    name: "matmul_colsum",
    source: REDUCE_SOURCE,
    entry: "colsum_part",
    unchecked: UNCHECKED,
};

/// Bits of `flags` in the GEMM and reduce uniforms (`matmul_fuse.wgsl`).
mod fuse {
    pub const BIAS: u32 = 1;
    pub const GELU_INP: u32 = 2;
    pub const RESIDUAL: u32 = 4;
    pub const DROPOUT: u32 = 8;
    pub const GELU_GRAD: u32 = 16;
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct GemmParams {
    m: u32,
    n: u32,
    k: u32,
    k_chunk: u32,
    flags: u32,
    /// The dropout mask of a fused residual branch (`fuse::DROPOUT`).
    seed: u32,
    threshold: u32,
    scale: f32,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct ReduceParams {
    len: u32,
    splits: u32,
    rows: u32,
    row_chunk: u32,
    flags: u32,
    seed: u32,
    threshold: u32,
    scale: f32,
}

impl GemmParams {
    fn new(m: usize, n: usize, k: usize, chunk: usize, flags: u32) -> Self {
        GemmParams {
            m: u32_of(m, "m"),
            n: u32_of(n, "n"),
            k: u32_of(k, "k"),
            k_chunk: u32_of(chunk, "chunk"),
            flags,
            seed: 0,
            threshold: 0,
            scale: 1.0,
        }
    }
}

fn u32_of(x: usize, what: &str) -> u32 {
    u32::try_from(x).unwrap_or_else(|_| panic!("{what} = {x} does not fit in u32"))
}

/// Panics unless `buffer` holds `floats` f32s: the unchecked shaders rely on it.
#[track_caller]
fn check_len<'a>(buffer: impl Into<Slice<'a>>, floats: usize, what: &str) {
    let bytes = buffer.into().size();
    assert!(
        bytes >= floats as u64 * 4,
        "{what}: a {bytes}-byte binding for {floats} floats"
    );
}

/// Splits a reduction of `len` steps over about `want` workgroups, each split at
/// least `min` steps: (chunk, splits), the chunk a multiple of `align`, every split
/// non-empty.
fn split(len: usize, want: usize, align: usize, min: usize) -> (usize, usize) {
    let splits = want.clamp(1, len.div_ceil(min).max(1));
    let chunk = len.div_ceil(splits).div_ceil(align) * align;
    (chunk, len.div_ceil(chunk))
}

/// Elementwise work fused into a forward GEMM's loads and stores (none by default):
/// `out = resid + dropout(act(inp) · weightᵀ + bias)`.
#[derive(Clone, Copy, Default)]
pub struct ForwardFusion<'a> {
    /// `inp` goes through GELU as it is loaded: the MLP's c_proj reads c_fc's
    /// pre-GELU output, so GELU's output is never written.
    pub gelu_inp: bool,
    /// Inverted dropout on the product plus bias, element `r * n + j` of the mask
    /// (the same as `reference::dropout` of that output).
    pub dropout: Option<DropoutMask>,
    /// Added last (`[rows, n]`): a residual branch's end, so neither the branch's
    /// output nor its dropped copy is written.
    pub residual: Option<&'a PooledBuffer>,
}

impl ForwardFusion<'_> {
    /// The epilogue's flags, dropout parameters in `params`.
    fn epilogue(&self, bias: bool, params: &mut (u32, u32, f32)) -> u32 {
        let mut flags = if bias { fuse::BIAS } else { 0 };
        if let Some(mask) = self.dropout {
            let (threshold, scale) = dropout_mask_params(mask.p);
            *params = (mask.seed, threshold, scale);
            flags |= fuse::DROPOUT;
        }
        if self.residual.is_some() {
            flags |= fuse::RESIDUAL;
        }
        flags
    }
}

/// `out[r, j] = sum_i inp[r, i] * weight[j, i] + bias[j]`, PyTorch `Linear` layout:
/// `inp` `[rows, k]`, `weight` `[n, k]`, `bias` `[n]`; returns `out` `[rows, n]`.
pub fn matmul_forward<'w>(
    ctx: &WgpuContext,
    inp: &PooledBuffer,
    weight: impl Into<Slice<'w>>,
    bias: Option<Slice<'_>>,
    rows: usize,
    k: usize,
    n: usize,
) -> PooledBuffer {
    matmul_forward_fused(ctx, inp, weight, bias, rows, k, n, ForwardFusion::default())
}

/// [`matmul_forward`] with `fusion` (see [`ForwardFusion`]).
#[allow(clippy::too_many_arguments)]
pub fn matmul_forward_fused<'w>(
    ctx: &WgpuContext,
    inp: &PooledBuffer,
    weight: impl Into<Slice<'w>>,
    bias: Option<Slice<'_>>,
    rows: usize,
    k: usize,
    n: usize,
    fusion: ForwardFusion,
) -> PooledBuffer {
    let variant = MatmulVariant::choose(ctx, rows, n, k);
    matmul_forward_fused_variant(ctx, variant, inp, weight, bias, rows, k, n, fusion)
}

/// [`matmul_forward`] computed by `variant`.
#[allow(clippy::too_many_arguments)]
pub fn matmul_forward_variant<'w>(
    ctx: &WgpuContext,
    variant: MatmulVariant,
    inp: &PooledBuffer,
    weight: impl Into<Slice<'w>>,
    bias: Option<Slice<'_>>,
    rows: usize,
    k: usize,
    n: usize,
) -> PooledBuffer {
    let plain = ForwardFusion::default();
    matmul_forward_fused_variant(ctx, variant, inp, weight, bias, rows, k, n, plain)
}

/// [`matmul_forward_fused`] computed by `variant`. Split over k, the partials are
/// plain products (the prologue applies per loaded element, so in every split) and
/// the epilogue runs once, on their sum, in the reduce pass.
#[allow(clippy::too_many_arguments)]
pub fn matmul_forward_fused_variant<'w>(
    ctx: &WgpuContext,
    variant: MatmulVariant,
    inp: &PooledBuffer,
    weight: impl Into<Slice<'w>>,
    bias: Option<Slice<'_>>,
    rows: usize,
    k: usize,
    n: usize,
    fusion: ForwardFusion,
) -> PooledBuffer {
    assert!(
        rows > 0 && k > 0 && n > 0,
        "matmul_forward of an empty matrix"
    );
    let weight = weight.into();
    check_len(inp, rows * k, "matmul_forward inp");
    check_len(weight, n * k, "matmul_forward weight");
    if let Some(bias) = bias {
        check_len(bias, n, "matmul_forward bias");
    }
    if let Some(resid) = fusion.residual {
        check_len(resid, rows * n, "matmul_forward residual");
    }
    let (act, prologue) = gelu_operand(ctx, variant, inp, rows * k, fusion.gelu_inp);
    let inp = act.as_ref().unwrap_or(inp);
    let mut mask = (0, 0, 1.0);
    let epilogue = fusion.epilogue(bias.is_some(), &mut mask);
    let (seed, threshold, scale) = mask;
    let out = ctx.create_pooled(rows * n * 4);
    let (chunk, splits) = variant.k_splits(rows, n, k);
    let kernel = variant.kernel(Layout::Forward);
    let groups = variant.grid(rows, n, splits);
    // Bindings a launch does not use still need a buffer; the shader never reads it.
    let bias_or_any = bias.unwrap_or(inp.into());
    let resid_or_any = fusion.residual.unwrap_or(inp);
    if splits == 1 {
        let params = GemmParams {
            seed,
            threshold,
            scale,
            ..GemmParams::new(rows, n, k, chunk, prologue | epilogue)
        };
        let bound = [
            inp.into(),
            weight,
            bias_or_any,
            (&out).into(),
            resid_or_any.into(),
        ];
        ctx.dispatch_slices(specialized(kernel, params.flags), &params, &bound, groups);
    } else {
        let params = GemmParams::new(rows, n, k, chunk, prologue);
        let part = ctx.create_pooled(splits * rows * n * 4);
        let bound = [
            inp.into(),
            weight,
            bias_or_any,
            (&part).into(),
            resid_or_any.into(),
        ];
        ctx.dispatch_slices(specialized(kernel, params.flags), &params, &bound, groups);
        let reduce = ReduceParams {
            row_chunk: u32_of(n, "n"),
            seed,
            threshold,
            scale,
            ..ReduceParams::new(rows * n, splits, epilogue)
        };
        if epilogue == 0 {
            sum_splits(ctx, (&part).into(), (&out).into(), rows * n, splits);
        } else {
            sum_splits_fused(
                ctx,
                &reduce,
                &part,
                &out,
                [bias_or_any, (&part).into(), resid_or_any.into()],
            );
        }
    }
    out
}

/// Gradients of [`matmul_forward`] from `dout` `[rows, n]`: `dinp` `[rows, k]`,
/// `dweight` `[n, k]` and, `with_bias`, `dbias` `[n]`. The weight gradients reduce
/// over all rows in parallel splits whose partial sums are then added in a fixed
/// order: no atomics, the same bits every run.
#[allow(clippy::too_many_arguments)]
pub fn matmul_backward<'w>(
    ctx: &WgpuContext,
    dout: &PooledBuffer,
    inp: &PooledBuffer,
    weight: impl Into<Slice<'w>>,
    rows: usize,
    k: usize,
    n: usize,
    with_bias: bool,
) -> (PooledBuffer, PooledBuffer, Option<PooledBuffer>) {
    matmul_backward_fused(ctx, dout, inp, weight, rows, k, n, with_bias, false)
}

/// [`matmul_backward`] of a forward that fused `gelu_inp` ([`ForwardFusion`]):
/// `dweight` reads GELU of `inp` as it loads it, and `dinp` is the gradient of the
/// GELU's input (times gelu'(inp) in its epilogue).
#[allow(clippy::too_many_arguments)]
pub fn matmul_backward_fused<'w>(
    ctx: &WgpuContext,
    dout: &PooledBuffer,
    inp: &PooledBuffer,
    weight: impl Into<Slice<'w>>,
    rows: usize,
    k: usize,
    n: usize,
    with_bias: bool,
    gelu_inp: bool,
) -> (PooledBuffer, PooledBuffer, Option<PooledBuffer>) {
    matmul_backward_deferred(
        ctx, dout, inp, weight, rows, k, n, with_bias, gelu_inp, None,
    )
}

/// [`matmul_backward_fused`] with its weight gradients' split partials left in
/// `sums` (when given and under its cap), to be added by [`SplitSums::finish`]
/// together with the other layers'.
#[allow(clippy::too_many_arguments)]
pub fn matmul_backward_deferred<'w>(
    ctx: &WgpuContext,
    dout: &PooledBuffer,
    inp: &PooledBuffer,
    weight: impl Into<Slice<'w>>,
    rows: usize,
    k: usize,
    n: usize,
    with_bias: bool,
    gelu_inp: bool,
    sums: Option<&mut SplitSums>,
) -> (PooledBuffer, PooledBuffer, Option<PooledBuffer>) {
    let shape = (rows, k, n, gelu_inp);
    let bias = with_bias.then_some(None);
    let (dinp, dweight, dbias) =
        matmul_backward_into(ctx, dout, inp, weight, shape, None, bias, sums);
    (
        dinp,
        dweight.into_buffer(),
        dbias.map(WeightGrad::into_buffer),
    )
}

/// [`matmul_backward_deferred`] with the weight gradient written into `dweight`
/// and the bias gradient (with `bias`: `Some`, with or without a destination) into
/// its destination, where given (the trainer's [`crate::kernels::GradArena`]).
/// `shape`: (rows, k, n, gelu_inp).
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul_backward_into<'w>(
    ctx: &WgpuContext,
    dout: &PooledBuffer,
    inp: &PooledBuffer,
    weight: impl Into<Slice<'w>>,
    (rows, k, n, gelu_inp): (usize, usize, usize, bool),
    dweight: Option<GradDest>,
    bias: Option<Option<GradDest>>,
    sums: Option<&mut SplitSums>,
) -> (PooledBuffer, WeightGrad, Option<WeightGrad>) {
    let gelu_of = gelu_inp.then_some(inp);
    let variant = MatmulVariant::choose(ctx, rows, k, n);
    let dinp = matmul_dinp_fused_variant(ctx, variant, dout, weight, rows, k, n, gelu_of);
    let variant = MatmulVariant::choose(ctx, n, k, rows);
    let (dweight, fused_bias) = dweight_partials(
        ctx,
        variant,
        dout,
        inp,
        (rows, k, n, gelu_inp),
        dweight,
        bias,
    );
    let dbias = bias.map(|dest| {
        fused_bias.unwrap_or_else(|| dbias_partials(ctx, variant, dout, rows, n, dest))
    });
    let (dweight, dbias) = SplitSums::defer_or_finish(sums, ctx, dweight, dbias);
    (dinp, dweight, dbias)
}

/// How many partials the weight gradients of a product with `rows` rows of `k`
/// inputs and `n` outputs are split into on `ctx`: (dweight's, dbias's).
pub(crate) fn weight_grad_splits(
    ctx: &WgpuContext,
    rows: usize,
    k: usize,
    n: usize,
) -> (usize, usize) {
    let variant = MatmulVariant::choose(ctx, n, k, rows);
    let dweight = dweight_split(variant, rows, k, n).1;
    let dbias = if variant.sums_bias() {
        dweight
    } else {
        dbias_split(variant, rows, n).1
    };
    (dweight, dbias)
}

/// The weight gradient of [`matmul_backward`] and, `with_bias`, the bias gradient,
/// computed by `variant` (for tests that pin one): in the GEMM's own pass where the
/// variant's core sums dout as it loads it (`Tiled` and `SplitK`), else by a pass of
/// its own.
#[allow(clippy::too_many_arguments)]
pub fn matmul_weight_grads_variant(
    ctx: &WgpuContext,
    variant: MatmulVariant,
    dout: &PooledBuffer,
    inp: &PooledBuffer,
    rows: usize,
    k: usize,
    n: usize,
    with_bias: bool,
) -> (PooledBuffer, Option<PooledBuffer>) {
    assert!(
        rows > 0 && k > 0 && n > 0,
        "matmul_dweight of an empty matrix"
    );
    weight_grads(ctx, variant, dout, inp, rows, k, n, false, with_bias)
}

/// dweight and, `with_bias`, dbias: both sums of partials in one dispatch where both
/// were split.
#[allow(clippy::too_many_arguments)]
fn weight_grads(
    ctx: &WgpuContext,
    variant: MatmulVariant,
    dout: &PooledBuffer,
    inp: &PooledBuffer,
    rows: usize,
    k: usize,
    n: usize,
    gelu_inp: bool,
    with_bias: bool,
) -> (PooledBuffer, Option<PooledBuffer>) {
    let bias = with_bias.then_some(None);
    let (dweight, fused_bias) =
        dweight_partials(ctx, variant, dout, inp, (rows, k, n, gelu_inp), None, bias);
    let dbias = with_bias
        .then(|| fused_bias.unwrap_or_else(|| dbias_partials(ctx, variant, dout, rows, n, None)));
    let (dweight, dbias) = finish_grads(ctx, dweight, dbias);
    (dweight.into_buffer(), dbias.map(WeightGrad::into_buffer))
}

/// `dinp = dout · weight` (`[rows, n]` by `[n, k]`): the input half of
/// [`matmul_backward`].
pub fn matmul_dinp<'w>(
    ctx: &WgpuContext,
    dout: &PooledBuffer,
    weight: impl Into<Slice<'w>>,
    rows: usize,
    k: usize,
    n: usize,
) -> PooledBuffer {
    let variant = MatmulVariant::choose(ctx, rows, k, n);
    matmul_dinp_variant(ctx, variant, dout, weight, rows, k, n)
}

/// [`matmul_dinp`] computed by `variant`.
pub fn matmul_dinp_variant<'w>(
    ctx: &WgpuContext,
    variant: MatmulVariant,
    dout: &PooledBuffer,
    weight: impl Into<Slice<'w>>,
    rows: usize,
    k: usize,
    n: usize,
) -> PooledBuffer {
    matmul_dinp_fused_variant(ctx, variant, dout, weight, rows, k, n, None)
}

/// [`matmul_dinp_variant`] times `gelu'(gelu_of)` elementwise when `gelu_of`
/// (`[rows, k]`) is given: the epilogue of [`matmul_backward_fused`]. Split over n,
/// the epilogue runs once, on the partials' sum.
#[allow(clippy::too_many_arguments)]
pub fn matmul_dinp_fused_variant<'w>(
    ctx: &WgpuContext,
    variant: MatmulVariant,
    dout: &PooledBuffer,
    weight: impl Into<Slice<'w>>,
    rows: usize,
    k: usize,
    n: usize,
    gelu_of: Option<&PooledBuffer>,
) -> PooledBuffer {
    assert!(rows > 0 && k > 0 && n > 0, "matmul_dinp of an empty matrix");
    let weight = weight.into();
    check_len(dout, rows * n, "matmul_dinp dout");
    check_len(weight, n * k, "matmul_dinp weight");
    if let Some(x) = gelu_of {
        check_len(x, rows * k, "matmul_dinp gelu input");
    }
    let epilogue = if gelu_of.is_some() {
        fuse::GELU_GRAD
    } else {
        0
    };
    let aux = gelu_of.unwrap_or(dout);
    let dinp = ctx.create_pooled(rows * k * 4);
    let (chunk, splits) = variant.k_splits(rows, k, n);
    let kernel = variant.kernel(Layout::Dinp);
    let groups = variant.grid(rows, k, splits);
    if splits == 1 {
        let params = GemmParams::new(rows, k, n, chunk, epilogue);
        ctx.dispatch_slices(
            specialized(kernel, params.flags),
            &params,
            &[dout.into(), weight, (&dinp).into(), aux.into()],
            groups,
        );
    } else {
        let params = GemmParams::new(rows, k, n, chunk, 0);
        let part = ctx.create_pooled(splits * rows * k * 4);
        ctx.dispatch_slices(
            specialized(kernel, params.flags),
            &params,
            &[dout.into(), weight, (&part).into(), aux.into()],
            groups,
        );
        if epilogue == 0 {
            sum_splits(ctx, (&part).into(), (&dinp).into(), rows * k, splits);
        } else {
            let reduce = ReduceParams::new(rows * k, splits, epilogue);
            let part_slice = (&part).into();
            sum_splits_fused(
                ctx,
                &reduce,
                &part,
                &dinp,
                [part_slice, aux.into(), part_slice],
            );
        }
    }
    dinp
}

/// `dweight = doutᵀ · inp` (`[n, k]`, summed over all `rows`): the weight half of
/// [`matmul_backward`].
pub fn matmul_dweight(
    ctx: &WgpuContext,
    dout: &PooledBuffer,
    inp: &PooledBuffer,
    rows: usize,
    k: usize,
    n: usize,
) -> PooledBuffer {
    let variant = MatmulVariant::choose(ctx, n, k, rows);
    matmul_dweight_variant(ctx, variant, dout, inp, rows, k, n)
}

/// [`matmul_dweight`] computed by `variant`.
pub fn matmul_dweight_variant(
    ctx: &WgpuContext,
    variant: MatmulVariant,
    dout: &PooledBuffer,
    inp: &PooledBuffer,
    rows: usize,
    k: usize,
    n: usize,
) -> PooledBuffer {
    matmul_dweight_fused_variant(ctx, variant, dout, inp, rows, k, n, false)
}

/// [`matmul_dweight_variant`] of GELU of `inp` when `gelu_inp`, applied as `inp` is
/// loaded (the forward's prologue again).
#[allow(clippy::too_many_arguments)]
pub fn matmul_dweight_fused_variant(
    ctx: &WgpuContext,
    variant: MatmulVariant,
    dout: &PooledBuffer,
    inp: &PooledBuffer,
    rows: usize,
    k: usize,
    n: usize,
    gelu_inp: bool,
) -> PooledBuffer {
    assert!(
        rows > 0 && k > 0 && n > 0,
        "matmul_dweight of an empty matrix"
    );
    dweight_partials(ctx, variant, dout, inp, (rows, k, n, gelu_inp), None, None)
        .0
        .finish(ctx)
        .into_buffer()
}

/// [`matmul_dweight_fused_variant`] up to its split partials, into `dest` where
/// given; with `bias` (and its destination, if any), where the variant's core can
/// (`MatmulVariant::sums_bias`), also dbias's partials from the same pass, split as
/// dweight's. `shape`: (rows, k, n, gelu_inp).
fn dweight_partials<'d>(
    ctx: &WgpuContext,
    variant: MatmulVariant,
    dout: &PooledBuffer,
    inp: &PooledBuffer,
    (rows, k, n, gelu_inp): (usize, usize, usize, bool),
    dest: Option<GradDest<'d>>,
    bias: Option<Option<GradDest<'d>>>,
) -> (Partials<'d>, Option<Partials<'d>>) {
    check_len(dout, rows * n, "matmul_dweight dout");
    check_len(inp, rows * k, "matmul_dweight inp");
    let (chunk, splits) = dweight_split(variant, rows, k, n);
    let (act, prologue) = gelu_operand(ctx, variant, inp, rows * k, gelu_inp);
    let inp = act.as_ref().unwrap_or(inp);
    let bias = bias.filter(|_| variant.sums_bias());
    let params = GemmParams::new(n, k, rows, chunk, prologue);
    let kernel = if bias.is_some() {
        &DWEIGHT_BIAS
    } else {
        variant.kernel(Layout::Dweight)
    };
    let kernel = specialized(kernel, params.flags);
    let groups = variant.grid(n, k, splits);
    let dweight = Partials::new(ctx, n * k, splits, dest);
    let dbias = bias.map(|dest| Partials::new(ctx, n, splits, dest));
    let mut bound = vec![dout.into(), inp.into(), dweight.target()];
    bound.extend(dbias.as_ref().map(Partials::target));
    ctx.dispatch_slices(kernel, &params, &bound, groups);
    (dweight, dbias)
}

/// How `variant` splits the reduction over `rows` of dweight (`[n, k]`): (rows a
/// split, splits).
fn dweight_split(variant: MatmulVariant, rows: usize, k: usize, n: usize) -> (usize, usize) {
    let [gx, gy, _] = variant.grid(n, k, 1);
    let groups = (gx * gy) as usize;
    let want = variant.target_workgroups().div_ceil(groups);
    split(rows, want, BK, variant.min_split())
}

/// How the column sums of dbias (`n` of them) over `rows` split beside `variant`:
/// (rows a split, splits).
fn dbias_split(variant: MatmulVariant, rows: usize, n: usize) -> (usize, usize) {
    let want = TARGET_WORKGROUPS.div_ceil(n.div_ceil(64));
    split(rows, want, 1, variant.min_split())
}

/// How `variant` reads GELU of `inp` (`len` floats) when `gelu`: a prologue flag, or
/// (see [`MatmulVariant::gelu_on_load`]) a transient buffer holding it.
fn gelu_operand(
    ctx: &WgpuContext,
    variant: MatmulVariant,
    inp: &PooledBuffer,
    len: usize,
    gelu: bool,
) -> (Option<PooledBuffer>, u32) {
    match (gelu, variant.gelu_on_load()) {
        (false, _) => (None, 0),
        (true, true) => (None, fuse::GELU_INP),
        (true, false) => (Some(super::gelu::gelu_forward(ctx, inp, len)), 0),
    }
}

/// `dbias[j] = sum_r dout[r, j]`, split over rows as `variant` splits the weight
/// gradient beside it, up to its partials.
fn dbias_partials<'d>(
    ctx: &WgpuContext,
    variant: MatmulVariant,
    dout: &PooledBuffer,
    rows: usize,
    n: usize,
    dest: Option<GradDest<'d>>,
) -> Partials<'d> {
    check_len(dout, rows * n, "matmul_dbias dout");
    let col_groups = n.div_ceil(64);
    let (chunk, splits) = dbias_split(variant, rows, n);
    let params = ReduceParams {
        rows: u32_of(rows, "rows"),
        row_chunk: u32_of(chunk, "chunk"),
        ..ReduceParams::new(n, splits, 0)
    };
    let groups = [col_groups as u32, splits as u32, 1];
    let dbias = Partials::new(ctx, n, splits, dest);
    ctx.dispatch_slices(&COLSUM, &params, &[dout.into(), dbias.target()], groups);
    dbias
}

impl ReduceParams {
    /// A sum of `splits` partials of `len` floats, with the epilogue `flags`.
    fn new(len: usize, splits: usize, flags: u32) -> Self {
        ReduceParams {
            len: u32_of(len, "len"),
            splits: u32_of(splits, "splits"),
            rows: 0,
            row_chunk: 0,
            flags,
            seed: 0,
            threshold: 0,
            scale: 1.0,
        }
    }
}

/// The sum of split-K partials, then the epilogue of `params.flags`, reading
/// `inputs` (bias, aux, resid: each bound to `part` where unused).
fn sum_splits_fused(
    ctx: &WgpuContext,
    params: &ReduceParams,
    part: &PooledBuffer,
    out: &PooledBuffer,
    [bias, aux, resid]: [Slice; 3],
) {
    let groups = grid_1d(params.len, 256);
    ctx.dispatch_slices(
        specialized(&SUM_SPLITS_FUSED, params.flags),
        params,
        &[part.into(), out.into(), bias, aux, resid],
        groups,
    );
}

#[cfg(test)]
mod tests {
    use super::MatmulVariant;

    /// The shakespeare step's 15 GEMMs (64 x 256 rows; width 384, MLP 1536, 65
    /// symbols) as (output rows, output columns, reduction): Narrow takes the head's
    /// dinp alone, the one where it beat Tiled on the H200; the others keep the
    /// choices measured before it.
    #[test]
    fn narrow_takes_only_the_heads_dinp_of_the_shakespeare_step() {
        let rows = 16384;
        let layers = [(384, 1152), (384, 384), (384, 1536), (1536, 384), (384, 65)];
        for (k, n) in layers {
            let forward = MatmulVariant::choose_gpu(rows, n, k);
            let dinp = MatmulVariant::choose_gpu(rows, k, n);
            let dweight = MatmulVariant::choose_gpu(n, k, rows);
            let long_k = k == 1536;
            let want_forward = if long_k {
                MatmulVariant::SplitK
            } else {
                MatmulVariant::Tiled
            };
            let want_dinp = match n {
                65 => MatmulVariant::Narrow,
                1536 => MatmulVariant::SplitK,
                _ => MatmulVariant::Tiled,
            };
            assert_eq!(forward, want_forward, "forward k {k} n {n}");
            assert_eq!(dinp, want_dinp, "dinp k {k} n {n}");
            assert_eq!(dweight, MatmulVariant::SplitK, "dweight k {k} n {n}");
        }
    }
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
            variant.kernel(Layout::Forward),
            &subsets(&[BIAS, GELU_INP, RESIDUAL, DROPOUT]),
        );
        with_flags(variant.kernel(Layout::Dinp), &subsets(&[GELU_GRAD]));
        with_flags(variant.kernel(Layout::Dweight), &subsets(&[GELU_INP]));
    }
    with_flags(&DWEIGHT_BIAS, &subsets(&[GELU_INP]));
    let mut reduce = subsets(&[BIAS, RESIDUAL, DROPOUT]);
    reduce.push(GELU_GRAD);
    with_flags(&SUM_SPLITS_FUSED, &reduce);
    all.push(COLSUM);
    all
}

//! Matrix products of a `Linear` layer, forward and backward, as GEMMs in one of
//! several variants ([`MatmulVariant`]): a core (`matmul.wgsl`, `matmul_cpu.wgsl`)
//! after one prelude per operand layout (`matmul_nt` / `_nn` / `_tn.wgsl`), and for
//! split reductions the fixed-order sums of `matmul_reduce.wgsl`.

use super::matmul_coop;
use super::target::Target;
use crate::config::Precision;
use crate::gpu::{grid_1d, Kernel, PooledBuffer, WgpuContext};

/// Output tile of one workgroup of the tiled variant (square) and its step along
/// the reduction.
const TILE: usize = 128;
const BK: usize = 8;
/// Output block of one workgroup of the CPU variant: rows by columns.
const CPU_ROWS: usize = 8;
const CPU_COLS: usize = 64;
/// Workgroups to aim for when a reduction is split (dweight, dbias): several waves
/// of a large GPU (an H200 holds about 264 of these at once), so that few output
/// tiles still fill it and the last wave's idle share stays small.
const TARGET_WORKGROUPS: usize = 1024;
/// The same for CPU adapters: a few workgroups a core are enough.
const CPU_TARGET_WORKGROUPS: usize = 32;
/// Fewest reduction steps (rows) one split of dweight / dbias takes: below that the
/// extra partials cost more than the parallelism gains.
const MIN_SPLIT: usize = 256;
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
    /// No workgroup memory and no barriers, 8x8 outputs a lane: for CPU adapters.
    Cpu,
    /// `--precision f16` on tensor cores (`matmul_coop.rs`): operands rounded to
    /// f16, sums in f32; `split` as in `SplitK`.
    Coop { split: bool },
    /// `--precision f16` without tensor cores: the same rounding, `Tiled`'s tiling.
    F16 { split: bool },
}

impl MatmulVariant {
    /// The f32 variants.
    pub const ALL: [MatmulVariant; 3] = [
        MatmulVariant::Tiled,
        MatmulVariant::SplitK,
        MatmulVariant::Cpu,
    ];
    /// The f16 variants (tests/matmul_f16.rs).
    pub const F16_ALL: [MatmulVariant; 4] = [
        MatmulVariant::F16 { split: false },
        MatmulVariant::F16 { split: true },
        MatmulVariant::Coop { split: false },
        MatmulVariant::Coop { split: true },
    ];

    pub fn name(self) -> &'static str {
        match self {
            MatmulVariant::Tiled => "tiled",
            MatmulVariant::SplitK => "splitk",
            MatmulVariant::Cpu => "cpu",
            MatmulVariant::Coop { split: false } => "coop",
            MatmulVariant::Coop { split: true } => "coop-splitk",
            MatmulVariant::F16 { split: false } => "f16",
            MatmulVariant::F16 { split: true } => "f16-splitk",
        }
    }

    /// The variant the launchers use on `ctx` for an `m x n` output reduced over
    /// `k`: on GPUs, split-K when the output has very few 128x128 tiles (the weight
    /// gradients: a long reduction over every row), or few tiles and a reduction long
    /// both absolutely and against the output's width. Shorter reductions lose more
    /// to the extra reduce pass than they gain (the H200 table in BENCHMARKS.md).
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
            Target::Cpu => MatmulVariant::Cpu,
            Target::Gpu => {
                let tiles = m.div_ceil(TILE) * n.div_ceil(TILE);
                let few_tiles = tiles < TARGET_WORKGROUPS / 16 && k >= 2 * MIN_SPLIT_K;
                let long_k = tiles < TARGET_WORKGROUPS / 2 && k >= 1024 && k >= 4 * n;
                if few_tiles || long_k {
                    MatmulVariant::SplitK
                } else {
                    MatmulVariant::Tiled
                }
            }
        }
    }

    /// Workgroups for an `m x n` output in `splits` slices.
    fn grid(self, m: usize, n: usize, splits: usize) -> [u32; 3] {
        let (rows, cols) = match self {
            MatmulVariant::Cpu => (CPU_ROWS, CPU_COLS),
            _ => (TILE, TILE),
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

    /// Workgroups to aim for when the reduction is split.
    fn target_workgroups(self) -> usize {
        match self {
            MatmulVariant::Cpu => CPU_TARGET_WORKGROUPS,
            _ => TARGET_WORKGROUPS,
        }
    }

    fn kernel(self, layout: Layout) -> &'static Kernel {
        match (self, layout) {
            (MatmulVariant::Tiled | MatmulVariant::SplitK, Layout::Forward) => &FORWARD,
            (MatmulVariant::Tiled | MatmulVariant::SplitK, Layout::Dinp) => &DINP,
            (MatmulVariant::Tiled | MatmulVariant::SplitK, Layout::Dweight) => &DWEIGHT,
            (MatmulVariant::Cpu, Layout::Forward) => &FORWARD_CPU,
            (MatmulVariant::Cpu, Layout::Dinp) => &DINP_CPU,
            (MatmulVariant::Cpu, Layout::Dweight) => &DWEIGHT_CPU,
            (MatmulVariant::Coop { .. } | MatmulVariant::F16 { .. }, _) => {
                matmul_coop::kernel(self, layout)
            }
        }
    }

    /// (chunk, splits) of an `m x n` output's reduction over `k`: one split except
    /// in `SplitK`.
    fn k_splits(self, m: usize, n: usize, k: usize) -> (usize, usize) {
        let splits = matches!(
            self,
            MatmulVariant::SplitK
                | MatmulVariant::Coop { split: true }
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

macro_rules! gemm_kernel {
    ($name:literal, $prelude:literal, $core:literal) => {
        Kernel {
            name: $name,
            source: concat!(include_str!($prelude), include_str!($core)),
            entry: "main",
            unchecked: UNCHECKED,
        }
    };
}

/// Every index in these shaders is guarded (or clamped), and each launcher checks
/// its buffers (`check_len`), so they run without wgpu's per-access bounds checks.
const UNCHECKED: bool = true;

const FORWARD: Kernel = gemm_kernel!("matmul_forward", "matmul_nt.wgsl", "matmul.wgsl");
const DINP: Kernel = gemm_kernel!("matmul_backward_dinp", "matmul_nn.wgsl", "matmul.wgsl");
const DWEIGHT: Kernel = gemm_kernel!("matmul_backward_dweight", "matmul_tn.wgsl", "matmul.wgsl");
const FORWARD_CPU: Kernel = gemm_kernel!("matmul_forward_cpu", "matmul_nt.wgsl", "matmul_cpu.wgsl");
const DINP_CPU: Kernel = gemm_kernel!("matmul_dinp_cpu", "matmul_nn.wgsl", "matmul_cpu.wgsl");
const DWEIGHT_CPU: Kernel = gemm_kernel!("matmul_dweight_cpu", "matmul_tn.wgsl", "matmul_cpu.wgsl");
const SUM_SPLITS: Kernel = Kernel {
    name: "matmul_sum_splits",
    source: include_str!("matmul_reduce.wgsl"),
    entry: "sum_splits",
    unchecked: UNCHECKED,
};
const SUM_SPLITS_BIAS: Kernel = Kernel {
    name: "matmul_sum_splits_bias",
    source: include_str!("matmul_reduce.wgsl"),
    entry: "sum_splits_bias",
    unchecked: UNCHECKED,
};
const COLSUM: Kernel = Kernel {
    name: "matmul_colsum",
    source: include_str!("matmul_reduce.wgsl"),
    entry: "colsum_part",
    unchecked: UNCHECKED,
};

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct GemmParams {
    m: u32,
    n: u32,
    k: u32,
    k_chunk: u32,
    has_bias: u32,
    _pad: [u32; 3],
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct ReduceParams {
    len: u32,
    splits: u32,
    rows: u32,
    row_chunk: u32,
}

fn u32_of(x: usize, what: &str) -> u32 {
    u32::try_from(x).unwrap_or_else(|_| panic!("{what} = {x} does not fit in u32"))
}

/// Panics unless `buffer` holds `floats` f32s: the unchecked shaders rely on it.
#[track_caller]
fn check_len(buffer: &PooledBuffer, floats: usize, what: &str) {
    assert!(
        buffer.size() >= floats as u64 * 4,
        "{what}: a {}-byte buffer for {floats} floats",
        buffer.size()
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

/// `out[r, j] = sum_i inp[r, i] * weight[j, i] + bias[j]`, PyTorch `Linear` layout:
/// `inp` `[rows, k]`, `weight` `[n, k]`, `bias` `[n]`; returns `out` `[rows, n]`.
pub fn matmul_forward(
    ctx: &WgpuContext,
    inp: &PooledBuffer,
    weight: &PooledBuffer,
    bias: Option<&PooledBuffer>,
    rows: usize,
    k: usize,
    n: usize,
) -> PooledBuffer {
    let variant = MatmulVariant::choose(ctx, rows, n, k);
    matmul_forward_variant(ctx, variant, inp, weight, bias, rows, k, n)
}

/// [`matmul_forward`] computed by `variant`.
#[allow(clippy::too_many_arguments)]
pub fn matmul_forward_variant(
    ctx: &WgpuContext,
    variant: MatmulVariant,
    inp: &PooledBuffer,
    weight: &PooledBuffer,
    bias: Option<&PooledBuffer>,
    rows: usize,
    k: usize,
    n: usize,
) -> PooledBuffer {
    assert!(
        rows > 0 && k > 0 && n > 0,
        "matmul_forward of an empty matrix"
    );
    check_len(inp, rows * k, "matmul_forward inp");
    check_len(weight, n * k, "matmul_forward weight");
    if let Some(bias) = bias {
        check_len(bias, n, "matmul_forward bias");
    }
    let out = ctx.create_pooled(rows * n * 4);
    let (chunk, splits) = variant.k_splits(rows, n, k);
    let params = GemmParams {
        m: u32_of(rows, "rows"),
        n: u32_of(n, "n"),
        k: u32_of(k, "k"),
        k_chunk: u32_of(chunk, "chunk"),
        // Split, the bias is added with the partials.
        has_bias: (bias.is_some() && splits == 1) as u32,
        _pad: [0; 3],
    };
    let kernel = variant.kernel(Layout::Forward);
    let groups = variant.grid(rows, n, splits);
    // Without a bias the binding still needs a buffer; the shader never reads it.
    let bias_or_any = bias.unwrap_or(weight);
    if splits == 1 {
        ctx.dispatch(kernel, &params, &[inp, weight, bias_or_any, &out], groups);
    } else {
        let part = ctx.create_pooled(splits * rows * n * 4);
        ctx.dispatch(kernel, &params, &[inp, weight, bias_or_any, &part], groups);
        match bias {
            Some(bias) => sum_splits_bias(ctx, &part, bias, &out, rows * n, n, splits),
            None => sum_splits(ctx, &part, &out, rows * n, splits),
        }
    }
    out
}

/// Gradients of [`matmul_forward`] from `dout` `[rows, n]`: `dinp` `[rows, k]`,
/// `dweight` `[n, k]` and, `with_bias`, `dbias` `[n]`. The weight gradients reduce
/// over all rows in parallel splits whose partial sums are then added in a fixed
/// order: no atomics, the same bits every run.
#[allow(clippy::too_many_arguments)]
pub fn matmul_backward(
    ctx: &WgpuContext,
    dout: &PooledBuffer,
    inp: &PooledBuffer,
    weight: &PooledBuffer,
    rows: usize,
    k: usize,
    n: usize,
    with_bias: bool,
) -> (PooledBuffer, PooledBuffer, Option<PooledBuffer>) {
    let dinp = matmul_dinp(ctx, dout, weight, rows, k, n);
    let dweight = matmul_dweight(ctx, dout, inp, rows, k, n);
    let dbias = with_bias.then(|| matmul_dbias(ctx, dout, rows, n));
    (dinp, dweight, dbias)
}

/// `dinp = dout · weight` (`[rows, n]` by `[n, k]`): the input half of
/// [`matmul_backward`].
pub fn matmul_dinp(
    ctx: &WgpuContext,
    dout: &PooledBuffer,
    weight: &PooledBuffer,
    rows: usize,
    k: usize,
    n: usize,
) -> PooledBuffer {
    let variant = MatmulVariant::choose(ctx, rows, k, n);
    matmul_dinp_variant(ctx, variant, dout, weight, rows, k, n)
}

/// [`matmul_dinp`] computed by `variant`.
pub fn matmul_dinp_variant(
    ctx: &WgpuContext,
    variant: MatmulVariant,
    dout: &PooledBuffer,
    weight: &PooledBuffer,
    rows: usize,
    k: usize,
    n: usize,
) -> PooledBuffer {
    assert!(rows > 0 && k > 0 && n > 0, "matmul_dinp of an empty matrix");
    check_len(dout, rows * n, "matmul_dinp dout");
    check_len(weight, n * k, "matmul_dinp weight");
    let dinp = ctx.create_pooled(rows * k * 4);
    let (chunk, splits) = variant.k_splits(rows, k, n);
    let params = GemmParams {
        m: u32_of(rows, "rows"),
        n: u32_of(k, "k"),
        k: u32_of(n, "n"),
        k_chunk: u32_of(chunk, "chunk"),
        has_bias: 0,
        _pad: [0; 3],
    };
    let kernel = variant.kernel(Layout::Dinp);
    let groups = variant.grid(rows, k, splits);
    if splits == 1 {
        ctx.dispatch(kernel, &params, &[dout, weight, &dinp], groups);
    } else {
        let part = ctx.create_pooled(splits * rows * k * 4);
        ctx.dispatch(kernel, &params, &[dout, weight, &part], groups);
        sum_splits(ctx, &part, &dinp, rows * k, splits);
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
    assert!(
        rows > 0 && k > 0 && n > 0,
        "matmul_dweight of an empty matrix"
    );
    check_len(dout, rows * n, "matmul_dweight dout");
    check_len(inp, rows * k, "matmul_dweight inp");
    let dweight = ctx.create_pooled(n * k * 4);
    let [gx, gy, _] = variant.grid(n, k, 1);
    let groups = (gx * gy) as usize;
    let want = variant.target_workgroups().div_ceil(groups);
    let (chunk, splits) = split(rows, want, BK, MIN_SPLIT);
    let params = GemmParams {
        m: u32_of(n, "n"),
        n: u32_of(k, "k"),
        k: u32_of(rows, "rows"),
        k_chunk: u32_of(chunk, "chunk"),
        has_bias: 0,
        _pad: [0; 3],
    };
    let kernel = variant.kernel(Layout::Dweight);
    let groups = variant.grid(n, k, splits);
    if splits == 1 {
        ctx.dispatch(kernel, &params, &[dout, inp, &dweight], groups);
    } else {
        let part = ctx.create_pooled(splits * n * k * 4);
        ctx.dispatch(kernel, &params, &[dout, inp, &part], groups);
        sum_splits(ctx, &part, &dweight, n * k, splits);
    }
    dweight
}

/// `dbias[j] = sum_r dout[r, j]`.
fn matmul_dbias(ctx: &WgpuContext, dout: &PooledBuffer, rows: usize, n: usize) -> PooledBuffer {
    check_len(dout, rows * n, "matmul_dbias dout");
    let dbias = ctx.create_pooled(n * 4);
    let col_groups = n.div_ceil(64);
    let (chunk, splits) = split(rows, TARGET_WORKGROUPS.div_ceil(col_groups), 1, MIN_SPLIT);
    let params = ReduceParams {
        len: u32_of(n, "n"),
        splits: u32_of(splits, "splits"),
        rows: u32_of(rows, "rows"),
        row_chunk: u32_of(chunk, "chunk"),
    };
    let groups = [col_groups as u32, splits as u32, 1];
    if splits == 1 {
        ctx.dispatch(&COLSUM, &params, &[dout, &dbias], groups);
    } else {
        let part = ctx.create_pooled(splits * n * 4);
        ctx.dispatch(&COLSUM, &params, &[dout, &part], groups);
        sum_splits(ctx, &part, &dbias, n, splits);
    }
    dbias
}

/// `out[i] = sum_s part[s * len + i]`.
fn sum_splits(
    ctx: &WgpuContext,
    part: &PooledBuffer,
    out: &PooledBuffer,
    len: usize,
    splits: usize,
) {
    let params = ReduceParams {
        len: u32_of(len, "len"),
        splits: splits as u32,
        rows: 0,
        row_chunk: 0,
    };
    ctx.dispatch(&SUM_SPLITS, &params, &[part, out], grid_1d(len as u32, 256));
}

/// `out[i] = sum_s part[s * len + i] + bias[i % n]`: split-K partials of a forward
/// with its bias.
fn sum_splits_bias(
    ctx: &WgpuContext,
    part: &PooledBuffer,
    bias: &PooledBuffer,
    out: &PooledBuffer,
    len: usize,
    n: usize,
    splits: usize,
) {
    let params = ReduceParams {
        len: u32_of(len, "len"),
        splits: splits as u32,
        rows: 0,
        row_chunk: u32_of(n, "n"),
    };
    let groups = grid_1d(len as u32, 256);
    ctx.dispatch(&SUM_SPLITS_BIAS, &params, &[part, out, bias], groups);
}

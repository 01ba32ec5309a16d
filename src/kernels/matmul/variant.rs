//! Which GEMM variant computes a product, and what that variant needs: its tiles
//! and grid, how it splits a reduction into partials, its workgroup memory. Pure
//! functions of the shape and the tuning ([`MatmulVariant::choose_for`]), so the
//! planner ([`crate::plan`]) asks the same questions the launchers do.

use super::operands::Layout;
use crate::gpu::WgpuContext;
use crate::tuning::F16Core;

/// Output tile of one workgroup of the tiled variant (square) and its step along
/// the reduction.
pub(super) const TILE: usize = 128;
/// Rows of the `Narrow` variant's tiles (its columns are `TILE`).
const NARROW_ROWS: usize = 64;
pub(super) const BK: usize = 8;
/// Output columns of one workgroup of the CPU variants (8 lanes, 8 columns each);
/// its rows are the variant's (`MatmulVariant::cpu_rows`).
const CPU_COLS: usize = 64;
/// Workgroups to aim for when a reduction is split (split-K, dbias): several waves
/// of a large GPU (an H200 holds about 264 of these at once), so that few output
/// tiles still fill it and the last wave's idle share stays small.
pub(super) const TARGET_WORKGROUPS: usize = 1024;
/// Workgroups a weight gradient's split aims for on a GPU, at most, in every core but
/// `Narrow` (the tensor-core ones, `Tiled`'s): its splits a tile rounded down, so
/// that the last wave is never a sliver. Fewer and longer splits than
/// TARGET_WORKGROUPS, since each split writes a whole partial output that a second
/// pass adds. About one wave of the H200's 128x128 workgroups: there,
/// against 1024 rounded up, the tensor-core dweights ran 1.4-2.1x faster (the f16 step 6.6%),
/// the f32 ones 1.0-1.3x (the f32 step 0.4%), and 512 or 128 gained nothing more
/// in the step (BENCHMARKS.md: the GEMMs).
const DWEIGHT_WORKGROUPS: usize = 256;
/// The same for `Narrow`, which the weight gradients take on GPUs (its splits a
/// tile rounded down, as above): three waves of an H100's or H200's 132 SMs at the
/// two workgroups an SM its dweight with dbias fits (99 registers a thread). In the
/// shakespeare step on an H100 its weight gradients and their sums took 10.36 GPU
/// ms against 10.46 at 528 and 10.80 at 1056, and `SplitK`'s 11.52 at 256 (11.77
/// at 792): BENCHMARKS.md, the GEMMs.
const NARROW_DWEIGHT_WORKGROUPS: usize = 792;
/// The same for CPU adapters, whose workgroups of 32 rows x 64 columns are large: a
/// weight gradient's rows are split only when its output has fewer than this many,
/// since each split costs a pass that adds the partial outputs.
const CPU_TARGET_WORKGROUPS: usize = 4;
/// Fewest reduction steps (rows) one split of dweight / dbias takes on a GPU: below
/// that the extra partials cost more than the parallelism gains. On the H200 64 beat
/// 256 (the page's presets 12-17% faster natively and through Dawn), 128 and 32
/// (BENCHMARKS.md: the page's presets natively and through Dawn); the shakespeare
/// step splits by DWEIGHT_WORKGROUPS first and does not change.
const MIN_SPLIT: usize = 64;
/// The same on CPU adapters, where a split's partials cost a pass over memory.
const CPU_MIN_SPLIT: usize = 256;
/// The same for the split-K forward and dinp, whose partials are whole outputs.
pub(super) const MIN_SPLIT_K: usize = 128;
/// Most steps of a reduction one invocation loops over (a split's chunk): a driver
/// may cut a longer loop short without an error (lavapipe did, past about 65,000
/// iterations: a 70,000-character vocabulary's dinp came out wrong), so a longer
/// reduction is split whatever the variant.
pub const MAX_SPLIT_STEPS: usize = 16_384;
/// Columns of dout one workgroup of the dbias pass sums (`colsum_part` in
/// matmul_reduce.wgsl).
pub(super) const COLSUM_COLS: usize = 64;

/// The launchers' tensor-core core where the device runs it (else `Coop`, the one
/// with the fewest needs): `Coop2` (matmul_coop.wgsl's deeper k steps, unguarded
/// interior loads), chosen on the H200's figures (`scripts/gpu-run.sh gemm-sweep`).
const DEFAULT_TENSOR_CORE: F16Core = F16Core::Coop2;

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
    /// The tiled kernel on 64x128 output tiles, 4x8 a thread: twice the workgroups
    /// of `Tiled` and fewer registers each, for reductions too short to split (the
    /// head's dinp, k = 65), where each workgroup's set-up and stores weigh more
    /// than its products. Split like `Tiled` (dweight over rows, nothing else).
    Narrow,
    /// No workgroup memory and no barriers, 16 rows x 8 columns a lane (workgroups of
    /// 16 x 64 outputs): for CPU adapters in the browser (SwiftShader in Chromium).
    Cpu16,
    /// The same with 32 rows a lane: for CPU adapters natively (lavapipe), where the
    /// lanes' gathered loads of B serve twice the rows. Faster on lavapipe, slower
    /// on SwiftShader (BENCHMARKS.md: CPU adapters).
    Cpu32,
    /// `--precision f16` on tensor cores: operands rounded to f16, sums in f32;
    /// `split` as in `SplitK`.
    Coop { split: bool },
    /// The same on the C2 core of `matmul_coop.wgsl` (deeper k steps, unguarded interior loads).
    Coop2 { split: bool },
    /// The same on `matmul_coop3.wgsl` (64x64 a subgroup, two workgroups an SM).
    Coop3 { split: bool },
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
    pub const F16_ALL: [MatmulVariant; 8] = [
        MatmulVariant::F16 { split: false },
        MatmulVariant::F16 { split: true },
        MatmulVariant::Coop { split: false },
        MatmulVariant::Coop { split: true },
        MatmulVariant::Coop2 { split: false },
        MatmulVariant::Coop2 { split: true },
        MatmulVariant::Coop3 { split: false },
        MatmulVariant::Coop3 { split: true },
    ];

    /// Whether this variant runs on tensor cores.
    pub fn is_coop(self) -> bool {
        matches!(
            self,
            MatmulVariant::Coop { .. } | MatmulVariant::Coop2 { .. } | MatmulVariant::Coop3 { .. }
        )
    }

    /// Whether a context made for this variant's precision runs it, or why not: the
    /// tensor-core variants need what [`coop_supported`], [`coop2_supported`] and
    /// [`coop3_supported`] check, the others their workgroup memory.
    pub fn runs_on(self, ctx: &WgpuContext) -> Result<(), String> {
        match self {
            MatmulVariant::Coop { .. } => coop_supported(ctx),
            MatmulVariant::Coop2 { .. } => coop2_supported(ctx),
            MatmulVariant::Coop3 { .. } => coop3_supported(ctx),
            _ => {
                let have = u64::from(ctx.limits().max_compute_workgroup_storage_size);
                let need = self.workgroup_bytes();
                if need > have {
                    return Err(format!(
                        "{} needs {need} bytes of workgroup memory; this device has {have}",
                        self.name()
                    ));
                }
                Ok(())
            }
        }
    }

    /// Whether this variant splits the reductions of the forward and dinp over
    /// several workgroups a tile (every variant splits dweight's).
    pub fn is_split(self) -> bool {
        matches!(
            self,
            MatmulVariant::SplitK
                | MatmulVariant::Coop { split: true }
                | MatmulVariant::Coop2 { split: true }
                | MatmulVariant::Coop3 { split: true }
                | MatmulVariant::F16 { split: true }
        )
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
            MatmulVariant::Coop3 { split: false } => "coop3",
            MatmulVariant::Coop3 { split: true } => "coop3-splitk",
            MatmulVariant::F16 { split: false } => "f16",
            MatmulVariant::F16 { split: true } => "f16-splitk",
        }
    }

    /// The variant the launchers use on `ctx` for `layout`'s product, an `m x n`
    /// output reduced over `k`: [`MatmulVariant::choose_for`] the context's tuning and precision, with
    /// an f16 product on the tensor-core core the context forces
    /// ([`crate::gpu::ContextOptions::f16_core`]) or the device runs.
    ///
    /// Panics where the context forces a tensor-core core its device cannot run: a
    /// test run there must not pass on the fallback.
    pub fn choose(
        ctx: &WgpuContext,
        layout: Layout,
        m: usize,
        n: usize,
        k: usize,
    ) -> MatmulVariant {
        let variant = Self::choose_for(ctx.kernel_target(), ctx.precision(), layout, m, n, k);
        let MatmulVariant::F16 { split } = variant else {
            return variant;
        };
        let core = match ctx.f16_core() {
            Some(F16Core::Fallback) => F16Core::Fallback,
            Some(forced) => {
                if let Err(why) = Self::of_core(forced, split).runs_on(ctx) {
                    panic!("ContextOptions::f16_core is {}, but {why}", forced.name());
                }
                forced
            }
            None => Self::default_core(ctx),
        };
        Self::of_core(core, split)
    }

    /// The f16 core of `ctx` unless it forces one: [`DEFAULT_TENSOR_CORE`] where the
    /// device runs it, else `Coop` where it has tensor cores, else the fallback.
    fn default_core(ctx: &WgpuContext) -> F16Core {
        let runs = |core| Self::of_core(core, false).runs_on(ctx).is_ok();
        [DEFAULT_TENSOR_CORE, F16Core::Coop]
            .into_iter()
            .find(|&core| runs(core))
            .unwrap_or(F16Core::Fallback)
    }

    /// The f16 variant of `core`, split-K or not.
    pub fn of_core(core: F16Core, split: bool) -> MatmulVariant {
        match core {
            F16Core::Coop => MatmulVariant::Coop { split },
            F16Core::Coop2 => MatmulVariant::Coop2 { split },
            F16Core::Coop3 => MatmulVariant::Coop3 { split },
            F16Core::Fallback => MatmulVariant::F16 { split },
        }
    }

    /// Rows and columns of the output one workgroup computes.
    fn tile(self) -> (usize, usize) {
        match (self, self.cpu_rows()) {
            (_, Some(rows)) => (rows, CPU_COLS),
            (MatmulVariant::Narrow, None) => (NARROW_ROWS, TILE),
            (_, None) => (TILE, TILE),
        }
    }

    /// Whether the variant's core reads `fuse::WHOLE_TILES` (the tiled cores).
    pub(super) fn has_whole_tiles(self) -> bool {
        matches!(
            self,
            MatmulVariant::Tiled
                | MatmulVariant::SplitK
                | MatmulVariant::Narrow
                | MatmulVariant::F16 { .. }
        )
    }

    /// Whether every tile of an `m x n` output and every BK-deep step of a reduction
    /// of `k` in chunks of `chunk` lies inside the product (the 4 floats a thread
    /// loads are then also one aligned vec4): where the views are bound, the tiled
    /// cores then load without guards (`fuse::WHOLE_TILES`).
    pub(super) fn whole_tiles(self, m: usize, n: usize, k: usize, chunk: usize) -> bool {
        let (rows, cols) = self.tile();
        self.has_whole_tiles()
            && m.is_multiple_of(rows)
            && n.is_multiple_of(cols)
            && k.is_multiple_of(BK)
            && chunk.is_multiple_of(BK)
    }

    /// Workgroups for an `m x n` output in `splits` slices: x along the columns, y
    /// along the rows, z the slices. In u64, for the planner to compare with a
    /// device's limit before anything is launched.
    pub fn grid(self, m: usize, n: usize, splits: usize) -> [u64; 3] {
        let (rows, cols) = self.tile();
        [n.div_ceil(cols), m.div_ceil(rows), splits].map(|g| g as u64)
    }

    /// [`MatmulVariant::grid`] for a launch; panics past WebGPU's 65535 a dimension
    /// (the planner refuses such a shape first).
    pub(super) fn launch_grid(self, m: usize, n: usize, splits: usize) -> [u32; 3] {
        self.grid(m, n, splits).map(|g| {
            assert!(
                g <= 65535,
                "a {m}x{n} matmul needs {g} workgroups along one axis (at most 65535)"
            );
            g as u32
        })
    }

    /// Bytes of workgroup memory the variant's core declares.
    pub fn workgroup_bytes(self) -> u64 {
        match self {
            // Two buffers of 8 steps of a 128-wide tile of A and of B, in vec4s.
            MatmulVariant::Tiled | MatmulVariant::SplitK => 2 * 2 * (BK * TILE / 4) as u64 * 16,
            // A's tiles half as tall.
            MatmulVariant::Narrow => 2 * (BK * (TILE + NARROW_ROWS) / 4) as u64 * 16,
            MatmulVariant::Cpu16 | MatmulVariant::Cpu32 => 0,
            // Tiled's in f16.
            MatmulVariant::F16 { .. } => 2 * 2 * (BK * TILE / 4) as u64 * 8,
            // A 2 x 128 x 24 halves, B 2 x 16 x 136 halves, the output staging 8 x
            // 256 floats.
            MatmulVariant::Coop { .. } => (2 * 128 * 24 + 2 * 16 * 136) * 2 + 8 * 256 * 4,
            MatmulVariant::Coop2 { .. } => COOP2_WORKGROUP_BYTES as u64,
            MatmulVariant::Coop3 { .. } => COOP3_WORKGROUP_BYTES as u64,
        }
    }

    /// Whether the core applies a GELU prologue as it loads. The CPU core reloads each
    /// element of A for every 8 output columns (and of B for every 8 rows), so there a
    /// GELU on load would cost several times the product: it reads GELU's output from
    /// a transient buffer instead (made just before, dropped just after).
    pub(super) fn gelu_on_load(self) -> bool {
        !self.is_cpu()
    }

    /// Whether this variant's dweight core also sums dout's columns, giving dbias
    /// (`source::dweight_bias`, matmul_tn_sums.wgsl): `Tiled`'s (and `SplitK`'s),
    /// `Narrow`'s, and the tensor-core `Coop2`'s, which the f16 step's dweights run.
    pub(super) fn sums_bias(self) -> bool {
        matches!(
            self,
            MatmulVariant::Tiled
                | MatmulVariant::SplitK
                | MatmulVariant::Narrow
                | MatmulVariant::Coop2 { .. }
        )
    }

    /// Whether this is one of the CPU adapters' cores.
    pub fn is_cpu(self) -> bool {
        self.cpu_rows().is_some()
    }

    /// Rows of a CPU core's workgroup (and of each lane's block).
    pub(super) fn cpu_rows(self) -> Option<usize> {
        match self {
            MatmulVariant::Cpu16 => Some(16),
            MatmulVariant::Cpu32 => Some(32),
            _ => None,
        }
    }

    /// Fewest rows a split of a weight gradient takes.
    fn min_split(self) -> usize {
        match self {
            MatmulVariant::Cpu16 | MatmulVariant::Cpu32 => CPU_MIN_SPLIT,
            _ => MIN_SPLIT,
        }
    }

    /// (chunk, splits) of the reduction of `layout`'s product for a Linear of
    /// `rows` rows, `k` inputs and `n` outputs: dweight over rows, the others over
    /// their k (split-K variants only).
    pub(super) fn split_of(
        self,
        layout: Layout,
        rows: usize,
        k: usize,
        n: usize,
    ) -> (usize, usize) {
        match layout {
            Layout::Forward => self.k_splits(rows, n, k),
            Layout::Dinp => self.k_splits(rows, k, n),
            Layout::Dweight => self.dweight_split(rows, k, n),
        }
    }

    /// (chunk, splits) of an `m x n` output's reduction over `k`: one split except
    /// in the split-K variants.
    fn k_splits(self, m: usize, n: usize, k: usize) -> (usize, usize) {
        if !self.is_split() {
            return match k <= MAX_SPLIT_STEPS {
                true => (k, 1),
                false => split(k, 1, BK, MIN_SPLIT_K),
            };
        }
        let [gx, gy, _] = self.grid(m, n, 1);
        let want = TARGET_WORKGROUPS.div_ceil((gx * gy) as usize);
        split(k, want, BK, MIN_SPLIT_K)
    }

    /// How the reduction over `rows` of dweight (`[n, k]`) splits: (rows a split,
    /// splits).
    fn dweight_split(self, rows: usize, k: usize, n: usize) -> (usize, usize) {
        let [gx, gy, _] = self.grid(n, k, 1);
        let groups = (gx * gy) as usize;
        let want = match self {
            // A weight gradient's rows are split only when its output has fewer
            // workgroups than this.
            MatmulVariant::Cpu16 | MatmulVariant::Cpu32 => CPU_TARGET_WORKGROUPS.div_ceil(groups),
            MatmulVariant::Narrow => (NARROW_DWEIGHT_WORKGROUPS / groups).max(1),
            _ => (DWEIGHT_WORKGROUPS / groups).max(1),
        };
        split(rows, want, BK, self.min_split())
    }

    /// How the column sums of dbias (`n` of them) over `rows` split beside this
    /// variant's dweight: (rows a split, splits).
    pub(super) fn dbias_split(self, rows: usize, n: usize) -> (usize, usize) {
        let want = TARGET_WORKGROUPS.div_ceil(n.div_ceil(COLSUM_COLS));
        split(rows, want, 1, self.min_split())
    }

    /// Partials dweight and dbias of a Linear of `rows` rows, `k` inputs and `n`
    /// outputs are reduced from by this (dweight's) variant: (dweight's, dbias's).
    pub(super) fn weight_grad_splits(self, rows: usize, k: usize, n: usize) -> (usize, usize) {
        let dweight = self.dweight_split(rows, k, n).1;
        let dbias = if self.sums_bias() {
            dweight
        } else {
            self.dbias_split(rows, n).1
        };
        (dweight, dbias)
    }
}

/// Splits a reduction of `len` steps over about `want` workgroups, each split at
/// least `min` steps and at most [`MAX_SPLIT_STEPS`]: (chunk, splits), the chunk a
/// multiple of `align`, every split non-empty.
fn split(len: usize, want: usize, align: usize, min: usize) -> (usize, usize) {
    let splits = want
        .clamp(1, len.div_ceil(min).max(1))
        .max(len.div_ceil(MAX_SPLIT_STEPS));
    let chunk = len.div_ceil(splits).div_ceil(align) * align;
    (chunk, len.div_ceil(chunk))
}

/// Whether the tensor-core core (matmul_coop.wgsl) runs on `ctx`, or why not.
pub fn coop_supported(ctx: &WgpuContext) -> Result<(), String> {
    use wgpu::Features as F;
    let needed =
        F::SHADER_F16 | F::SUBGROUP | F::SUBGROUP_BARRIER | F::EXPERIMENTAL_COOPERATIVE_MATRIX;
    if !ctx.adapter_features().contains(needed) {
        return Err(format!(
            "{} offers no cooperative matrices with shader-f16, subgroups and subgroup barriers",
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
            "the tensor-core cores are written for subgroups of 32; this adapter's subgroups are {} to {} wide",
            info.subgroup_min_size, info.subgroup_max_size
        ));
    }
    Ok(())
}

/// Bytes of workgroup memory the C2 core of matmul_coop.wgsl declares.
const COOP2_WORKGROUP_BYTES: u32 = 49152;

/// Whether the C2 core of matmul_coop.wgsl runs on `ctx` (as the C1 core, with 48 KiB of
/// workgroup memory), or why not.
pub fn coop2_supported(ctx: &WgpuContext) -> Result<(), String> {
    coop_with_bytes(ctx, "coop2", COOP2_WORKGROUP_BYTES)
}

/// Bytes of workgroup memory matmul_coop3.wgsl declares.
const COOP3_WORKGROUP_BYTES: u32 = 43008;

/// Whether matmul_coop3.wgsl runs on `ctx` (as the C1 core, with 42 KiB of workgroup
/// memory), or why not.
pub fn coop3_supported(ctx: &WgpuContext) -> Result<(), String> {
    coop_with_bytes(ctx, "coop3", COOP3_WORKGROUP_BYTES)
}

/// [`coop_supported`], and `bytes` of workgroup memory for the core `name`.
fn coop_with_bytes(ctx: &WgpuContext, name: &str, bytes: u32) -> Result<(), String> {
    coop_supported(ctx)?;
    let have = ctx.limits().max_compute_workgroup_storage_size;
    if have < bytes {
        return Err(format!(
            "the {name} core needs {bytes} bytes of workgroup memory; this device has {have}"
        ));
    }
    Ok(())
}

/// The configuration the tensor-core cores use: 16x16x16, f16 x f16 -> f32.
pub fn is_f16_16x16(c: &wgpu::CooperativeMatrixProperties) -> bool {
    use wgpu::CooperativeScalarType::{F16, F32};
    (c.m_size, c.n_size, c.k_size) == (16, 16, 16) && c.ab_type == F16 && c.cr_type == F32
}

#[cfg(test)]
mod tests {
    use super::MatmulVariant;

    /// The workgroup memory each core declares, counted from its WGSL.
    #[test]
    fn workgroup_bytes_match_the_cores_declarations() {
        let cases = [
            (MatmulVariant::Tiled, 2 * 512 * 16),
            (MatmulVariant::Narrow, 256 * 16 + 512 * 16),
            (MatmulVariant::Cpu32, 0),
            (MatmulVariant::F16 { split: false }, 2 * 512 * 8),
            (
                MatmulVariant::Coop { split: false },
                6144 * 2 + 4352 * 2 + 2048 * 4,
            ),
            (
                MatmulVariant::Coop2 { split: true },
                2 * 10240 * 2 + 2048 * 4,
            ),
            (
                MatmulVariant::Coop3 { split: false },
                6144 * 2 + 6144 * 2 + 4608 * 4,
            ),
        ];
        for (variant, bytes) in cases {
            assert_eq!(variant.workgroup_bytes(), bytes, "{variant:?}");
        }
    }
}

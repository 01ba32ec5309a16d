//! Which f32 variant a GPU runs a GEMM in, by the class of its shape: a table, so
//! that a sweep's winners (`scripts/gpu-run.sh gemm-sweep`, whose table has a class
//! column) go in as a line each; [`MatmulVariant::choose_for`], here, picks for CPU
//! adapters and the f16 products too.

use super::variant::{MatmulVariant, MIN_SPLIT_K, TARGET_WORKGROUPS, TILE};
use crate::config::Precision;
use crate::tuning::Target;

/// The GEMM shapes that want different tilings, told apart by the output's 128x128
/// tiles and the reduction's length. The shakespeare step's 15 products (64 x 256
/// rows, width 384, MLP 1536, 65 symbols) fall in every class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShapeClass {
    /// Fewer tiles than a wave of a large GPU over a long reduction: the weight
    /// gradients (a 384 x 1152 output over 16k rows).
    FewTiles,
    /// Under half of `TARGET_WORKGROUPS` tiles, reduced over 1024 or more and at
    /// least 4 times the output's width: the MLP's projection and its input
    /// gradient (16k x 384 over 1536).
    LongK,
    /// A reduction shorter than a split's least (`MIN_SPLIT_K`) over a wave of
    /// tiles or more: the head's input gradient (16k x 384 over 65).
    ShortK,
    /// Outputs narrower than one tile: the head's logits (16k x 65 over 384).
    ThinOutput,
    /// `TARGET_WORKGROUPS` tiles or more: the wide forwards and input gradients
    /// (16k x 1152 and 16k x 1536 over 384).
    ManyTiles,
    /// The rest: a few waves of tiles over a middling reduction (16k x 384 over
    /// 384 and over 1152).
    SomeTiles,
}

/// The f32 variant of each class on GPUs (a class missing here takes `Tiled`): each
/// class's winner, summed over its shapes, in the H200 sweep of 2026-12-04 with
/// whole-tile launches loading vec4s (`scripts/gpu-run.sh gemm-sweep`,
/// bench-results/gemm-sweep/2026-12-04-whole-tiles/sweep.md). `Narrow`'s 64-row
/// tiles (twice the workgroups, half the registers) won every class but the
/// thin-output head's logits: long-k 1.138 ms against `Tiled`'s 1.264, many-tiles
/// 1.646 against 1.757, some-tiles 0.723 against 0.827. Few-tiles stays split-K
/// although `Narrow` won its five shakespeare shapes (2.003 ms against 2.086): those
/// are weight gradients, and with `Narrow` there the page's `small` step (whose
/// few-tiles products include forwards and input gradients, which `Narrow` does not
/// split) measured 9% slower natively (BENCHMARKS.md).
pub const GPU_CHOICE: &[(ShapeClass, MatmulVariant)] = &[
    (ShapeClass::FewTiles, MatmulVariant::SplitK),
    (ShapeClass::LongK, MatmulVariant::Narrow),
    (ShapeClass::ShortK, MatmulVariant::Narrow),
    (ShapeClass::ThinOutput, MatmulVariant::Tiled),
    (ShapeClass::ManyTiles, MatmulVariant::Narrow),
    (ShapeClass::SomeTiles, MatmulVariant::Narrow),
];

impl ShapeClass {
    pub const ALL: [ShapeClass; 6] = [
        ShapeClass::FewTiles,
        ShapeClass::LongK,
        ShapeClass::ShortK,
        ShapeClass::ThinOutput,
        ShapeClass::ManyTiles,
        ShapeClass::SomeTiles,
    ];

    /// The class of an `m x n` output reduced over `k`, the first that fits in
    /// the order of [`ShapeClass::ALL`].
    pub fn of(m: usize, n: usize, k: usize) -> ShapeClass {
        let tiles = m.div_ceil(TILE) * n.div_ceil(TILE);
        if tiles < TARGET_WORKGROUPS / 16 && k >= 2 * MIN_SPLIT_K {
            ShapeClass::FewTiles
        } else if tiles < TARGET_WORKGROUPS / 2 && k >= 1024 && k >= 4 * n {
            ShapeClass::LongK
        } else if k < MIN_SPLIT_K && tiles >= TARGET_WORKGROUPS / 4 {
            ShapeClass::ShortK
        } else if n < TILE {
            ShapeClass::ThinOutput
        } else if tiles >= TARGET_WORKGROUPS {
            ShapeClass::ManyTiles
        } else {
            ShapeClass::SomeTiles
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ShapeClass::FewTiles => "few-tiles",
            ShapeClass::LongK => "long-k",
            ShapeClass::ShortK => "short-k",
            ShapeClass::ThinOutput => "thin-output",
            ShapeClass::ManyTiles => "many-tiles",
            ShapeClass::SomeTiles => "some-tiles",
        }
    }

    /// The f32 variant GPUs run this class in ([`GPU_CHOICE`]).
    pub fn gpu_choice(self) -> MatmulVariant {
        GPU_CHOICE
            .iter()
            .find(|(c, _)| *c == self)
            .map_or(MatmulVariant::Tiled, |&(_, v)| v)
    }
}

impl MatmulVariant {
    /// The variant for an `m x n` output reduced over `k` on adapters of `target`,
    /// f16 products on the fallback core (the tensor-core cores tile, split and
    /// fill their grids alike): on GPUs, the variant of the shape's class
    /// ([`GPU_CHOICE`]). Under f16, the same split.
    pub fn choose_for(
        target: Target,
        precision: Precision,
        m: usize,
        n: usize,
        k: usize,
    ) -> MatmulVariant {
        let f32_variant = match target {
            // CPU adapters in a browser: SwiftShader in Chromium.
            Target::Cpu if cfg!(target_arch = "wasm32") => MatmulVariant::Cpu16,
            Target::Cpu => MatmulVariant::Cpu32,
            Target::Gpu => Self::choose_gpu(m, n, k),
        };
        match precision {
            Precision::F32 => f32_variant,
            Precision::F16 => MatmulVariant::F16 {
                split: f32_variant.is_split(),
            },
        }
    }

    /// [`MatmulVariant::choose_for`]'s f32 choice on GPUs: the one of the shape's
    /// class in [`GPU_CHOICE`].
    pub(super) fn choose_gpu(m: usize, n: usize, k: usize) -> MatmulVariant {
        ShapeClass::of(m, n, k).gpu_choice()
    }
}

#[cfg(test)]
mod tests {
    use super::ShapeClass;
    use super::{MatmulVariant, Precision, Target};

    /// The shakespeare step's 15 GEMMs (64 x 256 rows; width 384, MLP 1536, 65
    /// symbols) as (output rows, output columns, reduction) take the H200 sweep's
    /// choices (`super::GPU_CHOICE`): split-K every weight gradient, Tiled the head's
    /// logits, Narrow the rest; f16 splits where f32 does.
    #[test]
    fn the_shakespeare_step_takes_the_sweeps_choices() {
        let rows = 16384;
        let layers = [(384, 1152), (384, 384), (384, 1536), (1536, 384), (384, 65)];
        for (k, n) in layers {
            let forward = MatmulVariant::choose_gpu(rows, n, k);
            let dinp = MatmulVariant::choose_gpu(rows, k, n);
            let dweight = MatmulVariant::choose_gpu(n, k, rows);
            let want_forward = match n {
                65 => MatmulVariant::Tiled,
                _ => MatmulVariant::Narrow,
            };
            assert_eq!(forward, want_forward, "forward k {k} n {n}");
            assert_eq!(dinp, MatmulVariant::Narrow, "dinp k {k} n {n}");
            assert_eq!(dweight, MatmulVariant::SplitK, "dweight k {k} n {n}");
            // f16 follows: the weight gradients split, the rest not.
            for (m, n, k, split) in [(rows, n, k, false), (rows, k, n, false), (n, k, rows, true)] {
                let f16 = MatmulVariant::choose_for(Target::Gpu, Precision::F16, m, n, k);
                assert_eq!(f16, MatmulVariant::F16 { split }, "{m}x{n} over {k}");
            }
        }
    }

    /// A few-tiles shape has fewer than 64 tiles of 128x128, so split-K's grid
    /// (128-row tiles, and the slices it splits the reduction into) stays under
    /// WebGPU's 65535 a dimension at any reduction length: a weight
    /// gradient's reduction is the batch's rows, and a large batch must not make the
    /// launcher panic ([`MatmulVariant::launch_grid`]).
    #[test]
    fn few_tiles_grids_fit_at_any_batch() {
        use super::super::operands::Layout;
        let mut seen = 0;
        for m in (1..=8192).step_by(61) {
            for n in (1..=8192).step_by(67) {
                for k in [256, 65_536, 1 << 21, 1 << 26] {
                    if ShapeClass::of(m, n, k) != ShapeClass::FewTiles {
                        continue;
                    }
                    seen += 1;
                    let variant = MatmulVariant::choose_gpu(m, n, k);
                    assert_eq!(variant, MatmulVariant::SplitK, "{m}x{n} over {k}");
                    // As a weight gradient (output [n, k] of a Linear over k rows)
                    // and as a forward (output [rows, n] over k inputs).
                    let splits = [
                        variant.split_of(Layout::Dweight, k, n, m).1,
                        variant.split_of(Layout::Forward, m, k, n).1,
                    ];
                    for splits in splits {
                        let grid = variant.grid(m, n, splits);
                        assert!(
                            grid.iter().all(|&g| g <= 65535),
                            "{m}x{n} over {k}: {grid:?}"
                        );
                    }
                }
            }
        }
        assert!(seen > 1000, "{seen} few-tiles shapes");
    }

    /// The shakespeare step's 15 GEMMs (64 x 256 rows; width 384, MLP 1536, 65
    /// symbols) as (output rows, output columns, reduction) and their classes.
    #[test]
    fn the_shakespeare_step_falls_in_every_class() {
        use ShapeClass::*;
        let rows = 16384;
        // (k, n) of each layer, then the classes of its forward, dinp and dweight.
        let layers = [
            ((384, 1152), [ManyTiles, SomeTiles, FewTiles]),
            ((384, 384), [SomeTiles, SomeTiles, FewTiles]),
            ((384, 1536), [ManyTiles, LongK, FewTiles]),
            ((1536, 384), [LongK, ManyTiles, FewTiles]),
            ((384, 65), [ThinOutput, ShortK, FewTiles]),
        ];
        for ((k, n), want) in layers {
            let got = [
                ShapeClass::of(rows, n, k),
                ShapeClass::of(rows, k, n),
                ShapeClass::of(n, k, rows),
            ];
            assert_eq!(got, want, "k {k} n {n}");
        }
    }
}

//! Which f32 variant a GPU runs a GEMM in, by the class of its shape: a table, so
//! that a sweep's winners (`scripts/gpu-run.sh gemm-sweep`, whose table has a class
//! column) go in as a line each; [`MatmulVariant::choose_for`], here, picks for CPU
//! adapters and the f16 products too.

use super::operands::Layout;
use super::variant::{MatmulVariant, MIN_SPLIT_K, TARGET_WORKGROUPS, TILE};
use crate::config::Precision;
use crate::tuning::Target;

/// The GEMM shapes that want different tilings, told apart by the output's 128x128
/// tiles and the reduction's length, and the weight gradients (whose operands are
/// both read along the output, k-major) from the other products. The shakespeare
/// step's 15 products (64 x 256 rows, width 384, MLP 1536, 65 symbols) fall in
/// every class but few-tiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShapeClass {
    /// Weight gradients with fewer tiles than a wave of a large GPU over a long
    /// reduction (the batch's rows): every weight gradient of the step (a 384 x
    /// 1152 output over 16k rows).
    WeightGradients,
    /// Forwards and input gradients of such shapes: the page's small presets.
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
/// tiles (twice the workgroups, fewer registers) won every class but the
/// thin-output head's logits: long-k 1.138 ms against `Tiled`'s 1.264, many-tiles
/// 1.646 against 1.757, some-tiles 0.723 against 0.827. The weight gradients take
/// `Narrow` with its own split (`NARROW_DWEIGHT_WORKGROUPS` in variant.rs): in the
/// step, 9.92 GPU ms against split-K's 11.37 (H100, BENCHMARKS.md). Few-tiles stays
/// split-K: `Narrow` does not split a forward's or input gradient's reduction, and
/// there the page's `small` step measured 9% slower natively.
pub const GPU_CHOICE: &[(ShapeClass, MatmulVariant)] = &[
    (ShapeClass::WeightGradients, MatmulVariant::Narrow),
    (ShapeClass::FewTiles, MatmulVariant::SplitK),
    (ShapeClass::LongK, MatmulVariant::Narrow),
    (ShapeClass::ShortK, MatmulVariant::Narrow),
    (ShapeClass::ThinOutput, MatmulVariant::Tiled),
    (ShapeClass::ManyTiles, MatmulVariant::Narrow),
    (ShapeClass::SomeTiles, MatmulVariant::Narrow),
];

impl ShapeClass {
    pub const ALL: [ShapeClass; 7] = [
        ShapeClass::WeightGradients,
        ShapeClass::FewTiles,
        ShapeClass::LongK,
        ShapeClass::ShortK,
        ShapeClass::ThinOutput,
        ShapeClass::ManyTiles,
        ShapeClass::SomeTiles,
    ];

    /// The class of `layout`'s product, an `m x n` output reduced over `k`: the
    /// first that fits in the order of [`ShapeClass::ALL`].
    pub fn of(layout: Layout, m: usize, n: usize, k: usize) -> ShapeClass {
        let tiles = m.div_ceil(TILE) * n.div_ceil(TILE);
        if tiles < TARGET_WORKGROUPS / 16 && k >= 2 * MIN_SPLIT_K {
            match layout {
                Layout::Dweight => ShapeClass::WeightGradients,
                _ => ShapeClass::FewTiles,
            }
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
            ShapeClass::WeightGradients => "weight-gradients",
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
    /// The variant for `layout`'s product, an `m x n` output reduced over `k`, on
    /// adapters of `target`, f16 products on the fallback core (the tensor-core
    /// cores tile, split and fill their grids alike): on GPUs, the variant of the
    /// product's class ([`GPU_CHOICE`]). Under f16, the same split.
    pub fn choose_for(
        target: Target,
        precision: Precision,
        layout: Layout,
        m: usize,
        n: usize,
        k: usize,
    ) -> MatmulVariant {
        let f32_variant = match target {
            // CPU adapters in a browser: SwiftShader in Chromium.
            Target::Cpu if cfg!(target_arch = "wasm32") => MatmulVariant::Cpu16,
            Target::Cpu => MatmulVariant::Cpu32,
            Target::Gpu => Self::choose_gpu(layout, m, n, k),
        };
        match precision {
            Precision::F32 => f32_variant,
            Precision::F16 => MatmulVariant::F16 {
                split: f32_variant.is_split(),
            },
        }
    }

    /// [`MatmulVariant::choose_for`]'s f32 choice on GPUs: the one of the
    /// product's class in [`GPU_CHOICE`].
    pub(super) fn choose_gpu(layout: Layout, m: usize, n: usize, k: usize) -> MatmulVariant {
        ShapeClass::of(layout, m, n, k).gpu_choice()
    }
}

#[cfg(test)]
mod tests {
    use super::{Layout, ShapeClass};
    use super::{MatmulVariant, Precision, Target};

    /// The shakespeare step's 15 GEMMs (64 x 256 rows; width 384, MLP 1536, 65
    /// symbols) as (output rows, output columns, reduction) take the sweeps'
    /// choices (`super::GPU_CHOICE`): Narrow every weight gradient, Tiled the head's
    /// logits, Narrow the rest; f16 splits where f32 does (nowhere).
    #[test]
    fn the_shakespeare_step_takes_the_sweeps_choices() {
        let rows = 16384;
        let layers = [(384, 1152), (384, 384), (384, 1536), (1536, 384), (384, 65)];
        for (k, n) in layers {
            let products = [
                (Layout::Forward, [rows, n, k]),
                (Layout::Dinp, [rows, k, n]),
                (Layout::Dweight, [n, k, rows]),
            ];
            let want = [
                if n == 65 {
                    MatmulVariant::Tiled
                } else {
                    MatmulVariant::Narrow
                },
                MatmulVariant::Narrow,
                MatmulVariant::Narrow,
            ];
            for ((layout, [m, n, k]), want) in products.into_iter().zip(want) {
                let what = format!("{} {m}x{n} over {k}", layout.name());
                assert_eq!(MatmulVariant::choose_gpu(layout, m, n, k), want, "{what}");
                let f16 = MatmulVariant::choose_for(Target::Gpu, Precision::F16, layout, m, n, k);
                assert_eq!(f16, MatmulVariant::F16 { split: false }, "{what}");
            }
        }
    }

    /// A few-tiles shape has fewer than 64 tiles of 128x128, so the grids of its
    /// variants (split-K's 128-row tiles as a forward, Narrow's 64-row ones as a
    /// weight gradient, and the slices each splits the reduction into) stay under
    /// WebGPU's 65535 a dimension at any reduction length: a weight gradient's
    /// reduction is the batch's rows, and a large batch must not make the launcher
    /// panic ([`MatmulVariant::launch_grid`]).
    #[test]
    fn few_tiles_grids_fit_at_any_batch() {
        let mut seen = 0;
        for m in (1..=8192).step_by(61) {
            for n in (1..=8192).step_by(67) {
                for k in [256, 65_536, 1 << 21, 1 << 26] {
                    // As a weight gradient (output [m, n] of a Linear of n inputs and m
                    // outputs over k rows) and as a forward (output [m, n] over k
                    // inputs).
                    for (layout, class, want, rows, inputs, outputs) in [
                        (
                            Layout::Dweight,
                            ShapeClass::WeightGradients,
                            MatmulVariant::Narrow,
                            k,
                            n,
                            m,
                        ),
                        (
                            Layout::Forward,
                            ShapeClass::FewTiles,
                            MatmulVariant::SplitK,
                            m,
                            k,
                            n,
                        ),
                    ] {
                        if ShapeClass::of(layout, m, n, k) != class {
                            continue;
                        }
                        seen += 1;
                        let variant = MatmulVariant::choose_gpu(layout, m, n, k);
                        assert_eq!(variant, want, "{m}x{n} over {k}");
                        let splits = variant.split_of(layout, rows, inputs, outputs).1;
                        let grid = variant.grid(m, n, splits);
                        assert!(
                            grid.iter().all(|&g| g <= 65535),
                            "{} {m}x{n} over {k}: {grid:?}",
                            layout.name()
                        );
                    }
                }
            }
        }
        assert!(seen > 2000, "{seen} few-tiles shapes");
    }

    /// The shakespeare step's 15 GEMMs (64 x 256 rows; width 384, MLP 1536, 65
    /// symbols) as (output rows, output columns, reduction) and their classes:
    /// every class but few-tiles.
    #[test]
    fn the_shakespeare_steps_classes() {
        use ShapeClass::*;
        let rows = 16384;
        // (k, n) of each layer, then the classes of its forward, dinp and dweight.
        let layers = [
            ((384, 1152), [ManyTiles, SomeTiles, WeightGradients]),
            ((384, 384), [SomeTiles, SomeTiles, WeightGradients]),
            ((384, 1536), [ManyTiles, LongK, WeightGradients]),
            ((1536, 384), [LongK, ManyTiles, WeightGradients]),
            ((384, 65), [ThinOutput, ShortK, WeightGradients]),
        ];
        for ((k, n), want) in layers {
            let got = [
                ShapeClass::of(Layout::Forward, rows, n, k),
                ShapeClass::of(Layout::Dinp, rows, k, n),
                ShapeClass::of(Layout::Dweight, n, k, rows),
            ];
            assert_eq!(got, want, "k {k} n {n}");
        }
    }
}

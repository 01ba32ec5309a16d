//! Which f32 variant a GPU runs a GEMM in, by the class of its shape: a table, so
//! that a sweep's winners (`scripts/gpu-run.sh gemm-sweep`, whose table has a class
//! column) go in as a line each. CPU adapters and the f16 cores choose elsewhere
//! (`MatmulVariant::choose_for`).

use super::variant::{MatmulVariant, MIN_SPLIT_K, TARGET_WORKGROUPS, TILE};

/// The GEMM shapes that want different tilings, told apart by the output's 128x128
/// tiles and the reduction's length. The shakespeare step's 15 products (64 x 256
/// rows, width 384, MLP 1536, 65 symbols) fall in every class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShapeClass {
    /// Fewer tiles than a wave of a large GPU over a long reduction: the weight
    /// gradients (a 384 x 1152 output over 16k rows).
    FewTiles,
    /// Under half of [`TARGET_WORKGROUPS`] tiles, reduced over 1024 or more and at
    /// least 4 times the output's width: the MLP's projection and its input
    /// gradient (16k x 384 over 1536).
    LongK,
    /// A reduction shorter than a split's least ([`MIN_SPLIT_K`]) over a wave of
    /// tiles or more: the head's input gradient (16k x 384 over 65).
    ShortK,
    /// Outputs narrower than one tile: the head's logits (16k x 65 over 384).
    ThinOutput,
    /// [`TARGET_WORKGROUPS`] tiles or more: the wide forwards and input gradients
    /// (16k x 1152 and 16k x 1536 over 384).
    ManyTiles,
    /// The rest: a few waves of tiles over a middling reduction (16k x 384 over
    /// 384 and over 1152).
    SomeTiles,
}

/// The f32 variant of each class on GPUs (a class missing here takes `Tiled`): each
/// class's winner, summed over its shapes, in the H200 sweep of 2026-12-03
/// (`scripts/gpu-run.sh gemm-sweep`, bench-results/gemm-sweep/2026-12-03/sweep.md).
/// `Narrow`'s 64-row tiles where few tiles would leave the GPU idle (the weight
/// gradients, whose rows every variant splits) and where the reduction is too short
/// to split; `Tiled` elsewhere, long reductions included. Where the winner was
/// within noise of the variant already chosen (many-tiles: `SplitK` 1.791 ms
/// against 1.809; short-k: `SplitK` 0.057 against 0.060), the choice stays.
pub const GPU_CHOICE: &[(ShapeClass, MatmulVariant)] = &[
    (ShapeClass::FewTiles, MatmulVariant::Narrow),
    (ShapeClass::LongK, MatmulVariant::Tiled),
    (ShapeClass::ShortK, MatmulVariant::Narrow),
    (ShapeClass::ThinOutput, MatmulVariant::Tiled),
    (ShapeClass::ManyTiles, MatmulVariant::Tiled),
    (ShapeClass::SomeTiles, MatmulVariant::Tiled),
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

#[cfg(test)]
mod tests {
    use super::ShapeClass;

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

//! The tiled GPU attention kernels (`attention_tiled*.wgsl`): a workgroup's 32
//! queries (or keys) against blocks of keys (or queries) as small matrix products,
//! each thread 4 rows by a few columns in registers, one score worked out by one
//! thread. Heads of up to 64 channels; [`super::Attention`] chooses them and
//! launches them like the paired kernels.

use super::wgsl::unroll;

/// Head-size bounds of the compiled tiled kernels, in vec4s: hs <= 16, 64. Larger
/// heads would pass 32 KiB of workgroup memory (WebGPU's usual most).
pub(super) const HS4S: [usize; 2] = [4, 16];
/// Queries of a forward workgroup (`BQ`) and keys it stages a step (`BK`).
const FORWARD_QUERIES: usize = 32;
const FORWARD_KEYS: usize = 32;
/// Rows a backward workgroup holds (`BR`: queries of a dq block, keys of a dk/dv
/// block) and rows of the other side it streams a step (`BS`).
const RESIDENT: usize = 32;
const STREAMED: usize = 16;
/// Threads along a block's columns (`NX`); as many along its rows, each 4 rows.
const NX: usize = 8;
/// Row strides of the staged weights in vec4s: `PS4` (forward), `W4` (backward).
const FORWARD_WEIGHTS4: usize = 10;
const BACKWARD_WEIGHTS4: usize = 6;
/// Rows a workgroup of the row-sum pass (`attention_dsum.wgsl`).
pub(super) const DSUM_ROWS: usize = 64;

pub(super) const FORWARD_WGSL: &str = with_dropout_mask!("attention_tiled.wgsl");
pub(super) const BACKWARD_WGSL: &str = with_dropout_mask!("attention_tiled_backward.wgsl");
pub(super) const DSUM_WGSL: &str = include_str!("attention_dsum.wgsl");

/// Queries (forward, dq) or keys (dk/dv) of one workgroup.
pub(super) const BLOCK: usize = FORWARD_QUERIES;

/// The index into [`HS4S`] of the kernels for heads of `hs` channels, if any.
pub(super) fn variant_for(hs: usize) -> Option<usize> {
    HS4S.iter().position(|&hs4| hs <= 4 * hs4)
}

/// The forward's and the backward's sources for heads of up to `4 * HS4S[v]`
/// channels: `const HS4`, `const STRIDE` and `const CV` prepended, the rows of a
/// thread (`#I`), its columns (`#J`), 4 streamed rows (`#K`) and its channel vec4s
/// (`#C`) written out. Every marker is unrolled, in the browser too: a thread's
/// state is a few dozen named vec4s, a fraction of the paired kernels' unrolled
/// heads.
pub(super) fn sources(v: usize) -> (String, String) {
    let hs4 = HS4S[v];
    let head = format!(
        "const HS4: u32 = {hs4}u;\nconst STRIDE: u32 = {}u;\nconst CV: u32 = {}u;\n",
        hs4 + 1,
        hs4.div_ceil(NX)
    );
    let expand = |template: &str, columns: usize| {
        let rows = unroll(template, "#I", 4);
        let columns = unroll(&rows, "#J", columns);
        let streamed = unroll(&columns, "#K", 4);
        head.clone() + &unroll(&streamed, "#C", hs4.div_ceil(NX))
    };
    (
        expand(FORWARD_WGSL, FORWARD_KEYS / NX),
        expand(BACKWARD_WGSL, STREAMED / NX),
    )
}

/// Bytes of workgroup memory the tiled kernels for heads of `hs` channels declare
/// (the larger of the forward's and the backward's), `None` past their largest head.
pub(super) fn workgroup_bytes(hs: usize) -> Option<u64> {
    let stride = HS4S[variant_for(hs)?] + 1;
    let forward = (FORWARD_QUERIES + FORWARD_KEYS) * stride * 16
        + FORWARD_QUERIES * FORWARD_WEIGHTS4 * 16
        + FORWARD_QUERIES * 2 * 16;
    let backward = 2 * (RESIDENT + STREAMED) * stride * 16
        + 2 * RESIDENT * BACKWARD_WEIGHTS4 * 16
        + 2 * STREAMED * 4;
    Some(forward.max(backward) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sizes this module counts with are the shaders'.
    #[test]
    fn block_sizes_are_the_shaders() {
        let consts = [
            (FORWARD_WGSL, format!("const BQ: u32 = {FORWARD_QUERIES}u;")),
            (FORWARD_WGSL, format!("const BK: u32 = {FORWARD_KEYS}u;")),
            (FORWARD_WGSL, format!("const NX: u32 = {NX}u;")),
            (
                FORWARD_WGSL,
                format!("const PS4: u32 = {FORWARD_WEIGHTS4}u;"),
            ),
            (BACKWARD_WGSL, format!("const BR: u32 = {RESIDENT}u;")),
            (BACKWARD_WGSL, format!("const BS: u32 = {STREAMED}u;")),
            (BACKWARD_WGSL, format!("const NX: u32 = {NX}u;")),
            (
                BACKWARD_WGSL,
                format!("const W4: u32 = {BACKWARD_WEIGHTS4}u;"),
            ),
            (DSUM_WGSL, format!("@workgroup_size({DSUM_ROWS})")),
            (DSUM_WGSL, format!("wg.x * {DSUM_ROWS}u")),
        ];
        for (source, line) in consts {
            assert!(source.contains(&line), "{line}");
        }
    }

    /// Every marker is written out, and the 64-channel kernels fit in 32 KiB of
    /// workgroup memory (WebGPU's usual most, SwiftShader's).
    #[test]
    fn sources_are_fully_expanded_and_fit_32_kib() {
        for (v, hs4) in HS4S.iter().enumerate() {
            let (forward, backward) = sources(v);
            for wgsl in [&forward, &backward] {
                for marker in ["#I", "#J", "#K", "#C"] {
                    assert!(
                        !wgsl
                            .lines()
                            .any(|l| l.contains(marker) && !l.trim_start().starts_with("//")),
                        "{marker} left in the kernels for HS4 {hs4}"
                    );
                }
            }
        }
        assert!(workgroup_bytes(64).unwrap() <= 32 * 1024);
        assert_eq!(workgroup_bytes(65), None);
    }
}

//! The tiled GPU attention kernels (`attention_tiled*.wgsl`): blocks of queries
//! against blocks of keys as small matrix products in registers, one score worked
//! out by one thread. The forward takes 32 queries a workgroup; the backward one
//! (batch, head) a workgroup, so that it adds each key block's share of dq into the
//! rows it owns. Heads of up to 64 channels; [`super::Attention`] chooses them and
//! launches them like the paired kernels.

use super::wgsl::unroll;

/// Head-size bounds of the compiled tiled kernels, in vec4s: hs <= 16, 64. Larger
/// heads would pass 32 KiB of workgroup memory (WebGPU's usual most).
pub(super) const HS4S: [usize; 2] = [4, 16];
/// Queries of a forward workgroup (`BQ`) and keys it stages a step (`BK`).
const FORWARD_QUERIES: usize = 32;
const FORWARD_KEYS: usize = 32;
/// Keys of a backward key block (`BC`) and queries of each tile it streams (`BR`).
const BACKWARD_KEYS: usize = 32;
const BACKWARD_QUERIES: usize = 16;
/// Threads of a backward workgroup (`WG`).
const BACKWARD_THREADS: usize = 128;
/// Threads along a forward block's columns (`NX`); as many along its rows, each 4 rows.
const NX: usize = 8;
/// Row strides of the staged weights in vec4s: `PS4` (forward), `W4` (backward).
const FORWARD_WEIGHTS4: usize = 10;
const BACKWARD_WEIGHTS4: usize = 10;
/// Rows a workgroup of the row-sum pass (`attention_dsum.wgsl`), 16 threads a row.
pub const DSUM_ROWS: usize = 8;

pub(super) const FORWARD_WGSL: &str = with_dropout_mask!("attention_tiled.wgsl");
pub(super) const BACKWARD_WGSL: &str = with_dropout_mask!("attention_tiled_backward.wgsl");
pub(super) const DSUM_WGSL: &str = include_str!("attention_dsum.wgsl");

/// Queries of one forward workgroup.
pub(super) const BLOCK: usize = FORWARD_QUERIES;

/// The index into [`HS4S`] of the kernels for heads of `hs` channels, if any.
pub(super) fn variant_for(hs: usize) -> Option<usize> {
    HS4S.iter().position(|&hs4| hs <= 4 * hs4)
}

/// The forward's and the backward's sources for heads of up to `4 * HS4S[v]`
/// channels: `const HS4`, `const STRIDE` and `const CV` prepended, and each
/// thread's rows and columns written out: in the forward its rows (`#I`), its
/// columns (`#J`), 4 streamed rows (`#K`) and its channel vec4s (`#C`); in the
/// backward its 2 keys (`#A`) and 2 queries (`#B`) of the scores, its 4 keys of dk
/// and dv (`#R`) and its vec4s of each query tile's loads (`#L`). Every marker is unrolled, in the browser too: a thread's state
/// is a few dozen named values, a fraction of the paired kernels' unrolled heads.
pub(super) fn sources(v: usize) -> (String, String) {
    let hs4 = HS4S[v];
    let head = format!(
        "const HS4: u32 = {hs4}u;\nconst STRIDE: u32 = {}u;\nconst CV: u32 = {}u;\n",
        hs4 + 1,
        hs4.div_ceil(NX)
    );
    let rows = unroll(FORWARD_WGSL, "#I", 4);
    let columns = unroll(&rows, "#J", FORWARD_KEYS / NX);
    let streamed = unroll(&columns, "#K", 4);
    let forward = head.clone() + &unroll(&streamed, "#C", hs4.div_ceil(NX));
    let keys = unroll(BACKWARD_WGSL, "#A", 2);
    let queries = unroll(&keys, "#B", 2);
    let rows = unroll(&queries, "#R", 4);
    let backward = head
        + &unroll(
            &rows,
            "#L",
            (BACKWARD_QUERIES * hs4).div_ceil(BACKWARD_THREADS),
        );
    (forward, backward)
}

/// Bytes of workgroup memory the tiled kernels for heads of `hs` channels declare
/// (the larger of the forward's and the backward's), `None` past their largest head.
pub(super) fn workgroup_bytes(hs: usize) -> Option<u64> {
    let stride = HS4S[variant_for(hs)?] + 1;
    let forward = (FORWARD_QUERIES + FORWARD_KEYS) * stride * 16
        + FORWARD_QUERIES * FORWARD_WEIGHTS4 * 16
        + FORWARD_QUERIES * 2 * 16;
    let backward = 2 * (BACKWARD_KEYS + BACKWARD_QUERIES) * stride * 16
        + 2 * BACKWARD_QUERIES * BACKWARD_WEIGHTS4 * 16;
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
            (BACKWARD_WGSL, format!("const BC: u32 = {BACKWARD_KEYS}u;")),
            (
                BACKWARD_WGSL,
                format!("const BR: u32 = {BACKWARD_QUERIES}u;"),
            ),
            (
                BACKWARD_WGSL,
                format!("const WG: u32 = {BACKWARD_THREADS}u;"),
            ),
            (
                BACKWARD_WGSL,
                format!("@workgroup_size({BACKWARD_THREADS})"),
            ),
            (
                BACKWARD_WGSL,
                format!("const W4: u32 = {BACKWARD_WEIGHTS4}u;"),
            ),
            (DSUM_WGSL, format!("@workgroup_size({})", 16 * DSUM_ROWS)),
            (DSUM_WGSL, format!("wg.x * {DSUM_ROWS}u + t / 16u")),
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
                for marker in ["#I", "#J", "#K", "#C", "#A", "#B", "#R", "#L"] {
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

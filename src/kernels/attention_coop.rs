//! The tensor-core attention kernels (`attention_coop*.wgsl`): q, k, v, the weights
//! and the backward's ds rounded to f16, every product on 16x16x16 cooperative
//! matrices summed in f32; the softmax, its statistics and the dropout in f32. For
//! `--precision f16` on devices that run the tensor-core GEMMs, heads of up to 64
//! channels in whole vec4s; [`super::Attention`] chooses them where
//! [`crate::gpu::ContextOptions::f16_attention`] asks, and launches them like the
//! tiled kernels (the backward after `attention_dsum.wgsl`).

use super::matmul::{coop_supported, GRAD_SCALE};
use super::wgsl::unroll;
use crate::gpu::WgpuContext;
use crate::reference::AttentionShape;

/// Channels a head may have (at most; zero-padded to it in workgroup memory).
pub(super) const MAX_HEAD: usize = 64;
/// Queries (forward, dq) or keys (dk/dv) of one workgroup.
pub(super) const BLOCK: usize = 64;

const FORWARD_WGSL: &str = with_dropout_mask!("attention_coop.wgsl");
const BACKWARD_WGSL: &str = with_dropout_mask!("attention_coop_backward.wgsl");
/// Extensions first in the module; the kernels call subgroup operations too, which
/// naga 30 has without a directive (these kernels run natively only).
const ENABLE: &str = "enable f16;\nenable wgpu_cooperative_matrix;\n";

/// Bytes of workgroup memory the forward and the backward declare.
const FORWARD_BYTES: u32 = 4608 * 2 + 2 * 2304 * 2 + 2560 * 2 + 4352 * 4;
const BACKWARD_BYTES: u32 = 2 * 4608 * 2 + 2 * 2304 * 2 + 2 * 1536 * 2 + 2 * 1280 * 4 + 2 * 32 * 4;

/// The forward's and the backward's sources, every marker written out: the
/// forward's #J (a lane's 16 scores as 4 vec4s) and #O (its 32 output channels as
/// 8), the backward's #J (a lane's 8 weights as 2).
pub(super) fn sources() -> (String, String) {
    let forward = unroll(&unroll(FORWARD_WGSL, "#J", 4), "#O", 8);
    let backward = format!(
        "const G: f32 = {GRAD_SCALE:.1};\n{}",
        unroll(BACKWARD_WGSL, "#J", 2)
    );
    (format!("{ENABLE}{forward}"), format!("{ENABLE}{backward}"))
}

/// 4-byte words of what the forward saves for the backward (`stats` in the
/// shaders): each row's logsumexp and, with dropout, the mask, `ceil(t / 16)` words
/// a row.
pub(super) fn stats_words(shape: AttentionShape, dropout: bool) -> usize {
    let AttentionShape { b, t, heads, .. } = shape;
    let rows = b * heads * t;
    if dropout {
        rows + rows * t.div_ceil(16)
    } else {
        rows
    }
}

/// Whether the tensor-core kernels run `shape`'s heads on `ctx`, or why not:
/// where the tensor-core GEMMs run ([`coop_supported`]), with their workgroup
/// memory, for heads of at most 64 channels whose rows start on vec4s.
pub(super) fn runs(ctx: &WgpuContext, c: usize, heads: usize) -> Result<(), String> {
    coop_supported(ctx)?;
    let need = FORWARD_BYTES.max(BACKWARD_BYTES);
    let have = ctx.limits().max_compute_workgroup_storage_size;
    if have < need {
        return Err(format!(
            "the tensor-core attention needs {need} bytes of workgroup memory; this device has {have}"
        ));
    }
    let hs = c / heads.max(1);
    if hs > MAX_HEAD || !hs.is_multiple_of(4) || !c.is_multiple_of(4) {
        return Err(format!(
            "the tensor-core attention runs heads of at most {MAX_HEAD} channels in whole vec4s, not {hs} (c = {c})"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sizes this module counts with are the shaders'.
    #[test]
    fn sizes_are_the_shaders() {
        let (forward, backward) = sources();
        for (source, line) in [
            (&forward, format!("const BQ: u32 = {BLOCK}u;")),
            (&forward, format!("const HS: u32 = {MAX_HEAD}u;")),
            (&backward, format!("const BR: u32 = {BLOCK}u;")),
            (&backward, format!("const HS: u32 = {MAX_HEAD}u;")),
        ] {
            assert!(source.contains(&line), "{line}");
        }
        // Every workgroup array, counted from its declaration.
        for (source, bytes) in [(&forward, FORWARD_BYTES), (&backward, BACKWARD_BYTES)] {
            let mut total = 0;
            for line in source.lines().filter(|l| l.starts_with("var<workgroup>")) {
                let (ty, len) = line
                    .split_once("array<")
                    .and_then(|(_, rest)| rest.split_once('>'))
                    .and_then(|(inner, _)| inner.split_once(", "))
                    .expect("an array declaration");
                let size = if ty == "f16" { 2 } else { 4 };
                total += size * len.parse::<u32>().expect("a length");
            }
            assert_eq!(total, bytes);
        }
        assert!(FORWARD_BYTES.max(BACKWARD_BYTES) <= 48 * 1024);
        for marker in ["#J", "#O"] {
            for source in [&forward, &backward] {
                assert!(!source
                    .lines()
                    .any(|l| l.contains(marker) && !l.trim_start().starts_with("//")));
            }
        }
    }
}

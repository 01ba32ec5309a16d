//! `tidepool info`: the adapter wgpu picks and what tidepool will use on it.

use tidepool::{fmt_bytes, WgpuContext};
use wgpu::{CooperativeScalarType, Features};

use super::output::say;
use super::Outcome;

pub async fn run() -> Outcome {
    let ctx = WgpuContext::new().await?;
    let limits = ctx.limits();
    say!("adapter: {}", ctx.adapter_name());
    say!("backend: {}", ctx.backend());
    say!(
        "largest storage binding: {}",
        fmt_bytes(ctx.max_binding_size())
    );
    say!(
        "storage buffers per stage: {}",
        limits.max_storage_buffers_per_shader_stage
    );
    // A binding's offset: the f16 copy of a weight binds at half the weight's.
    say!(
        "storage binding offsets: multiples of {} bytes",
        limits.min_storage_buffer_offset_alignment
    );
    let features = ctx.adapter_features();
    let yes = |f: Features| if features.contains(f) { "yes" } else { "no" };
    let info = ctx.adapter_info();
    say!("shader-f16: {}", yes(Features::SHADER_F16));
    say!(
        "subgroups: {} (sizes {} to {})",
        yes(Features::SUBGROUP),
        info.subgroup_min_size,
        info.subgroup_max_size
    );
    say!(
        "block reductions: {}",
        if ctx.subgroups() {
            "subgroups"
        } else if features.contains(Features::SUBGROUP) {
            "shared memory (subgroups wider than 128)"
        } else {
            "shared memory (no subgroups)"
        }
    );
    say!(
        "attention's half-head pairs: {}",
        if tidepool::kernels::attention_subgroups(&ctx) {
            "subgroup shuffles"
        } else {
            "shared memory"
        }
    );
    let coop = ctx.cooperative_matrices();
    say!(
        "cooperative matrices: {}{}",
        yes(Features::EXPERIMENTAL_COOPERATIVE_MATRIX),
        if coop.is_empty() {
            ""
        } else {
            ", M x N x K, A/B -> C:"
        }
    );
    for c in coop {
        say!(
            "  {}x{}x{} {} -> {}{}",
            c.m_size,
            c.n_size,
            c.k_size,
            scalar(c.ab_type),
            scalar(c.cr_type),
            if c.saturating_accumulation {
                " (saturating)"
            } else {
                ""
            }
        );
    }
    let f16 = if !features.contains(Features::SHADER_F16) {
        "refused (no shader-f16)"
    } else if coop.iter().any(tidepool::kernels::is_f16_16x16) {
        "GEMMs on tensor cores (cooperative matrices), where subgroups are 32 wide, and \
         attention too for heads of up to 64 channels"
    } else {
        "f16 tiles, f32 arithmetic (no tensor cores)"
    };
    say!("--precision f16: {f16}");
    Ok(())
}

/// A matrix element type as WGSL spells it.
fn scalar(t: CooperativeScalarType) -> &'static str {
    match t {
        CooperativeScalarType::F32 => "f32",
        CooperativeScalarType::F16 => "f16",
        CooperativeScalarType::I32 => "i32",
        CooperativeScalarType::U32 => "u32",
    }
}

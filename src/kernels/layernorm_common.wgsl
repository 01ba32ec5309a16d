// What layernorm.wgsl and layernorm_subgroups.wgsl share (joined in front of each):
// the uniform (layernorm.rs's `Params`), the forward's bindings, eps and the
// workgroup size.
struct Params {
    rows: u32, c: u32, chunks: u32, chunk_rows: u32,
    // backward_dinp: bits RESID, MASK; the mask's seed, threshold and scale.
    flags: u32, seed: u32, threshold: u32, scale: f32,
}

const RESID: u32 = 1u;
const MASK: u32 = 2u;

@group(0) @binding(0) var<uniform> p: Params;

// forward
@group(0) @binding(1) var<storage, read> inp: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
@group(0) @binding(5) var<storage, read_write> mean_out: array<f32>;
@group(0) @binding(6) var<storage, read_write> rstd_out: array<f32>;

const EPS: f32 = 1e-5;
const WG: u32 = 128u;

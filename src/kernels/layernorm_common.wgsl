// What every layernorm shader shares (joined in front of each): the uniform
// (layernorm.rs's `Params`), eps and the workgroup size.
struct Params {
    rows: u32, c: u32, chunks: u32, chunk_rows: u32,
    // backward_dinp: bits RESID, MASK; the mask's seed, threshold and scale.
    flags: u32, seed: u32, threshold: u32, scale: f32,
}

const RESID: u32 = 1u;
const MASK: u32 = 2u;

@group(0) @binding(0) var<uniform> p: Params;

const EPS: f32 = 1e-5;
const WG: u32 = 128u;

// Inverted dropout: out[i] = x[i] * scale where element i is kept, else 0. Whether i is
// kept depends only on (seed, i) through an integer hash, so the CPU reference draws
// the same mask bit for bit, and the backward is this same kernel applied to the
// gradient with the same seed (no mask is stored).
struct Params { n: u32, seed: u32, threshold: u32, scale: f32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

// `kept` comes from hash.wgsl, joined in front.

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= p.n) {
        return;
    }
    out[i] = select(0.0, x[i] * p.scale, kept(p.seed, i, p.threshold));
}

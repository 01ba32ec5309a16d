// D_i = dout_i · out_i of every row of every head, once, for the tiled attention
// backward (attention_tiled_backward.wgsl), whose dk/dv blocks each need it for all
// the queries they stream. Workgroup (x, y): rows x*64 .. of (batch, head) y, a
// thread a row.
struct Params { t: u32, c: u32, nh: u32, hs: u32, scale: f32, seed: u32, threshold: u32, keep_scale: f32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> dout: array<f32>;
@group(0) @binding(2) var<storage, read> out: array<f32>;
@group(0) @binding(3) var<storage, read_write> dsum: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = wg.x * 64u + t;
    if (i >= p.t) {
        return;
    }
    let bh = wg.y;
    let bi = bh / p.nh;
    let h = bh % p.nh;
    let base = (bi * p.t + i) * p.c + h * p.hs;
    var acc = 0.0;
    // Bounded by the head size (at most 128).
    for (var d = 0u; d < p.hs; d++) {
        acc = fma(dout[base + d], out[base + d], acc);
    }
    dsum[bh * p.t + i] = acc;
}

// D_i = dout_i · out_i of every row of every head, once, for the attention
// backwards that read it (attention_tiled_backward.wgsl, whose key blocks each need
// it for every query they stream, and the tensor-core one). Workgroup (x, y): rows
// x*8 .. of (batch, head) y, 16 threads a row, each a strided share of the row's
// channels, so that a warp reads whole runs of the row (not one float of each of 32
// rows); the shares meet in workgroup memory.
struct Params { t: u32, c: u32, nh: u32, hs: u32, scale: f32, seed: u32, threshold: u32, keep_scale: f32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> dout: array<f32>;
@group(0) @binding(2) var<storage, read> out: array<f32>;
@group(0) @binding(3) var<storage, read_write> dsum: array<f32>;

var<workgroup> part: array<f32, 128>;

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = wg.x * 8u + t / 16u;
    let lane = t % 16u;
    let bh = wg.y;
    let bi = bh / p.nh;
    let h = bh % p.nh;
    var acc = 0.0;
    if (i < p.t) {
        let base = (bi * p.t + i) * p.c + h * p.hs;
        // Bounded by the head size (at most 128): 8 trips.
        for (var d = lane; d < p.hs; d += 16u) {
            acc = fma(dout[base + d], out[base + d], acc);
        }
    }
    part[t] = acc;
    workgroupBarrier();
    if (lane == 0u && i < p.t) {
        var sum = 0.0;
        for (var j = 0u; j < 16u; j++) {
            sum += part[t + j];
        }
        dsum[bh * p.t + i] = sum;
    }
}

// Sums (the loss's mean shares them), the global gradient norm and clipping scale,
// scaling in place. AdamW and the sums of squares it clips by are in
// multi_tensor.wgsl. Entry points:
//   reduce_partial  sum (or sum of squares) of x: workgroup g sums elements
//                   g*256 + lid + k*(groups*256) and writes partial[g]
//   reduce_final    one workgroup sums the partials in order, out[slot] = sum * mul
//   reduce_one      both in one workgroup, straight from x (CPU adapters, small n)
//   global_norm     one workgroup: norm = sqrt(sum of the partial sums of squares
//                   that multi_tensor.wgsl's sumsq wrote), scale = max_norm /
//                   (norm + 1e-6) if 0 < max_norm < norm, else 1; writes [norm, scale]
//                   to the head of a first-moment arena chunk
//   global_norm_report  the same, and [norm, scale] to report[slot], report[slot + 1]
//                   too (the trainer's per-call figures)
//   scale           x *= norm_scale[1]
// Fixed summation orders: the same input always gives the same bits.
// Entry points share bindings; each uses exactly those its launcher passes.

struct Params {
    n: u32,        // elements (global_norm: partial sums)
    parts: u32,    // reduce_*: partial sums
    slot: u32,     // reduce_final: element of `out` to write
    square: u32,   // reduce_partial: 1 sums squares
    mul: f32,      // reduce_final: factor on the sum (1/n for a mean)
    max_norm: f32, // global_norm: clip threshold, 0 = off
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
// reduce_partial: x, partial
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> partial: array<f32>;
// reduce_one: x, out
// reduce_final: partials, out
@group(0) @binding(1) var<storage, read> partials: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
// global_norm: partial sums of squares, the arena chunk whose head gets [norm, scale]
@group(0) @binding(1) var<storage, read> sumsq: array<f32>;
@group(0) @binding(2) var<storage, read_write> norm_scale_out: array<f32>;
// global_norm_report: those two, and the figures that get a copy
@group(0) @binding(3) var<storage, read_write> report: array<f32>;
// scale: x_io, norm_scale
@group(0) @binding(1) var<storage, read_write> x_io: array<f32>;
@group(0) @binding(2) var<storage, read> s_norm_scale: array<f32>;

const WG: u32 = 256u;

@compute @workgroup_size(WG)
fn reduce_partial(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let stride = nwg.x * WG;
    var s = 0.0;
    for (var i = wid.x * WG + lid; i < p.n; i += stride) {
        let e = x[i];
        s += select(e, e * e, p.square != 0u);
    }
    let total = block_sum(s, lid);
    if (lid == 0u) {
        partial[wid.x] = total;
    }
}

@compute @workgroup_size(WG)
fn reduce_one(@builtin(local_invocation_index) lid: u32) {
    var s = 0.0;
    for (var i = lid; i < p.n; i += WG) {
        let e = x[i];
        s += select(e, e * e, p.square != 0u);
    }
    let total = block_sum(s, lid);
    if (lid == 0u) {
        out[p.slot] = total * p.mul;
    }
}

@compute @workgroup_size(WG)
fn reduce_final(@builtin(local_invocation_index) lid: u32) {
    var s = 0.0;
    for (var i = lid; i < p.parts; i += WG) {
        s += partials[i];
    }
    let total = block_sum(s, lid);
    if (lid == 0u) {
        out[p.slot] = total * p.mul;
    }
}

// [norm, scale] from the partial sums of squares, written to the arena chunk's head
// and returned to every invocation.
fn global_norm_into_head(lid: u32) -> vec2<f32> {
    var s = 0.0;
    for (var i = lid; i < p.n; i += WG) {
        s += sumsq[i];
    }
    let norm = sqrt(block_sum(s, lid));
    let clip = p.max_norm > 0.0 && norm > p.max_norm;
    let ns = vec2<f32>(norm, select(1.0, p.max_norm / (norm + 1e-6), clip));
    if (lid == 0u) {
        norm_scale_out[0] = ns.x;
        norm_scale_out[1] = ns.y;
    }
    return ns;
}

@compute @workgroup_size(WG)
fn global_norm(@builtin(local_invocation_index) lid: u32) {
    _ = global_norm_into_head(lid);
}

@compute @workgroup_size(WG)
fn global_norm_report(@builtin(local_invocation_index) lid: u32) {
    let ns = global_norm_into_head(lid);
    if (lid == 0u) {
        report[p.slot] = ns.x;
        report[p.slot + 1u] = ns.y;
    }
}

@compute @workgroup_size(WG)
fn scale(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if (i >= p.n) {
        return;
    }
    x_io[i] = x_io[i] * s_norm_scale[1];
}

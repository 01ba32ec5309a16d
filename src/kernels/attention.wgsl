// Causal self-attention forward, flash style: out and the logsumexp of each row's
// scaled scores, never the t x t probabilities.
//
// qkv is [b, t, 3c] (queries, keys, values), head h at channels h*hs..(h+1)*hs.
// A prelude sets HS4, the head size in vec4s this variant holds (hs <= 4 * HS4;
// channels past hs read as zero and are never written).
//
// Workgroup (x, y): 64 queries x*64.. of one (batch, head) y. Thread = one query
// row, its q and output in registers. Keys and values stream through shared
// memory 16 at a time; per tile the row's max is updated once (online softmax).
struct Params { t: u32, c: u32, nh: u32, hs: u32, scale: f32, _pad0: u32, _pad1: u32, _pad2: u32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> qkv: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read_write> lse: array<f32>;

const BQ: u32 = 64u;
const BKV: u32 = 16u;
// Masked scores: exp(MASKED - max) is 0 and, unlike -inf, MASKED - MASKED is no NaN.
const MASKED: f32 = -1.0e30;

var<workgroup> ks: array<vec4<f32>, BKV * HS4>;
var<workgroup> vs: array<vec4<f32>, BKV * HS4>;

// 4 channels d.. of part (0 q, 1 k, 2 v) of (batch bi, position ti, head h), zero past hs.
fn load4(bi: u32, ti: u32, part: u32, h: u32, d: u32) -> vec4<f32> {
    let base = (bi * p.t + ti) * 3u * p.c + part * p.c + h * p.hs + d;
    var v = vec4<f32>(0.0);
    if (d < p.hs) { v.x = qkv[base]; }
    if (d + 1u < p.hs) { v.y = qkv[base + 1u]; }
    if (d + 2u < p.hs) { v.z = qkv[base + 2u]; }
    if (d + 3u < p.hs) { v.w = qkv[base + 3u]; }
    return v;
}

fn hsum(v: vec4<f32>) -> f32 {
    return (v.x + v.y) + (v.z + v.w);
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let bh = wg.y;
    let bi = bh / p.nh;
    let h = bh % p.nh;
    let q0 = wg.x * BQ;
    let i = q0 + lid;
    // Rows past the end compute a copy of the last row and write nothing.
    let iq = min(i, p.t - 1u);

    var q: array<vec4<f32>, HS4>;
    var o: array<vec4<f32>, HS4>;
    for (var d4 = 0u; d4 < HS4; d4++) {
        q[d4] = load4(bi, iq, 0u, h, d4 * 4u) * p.scale;
        o[d4] = vec4<f32>(0.0);
    }
    var m = MASKED;
    var l = 0.0;

    let kv_end = min(q0 + BQ, p.t);
    for (var k0 = 0u; k0 < kv_end; k0 += BKV) {
        for (var e = lid; e < BKV * HS4; e += BQ) {
            let j = k0 + e / HS4;
            let d = (e % HS4) * 4u;
            var kv = vec4<f32>(0.0);
            var vv = vec4<f32>(0.0);
            if (j < p.t) {
                kv = load4(bi, j, 1u, h, d);
                vv = load4(bi, j, 2u, h, d);
            }
            ks[e] = kv;
            vs[e] = vv;
        }
        workgroupBarrier();

        // Four keys at a time, each dot in a vec4 accumulator: 16 independent FMA
        // chains instead of one long one per key.
        var s: array<f32, BKV>;
        var smax = m;
        for (var jj = 0u; jj < BKV; jj += 4u) {
            var a0 = vec4<f32>(0.0);
            var a1 = vec4<f32>(0.0);
            var a2 = vec4<f32>(0.0);
            var a3 = vec4<f32>(0.0);
            for (var d4 = 0u; d4 < HS4; d4++) {
                let qd = q[d4];
                a0 = fma(qd, ks[jj * HS4 + d4], a0);
                a1 = fma(qd, ks[(jj + 1u) * HS4 + d4], a1);
                a2 = fma(qd, ks[(jj + 2u) * HS4 + d4], a2);
                a3 = fma(qd, ks[(jj + 3u) * HS4 + d4], a3);
            }
            // Key k0 + jj is visible to query iq only at or before it (and so < t).
            s[jj] = select(MASKED, hsum(a0), k0 + jj <= iq);
            s[jj + 1u] = select(MASKED, hsum(a1), k0 + jj + 1u <= iq);
            s[jj + 2u] = select(MASKED, hsum(a2), k0 + jj + 2u <= iq);
            s[jj + 3u] = select(MASKED, hsum(a3), k0 + jj + 3u <= iq);
            smax = max(smax, max(max(s[jj], s[jj + 1u]), max(s[jj + 2u], s[jj + 3u])));
        }
        let corr = exp(m - smax);
        l *= corr;
        for (var d4 = 0u; d4 < HS4; d4++) {
            o[d4] *= corr;
        }
        for (var jj = 0u; jj < BKV; jj++) {
            let pj = exp(s[jj] - smax);
            l += pj;
            for (var d4 = 0u; d4 < HS4; d4++) {
                o[d4] += pj * vs[jj * HS4 + d4];
            }
        }
        m = smax;
        workgroupBarrier();
    }

    if (i < p.t) {
        let inv = 1.0 / l;
        let base = (bi * p.t + i) * p.c + h * p.hs;
        for (var d4 = 0u; d4 < HS4; d4++) {
            let v = o[d4] * inv;
            let d = d4 * 4u;
            if (d < p.hs) { out[base + d] = v.x; }
            if (d + 1u < p.hs) { out[base + d + 1u] = v.y; }
            if (d + 2u < p.hs) { out[base + d + 2u] = v.z; }
            if (d + 3u < p.hs) { out[base + d + 3u] = v.w; }
        }
        lse[bh * p.t + i] = m + log(l);
    }
}

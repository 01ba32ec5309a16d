// Causal self-attention forward, flash style: out and the logsumexp of each row's
// scaled scores, never the t x t probabilities.
//
// qkv is [b, t, 3c] (queries, keys, values), head h at channels h*hs..(h+1)*hs.
//
// A template, expanded by attention.rs: it prepends `const HS4` (the head size in
// vec4s this variant holds, hs <= 4 * HS4; channels past hs read as zero and are
// never written), and each code line holding `#D` acts on vec4 #D of the head:
// natively repeated for #D = 0 .. HS4-1 over named registers (q0, q1, ..), in the
// browser a loop over an array (see `expand` there for why).
//
// Workgroup (x, y): 64 queries x*64.. of one (batch, head) y. Thread = one query
// row. Keys and values stream through shared memory 16 at a time, 4 keys per
// online-softmax update (rescaling the output only when the row's max grows).
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

fn store4(base: u32, d: u32, v: vec4<f32>) {
    if (d < p.hs) { out[base + d] = v.x; }
    if (d + 1u < p.hs) { out[base + d + 1u] = v.y; }
    if (d + 2u < p.hs) { out[base + d + 2u] = v.z; }
    if (d + 3u < p.hs) { out[base + d + 3u] = v.w; }
}

fn hsum(v: vec4<f32>) -> f32 {
    return (v.x + v.y) + (v.z + v.w);
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let bh = wg.y;
    let bi = bh / p.nh;
    let h = bh % p.nh;
    let qb = wg.x * BQ;
    let i = qb + lid;
    // Rows past the end compute a copy of the last row and write nothing.
    let iq = min(i, p.t - 1u);

    var q#D = load4(bi, iq, 0u, h, #Du * 4u) * p.scale;
    var o#D = vec4<f32>(0.0);
    var m = MASKED;
    var l = 0.0;

    let kv_end = min(qb + BQ, p.t);
    for (var kt = 0u; kt < kv_end; kt += BKV) {
        for (var e = lid; e < BKV * HS4; e += BQ) {
            let j = kt + e / HS4;
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

        for (var jj = 0u; jj < BKV; jj += 4u) {
            let b0 = jj * HS4;
            let b1 = b0 + HS4;
            let b2 = b1 + HS4;
            let b3 = b2 + HS4;
            // Four dots in vec4 accumulators: 16 independent FMA chains.
            var a0 = vec4<f32>(0.0);
            var a1 = vec4<f32>(0.0);
            var a2 = vec4<f32>(0.0);
            var a3 = vec4<f32>(0.0);
            a0 = fma(q#D, ks[b0 + #Du], a0); a1 = fma(q#D, ks[b1 + #Du], a1); a2 = fma(q#D, ks[b2 + #Du], a2); a3 = fma(q#D, ks[b3 + #Du], a3);
            // Key kt + jj is visible to query iq only at or before it (and so < t).
            let s0 = select(MASKED, hsum(a0), kt + jj <= iq);
            let s1 = select(MASKED, hsum(a1), kt + jj + 1u <= iq);
            let s2 = select(MASKED, hsum(a2), kt + jj + 2u <= iq);
            let s3 = select(MASKED, hsum(a3), kt + jj + 3u <= iq);
            let mnew = max(m, max(max(s0, s1), max(s2, s3)));
            if (mnew > m) {
                let corr = exp(m - mnew);
                l *= corr;
                o#D *= corr;
                m = mnew;
            }
            let p0 = exp(s0 - m);
            let p1 = exp(s1 - m);
            let p2 = exp(s2 - m);
            let p3 = exp(s3 - m);
            l += (p0 + p1) + (p2 + p3);
            o#D = fma(vec4<f32>(p0), vs[b0 + #Du], fma(vec4<f32>(p1), vs[b1 + #Du], fma(vec4<f32>(p2), vs[b2 + #Du], fma(vec4<f32>(p3), vs[b3 + #Du], o#D))));
        }
        workgroupBarrier();
    }

    if (i < p.t) {
        let inv = 1.0 / l;
        let base = (bi * p.t + i) * p.c + h * p.hs;
        store4(base, #Du * 4u, o#D * inv);
        lse[bh * p.t + i] = m + log(l);
    }
}

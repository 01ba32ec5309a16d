// Causal self-attention forward, flash style: out and the logsumexp of each row's
// scaled scores, never the t x t probabilities; with dropout, out = (P * mask) V.
//
// qkv is [b, t, 3c] (queries, keys, values), head h at channels h*hs..(h+1)*hs.
//
// A template, expanded by attention.rs: it prepends `const HS4` (the head size in
// vec4s this variant holds, hs <= 4 * HS4; channels past hs read as zero and are
// never written), `const P` (threads a row: 2, or 4 with subgroups) and `const HP =
// HS4 / P`. Each code line holding `#D` acts on vec4 `#D` (0 .. HP-1) of a thread's
// share of the head: natively the line is repeated for each over named registers
// (qa0, qa1, ..), in the browser it is a loop over an array (see `expand` there for
// why).
//
// Workgroup (x, y): queries x*64 .. x*64+63 of one (batch, head) y, 32 * P threads.
// Threads Pr .. Pr+P-1 share rows x*64 + r ("a") and x*64 + 32 + r ("b"); each
// holds the vec4s Pd + part of their q and output (part = thread % P), so every
// vec4 a thread reads from shared memory feeds two rows: half the shared-memory
// traffic per score of one thread a row. Four threads a row hold half the
// registers of two, so that more of them can fit an SM (the likeliest limit on an
// H200: four a row measured faster there). The partial dots meet through shared memory (P = 2), or, where the device
// has subgroups, by shuffles between the partners (lanes Pr .. Pr+P-1: subgroups
// are runs of consecutive invocations, as in prelude_subgroups.wgsl, at least P
// wide), which saves `part` and one barrier a key tile. Lines starting `#SM ` are
// only in the shared-memory variant, `#SG ` only in the subgroup one (attention.rs
// picks).
// Keys and values stream through shared memory BKV at a time (attention.rs prepends
// it), 4 keys per online-softmax update.
//
// Lines starting `#V4 ` (and V4 spans) are only in the variant for heads whose
// channels come in whole vec4s (hs and c multiples of 4, so every head's row starts
// on one): qkv and out are bound as vec4 arrays and each load or store is one vec4,
// where four guarded floats cost the H200 a fifth of a GEMM loop's speed
// (benches/gemm_ceiling.rs); `#V1 ` lines only in the variant for other heads.
struct Params { t: u32, c: u32, nh: u32, hs: u32, scale: f32, seed: u32, threshold: u32, keep_scale: f32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> qkv: array<{V4:vec4<f32>}{V1:f32}>;
@group(0) @binding(2) var<storage, read_write> out: array<{V4:vec4<f32>}{V1:f32}>;
@group(0) @binding(3) var<storage, read_write> lse: array<f32>;

const BQ: u32 = 64u;
const WG: u32 = 32u * P;
// Masked scores: exp(MASKED - max) is 0 and, unlike -inf, MASKED - MASKED is no NaN.
const MASKED: f32 = -1.0e30;

var<workgroup> ks: array<vec4<f32>, BKV * HS4>;
var<workgroup> vs: array<vec4<f32>, BKV * HS4>;
// Half dots (P = 2: 64 threads): [key pair][thread] = (a key 0, a key 1, b key 0,
// b key 1).
#SM var<workgroup> part: array<vec4<f32>, BKV * 32u>;

// 4 channels d.. of part (0 q, 1 k, 2 v) of (batch bi, position ti, head h), zero past hs.
fn load4(bi: u32, ti: u32, which: u32, h: u32, d: u32) -> vec4<f32> {
    let base = (bi * p.t + ti) * 3u * p.c + which * p.c + h * p.hs + d;
#V4     if (d >= p.hs) { return vec4<f32>(0.0); }
#V4     return qkv[base / 4u];
#V1     var v = vec4<f32>(0.0);
#V1     if (d < p.hs) { v.x = qkv[base]; }
#V1     if (d + 1u < p.hs) { v.y = qkv[base + 1u]; }
#V1     if (d + 2u < p.hs) { v.z = qkv[base + 2u]; }
#V1     if (d + 3u < p.hs) { v.w = qkv[base + 3u]; }
#V1     return v;
}

fn store4(base: u32, d: u32, v: vec4<f32>) {
#V4     if (d < p.hs) { out[(base + d) / 4u] = v; }
#V1     if (d < p.hs) { out[base + d] = v.x; }
#V1     if (d + 1u < p.hs) { out[base + d + 1u] = v.y; }
#V1     if (d + 2u < p.hs) { out[base + d + 2u] = v.z; }
#V1     if (d + 3u < p.hs) { out[base + d + 3u] = v.w; }
}

fn hsum(v: vec4<f32>) -> f32 {
    return (v.x + v.y) + (v.z + v.w);
}

// Online softmax of one row over 4 more scores: returns (new max, new sum, factor
// for the old output, 0) and the 4 weights in `w`.
struct Step { m: f32, l: f32, corr: f32, w: vec4<f32> }

fn softmax_step(m: f32, l: f32, s: vec4<f32>) -> Step {
    let mnew = max(m, max(max(s.x, s.y), max(s.z, s.w)));
    let corr = exp(m - mnew);
    let w = exp(s - vec4<f32>(mnew));
    return Step(mnew, l * corr + hsum(w), corr, w);
}

// The dropout mask of keys key0 .. key0 + 3 for rows ia (bits 0-3) and ib (bits 4-7),
// shared by a row's P threads: each hashes the keys hh, hh + P, .. and the partners
// OR their bits by shuffles: each thread hashing all 8 took the H200's forward with
// the shakespeare preset's dropout 0.29 ms a layer, sharing them 0.24 (0.23 without
// dropout).
// All 8 bits set without dropout (a uniform test).
#SG fn kept_bits(bh: u32, ia: u32, ib: u32, key0: u32, hh: u32) -> u32 {
#SG     if (p.threshold == 0u) {
#SG         return 255u;
#SG     }
#SG     var bits = 0u;
#SG     for (var c = hh; c < 4u; c += P) {
#SG         bits |= select(0u, 1u << c, kept_at(bh, ia, key0 + c)) | select(0u, 16u << c, kept_at(bh, ib, key0 + c));
#SG     }
#SG     bits |= subgroupShuffleXor(bits, 1u);
#SG     if (P == 4u) {
#SG         bits |= subgroupShuffleXor(bits, 2u);
#SG     }
#SG     return bits;
#SG }

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let bh = wg.y;
    let bi = bh / p.nh;
    let h = bh % p.nh;
    let row0 = wg.x * BQ;
    let hh = t % P;
    let ra = row0 + t / P;
    let rb = ra + 32u;
    // Rows past the end compute a copy of the last row and write nothing.
    let ia = min(ra, p.t - 1u);
    let ib = min(rb, p.t - 1u);

    var qa#D = load4(bi, ia, 0u, h, (P * #Du + hh) * 4u) * p.scale;
    var qb#D = load4(bi, ib, 0u, h, (P * #Du + hh) * 4u) * p.scale;
    var oa#D = vec4<f32>(0.0);
    var ob#D = vec4<f32>(0.0);
    var ma = MASKED;
    var la = 0.0;
    var mb = MASKED;
    var lb = 0.0;

    let kv_end = min(row0 + BQ, p.t);
    for (var kt = 0u; kt < kv_end; kt += BKV) {
        for (var e = t; e < BKV * HS4; e += WG) {
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

#SM     // Half dots, two keys at a time (four independent vec4 FMA chains).
#SM     for (var jj = 0u; jj < BKV; jj += 2u) {
#SM         let k0 = jj * HS4 + hh;
#SM         let k1 = k0 + HS4;
#SM         var a0 = vec4<f32>(0.0);
#SM         var a1 = vec4<f32>(0.0);
#SM         var b0 = vec4<f32>(0.0);
#SM         var b1 = vec4<f32>(0.0);
#SM         a0 = fma(qa#D, ks[k0 + P * #Du], a0); a1 = fma(qa#D, ks[k1 + P * #Du], a1); b0 = fma(qb#D, ks[k0 + P * #Du], b0); b1 = fma(qb#D, ks[k1 + P * #Du], b1);
#SM         part[(jj / 2u) * 64u + t] = vec4<f32>(hsum(a0), hsum(a1), hsum(b0), hsum(b1));
#SM     }
#SM     workgroupBarrier();

        for (var jj = 0u; jj < BKV; jj += 4u) {
            // Own part plus the partners': all of them add the same numbers in the
            // same order.
            // x: (a key 0, a key 1, b key 0, b key 1) of keys kt + jj, jj + 1; y of
            // jj + 2, jj + 3.
#SM         let g = (jj / 2u) * 64u;
#SM         let x = part[g + t] + part[g + (t ^ 1u)];
#SM         let y = part[g + 64u + t] + part[g + 64u + (t ^ 1u)];
#SG         let k0 = jj * HS4 + hh;
#SG         let k1 = k0 + HS4;
#SG         let k2 = k1 + HS4;
#SG         let k3 = k2 + HS4;
#SG         var a0 = vec4<f32>(0.0);
#SG         var a1 = vec4<f32>(0.0);
#SG         var a2 = vec4<f32>(0.0);
#SG         var a3 = vec4<f32>(0.0);
#SG         var b0 = vec4<f32>(0.0);
#SG         var b1 = vec4<f32>(0.0);
#SG         var b2 = vec4<f32>(0.0);
#SG         var b3 = vec4<f32>(0.0);
#SG         a0 = fma(qa#D, ks[k0 + P * #Du], a0); a1 = fma(qa#D, ks[k1 + P * #Du], a1); b0 = fma(qb#D, ks[k0 + P * #Du], b0); b1 = fma(qb#D, ks[k1 + P * #Du], b1);
#SG         a2 = fma(qa#D, ks[k2 + P * #Du], a2); a3 = fma(qa#D, ks[k3 + P * #Du], a3); b2 = fma(qb#D, ks[k2 + P * #Du], b2); b3 = fma(qb#D, ks[k3 + P * #Du], b3);
#SG         let hx = vec4<f32>(hsum(a0), hsum(a1), hsum(b0), hsum(b1));
#SG         let hy = vec4<f32>(hsum(a2), hsum(a3), hsum(b2), hsum(b3));
#SG         var x = hx + subgroupShuffleXor(hx, 1u);
#SG         var y = hy + subgroupShuffleXor(hy, 1u);
#SG         if (P == 4u) {
#SG             x += subgroupShuffleXor(x, 2u);
#SG             y += subgroupShuffleXor(y, 2u);
#SG         }
            // Key kt + jj + c is visible to a row only at or before it (and so < t).
            let key = vec4<u32>(kt + jj) + vec4<u32>(0u, 1u, 2u, 3u);
            let sa = select(vec4<f32>(MASKED), vec4<f32>(x.x, x.y, y.x, y.y), key <= vec4<u32>(ia));
            let sb = select(vec4<f32>(MASKED), vec4<f32>(x.z, x.w, y.z, y.w), key <= vec4<u32>(ib));
            let sta = softmax_step(ma, la, sa);
            let stb = softmax_step(mb, lb, sb);
            ma = sta.m;
            la = sta.l;
            mb = stb.m;
            lb = stb.l;
            // Dropout masks the numerator only: la, lb sum the undropped weights.
            let key0 = kt + jj;
#SM         let wa = sta.w * vec4<f32>(keep(bh, ia, key0), keep(bh, ia, key0 + 1u), keep(bh, ia, key0 + 2u), keep(bh, ia, key0 + 3u));
#SM         let wb = stb.w * vec4<f32>(keep(bh, ib, key0), keep(bh, ib, key0 + 1u), keep(bh, ib, key0 + 2u), keep(bh, ib, key0 + 3u));
#SG         let kept4 = kept_bits(bh, ia, ib, key0, hh);
#SG         let wa = sta.w * select(vec4<f32>(0.0), vec4<f32>(p.keep_scale), (vec4<u32>(kept4) & vec4<u32>(1u, 2u, 4u, 8u)) != vec4<u32>(0u));
#SG         let wb = stb.w * select(vec4<f32>(0.0), vec4<f32>(p.keep_scale), (vec4<u32>(kept4) & vec4<u32>(16u, 32u, 64u, 128u)) != vec4<u32>(0u));
            let v0 = jj * HS4 + hh;
            let v1 = v0 + HS4;
            let v2 = v1 + HS4;
            let v3 = v2 + HS4;
            oa#D = fma(vec4<f32>(wa.x), vs[v0 + P * #Du], fma(vec4<f32>(wa.y), vs[v1 + P * #Du], fma(vec4<f32>(wa.z), vs[v2 + P * #Du], fma(vec4<f32>(wa.w), vs[v3 + P * #Du], oa#D * sta.corr))));
            ob#D = fma(vec4<f32>(wb.x), vs[v0 + P * #Du], fma(vec4<f32>(wb.y), vs[v1 + P * #Du], fma(vec4<f32>(wb.z), vs[v2 + P * #Du], fma(vec4<f32>(wb.w), vs[v3 + P * #Du], ob#D * stb.corr))));
        }
        workgroupBarrier();
    }

    if (ra < p.t) {
        let inv = 1.0 / la;
        let base = (bi * p.t + ra) * p.c + h * p.hs;
        store4(base, (P * #Du + hh) * 4u, oa#D * inv);
        if (hh == 0u) {
            lse[bh * p.t + ra] = ma + log(la);
        }
    }
    if (rb < p.t) {
        let inv = 1.0 / lb;
        let base = (bi * p.t + rb) * p.c + h * p.hs;
        store4(base, (P * #Du + hh) * 4u, ob#D * inv);
        if (hh == 0u) {
            lse[bh * p.t + rb] = mb + log(lb);
        }
    }
}

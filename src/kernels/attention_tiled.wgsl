// Causal self-attention forward, tiled: out and the logsumexp of each row's scaled
// scores, as attention.wgsl computes them (same bindings, layouts and dropout), laid
// out as two small matrix products a key block so that no score is worked out twice
// and no thread adds partial dots of another.
//
// A template, expanded by attention_tiled.rs: it prepends `const HS4` (the head size
// in vec4s, hs <= 4 * HS4; channels past hs read as zero and are never written),
// `const STRIDE` (HS4 + 1: a staged row's vec4s, padded so that the rows a warp reads
// at once fall in different banks) and `const CV` (vec4s of output channels a thread,
// ceil(HS4 / NX)). Each code line holding `#I` is written out once a row of a thread
// (0 .. 3), `#J` once a key of a thread (0 .. 3), `#C` once a channel vec4 (0 .. CV-1).
//
// Workgroup (x, y): 32 queries of (batch, head) y, 64 threads as NY x NX = 8 x 8.
// Thread (ty, tx) owns rows ty + 8i (i < 4). For each block of 32 keys:
// - scores S = Q K^T: keys tx + 8j (j < 4), Q and K staged in shared memory;
// - each row's block maximum through `red` (the 8 threads of a row), the online
//   softmax's rescale, the weights P (written to `ps`) and the thread's share of
//   each row's sum (the shares are added once, at the end);
// - O += P V: channel vec4s tx + 8c (c < CV), V staged where K was.
// Workgroups take query blocks from the last (the most keys) to the first, so that
// the long ones start first.
struct Params { t: u32, c: u32, nh: u32, hs: u32, scale: f32, seed: u32, threshold: u32, keep_scale: f32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> qkv: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read_write> lse: array<f32>;

const BQ: u32 = 32u;
const BK: u32 = 32u;
const NX: u32 = 8u;
const NY: u32 = 8u;
const WG: u32 = 64u;
// Row stride of `ps` in vec4s (40 floats): a warp's 4 row groups write and read in
// different banks.
const PS4: u32 = 10u;
// Masked scores: exp(MASKED - max) is 0 and, unlike -inf, MASKED - MASKED is no NaN.
const MASKED: f32 = -1.0e30;

var<workgroup> qs: array<vec4<f32>, BQ * STRIDE>;
// K of the key block, then its V.
var<workgroup> kv: array<vec4<f32>, BK * STRIDE>;
// P of the key block, [query][key].
var<workgroup> ps: array<vec4<f32>, BQ * PS4>;
// Per row, the 8 threads' block maxima (then their row sums): [row][tx] as 2 vec4s.
var<workgroup> red: array<vec4<f32>, BQ * 2u>;

// 4 channels d.. of part (0 q, 1 k, 2 v) of (batch bi, position ti, head h), zero past hs.
fn load4(bi: u32, ti: u32, which: u32, h: u32, d: u32) -> vec4<f32> {
    let base = (bi * p.t + ti) * 3u * p.c + which * p.c + h * p.hs + d;
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

fn hmax(v: vec4<f32>) -> f32 {
    return max(max(v.x, v.y), max(v.z, v.w));
}

// The queries r0 .. r0 + BQ (scaled), zero past t. Bounded by the block: BQ * HS4 /
// WG iterations.
fn stage_q(bi: u32, h: u32, r0: u32, t: u32) {
    for (var e = t; e < BQ * HS4; e += WG) {
        let r = e / HS4;
        let d = e % HS4;
        var v = vec4<f32>(0.0);
        if (r0 + r < p.t) {
            v = load4(bi, r0 + r, 0u, h, d * 4u) * p.scale;
        }
        qs[r * STRIDE + d] = v;
    }
}

// Part `which` (1 k, 2 v) of the keys r0 .. r0 + BK, zero past t. Bounded likewise.
fn stage_kv(bi: u32, h: u32, r0: u32, which: u32, t: u32) {
    for (var e = t; e < BK * HS4; e += WG) {
        let r = e / HS4;
        let d = e % HS4;
        var v = vec4<f32>(0.0);
        if (r0 + r < p.t) {
            v = load4(bi, r0 + r, which, h, d * 4u);
        }
        kv[r * STRIDE + d] = v;
    }
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let bh = wg.y;
    let bi = bh / p.nh;
    let h = bh % p.nh;
    let blocks = (p.t + BQ - 1u) / BQ;
    let row0 = (blocks - 1u - wg.x) * BQ;
    let tx = t % NX;
    let ty = t / NX;
    // This thread's rows (local and absolute); rows past the end compute a copy of
    // the last row and write nothing.
    let lr#I = ty + NY * #Iu;
    let r#I = row0 + lr#I;
    let ir#I = min(r#I, p.t - 1u);
    let cv#C = min(tx + NX * #Cu, HS4 - 1u);

    stage_q(bi, h, row0, t);
    var m#I = MASKED;
    var l#I = 0.0;
    var o#I_#C = vec4<f32>(0.0);

    // Key blocks up to the diagonal: at most ceil(t / BK), t capped by the context.
    let kv_end = min(row0 + BQ, p.t);
    for (var kb = 0u; kb < kv_end; kb += BK) {
        stage_kv(bi, h, kb, 1u, t);
        workgroupBarrier();

        var s#I = vec4<f32>(0.0);
        // Bounded by the head size (HS4 <= 16 vec4s).
        for (var d = 0u; d < HS4; d++) {
            let q#I = qs[lr#I * STRIDE + d];
            let k#J = kv[(tx + NX * #Ju) * STRIDE + d];
            s#I += vec4<f32>(dot(q#I, k0), dot(q#I, k1), dot(q#I, k2), dot(q#I, k3));
        }
        // Key kb + tx + 8j is visible to a row at or before it (and so < t).
        let key = vec4<u32>(kb + tx) + vec4<u32>(0u, NX, 2u * NX, 3u * NX);
        let vis#I = key <= vec4<u32>(ir#I);
        s#I = select(vec4<f32>(MASKED), s#I, vis#I);
        red[2u * lr#I + tx / 4u][tx % 4u] = hmax(s#I);
        workgroupBarrier();

        // K is read: V takes its place while the rows rescale.
        stage_kv(bi, h, kb, 2u, t);
        let mn#I = max(m#I, max(hmax(red[2u * lr#I]), hmax(red[2u * lr#I + 1u])));
        let corr#I = exp(m#I - mn#I);
        m#I = mn#I;
        // select, not a product: a masked weight is exactly 0.
        let w#I = select(vec4<f32>(0.0), exp(s#I - vec4<f32>(mn#I)), vis#I);
        l#I = l#I * corr#I + hsum(w#I);
        // Dropout masks the numerator only: l sums the undropped weights.
        let wd#I = w#I * vec4<f32>(keep(bh, ir#I, key.x), keep(bh, ir#I, key.y), keep(bh, ir#I, key.z), keep(bh, ir#I, key.w));
        ps[lr#I * PS4 + tx / 4u + 2u * #Ju][tx % 4u] = wd#I[#Ju];
        o#I_#C *= corr#I;
        workgroupBarrier();

        // Bounded by the block: BK / 4 steps of 4 keys.
        for (var kk = 0u; kk < BK; kk += 4u) {
            let pw#I = ps[lr#I * PS4 + kk / 4u];
            let v#J_#C = kv[(kk + #Ju) * STRIDE + cv#C];
            o#I_#C = fma(vec4<f32>(pw#I.x), v0_#C, fma(vec4<f32>(pw#I.y), v1_#C, fma(vec4<f32>(pw#I.z), v2_#C, fma(vec4<f32>(pw#I.w), v3_#C, o#I_#C))));
        }
        workgroupBarrier();
    }

    // Each row's sum from its 8 threads' shares (all taken against the same max).
    red[2u * lr#I + tx / 4u][tx % 4u] = l#I;
    workgroupBarrier();
    let lt#I = hsum(red[2u * lr#I]) + hsum(red[2u * lr#I + 1u]);
    if (r#I < p.t && tx + NX * #Cu < HS4) { store4((bi * p.t + r#I) * p.c + h * p.hs, cv#C * 4u, o#I_#C / lt#I); }
    if (r#I < p.t && tx == 0u) { lse[bh * p.t + r#I] = m#I + log(lt#I); }
}

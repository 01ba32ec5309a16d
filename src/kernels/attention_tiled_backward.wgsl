// Causal self-attention backward, tiled (see attention_backward.wgsl for the
// formulas and attention_tiled.wgsl for the template markers). With
// p_ij = exp(s_ij - lse_i) (s scaled), dp_ij = m_ij dout_i · v_j (m the dropout mask,
// its scale included) and D_i = dout_i · out_i, precomputed once a row by
// attention_dsum.wgsl: ds_ij = p_ij (dp_ij - D_i); dq_i = scale sum_j ds_ij k_j,
// dk_j = scale sum_i ds_ij q_i, dv_j = sum_i p_ij m_ij dout_i.
//
// One workgroup a (batch, head), so that it owns every row of the head's dq and can
// add each key block's share into it where it lies, with no atomics and no partial
// sums: each score and each dp is worked out once (five products of the head's size
// where the paired kernels, which split dq from dk/dv, need seven). For each block
// of BC keys, k (scaled: s = q · k and dq = sum ds k at once) and v staged, then for
// each tile of BR queries from the block's first key on, q and dout staged:
// - A: s and dp, [key][query]: thread (lo, hi) of 16 x 8, keys lo + 16a and queries
//   hi + 8b (a, b < 2, `#A`, `#B`); p m to `wp`, ds to `wd`, both [query][key];
// - B: dv += (p m)^T dout and dk += ds^T q into registers: keys 4hi + r (r < 4, `#R`),
//   channel vec4 lo;
// - Q: dq of the tile's queries += ds k: queries hi + 8b, channel vec4 lo, added into
//   dqkv (the block of keys 0.. writes it: every query sees key 0). The same thread
//   adds a given dq vec4 in every key block, so program order orders its writes.
// A warp's lanes span 8 values of lo and 4 of hi, so that each of its reads of
// workgroup memory touches at most 8 rows (or 8 vec4s of a row): one pass of the
// banks.
// The block's dk and dv are stored once its queries are done.
struct Params { t: u32, c: u32, nh: u32, hs: u32, scale: f32, seed: u32, threshold: u32, keep_scale: f32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> dout: array<f32>;
@group(0) @binding(2) var<storage, read> qkv: array<f32>;
@group(0) @binding(3) var<storage, read> lse: array<f32>;
@group(0) @binding(4) var<storage, read> dsum: array<f32>;
@group(0) @binding(5) var<storage, read_write> dqkv: array<f32>;

const BC: u32 = 32u;
const BR: u32 = 16u;
const WG: u32 = 128u;
// Row stride of `wp` / `wd` in vec4s (40 floats): the 4 queries a warp writes at
// once fall 8 banks apart.
const W4: u32 = 10u;

// k (scaled) and v of the key block.
var<workgroup> sk: array<vec4<f32>, BC * STRIDE>;
var<workgroup> sv: array<vec4<f32>, BC * STRIDE>;
// q and dout of the query tile.
var<workgroup> sq: array<vec4<f32>, BR * STRIDE>;
var<workgroup> sg: array<vec4<f32>, BR * STRIDE>;
// p m and ds of the tile, [query][key quad].
var<workgroup> wp: array<vec4<f32>, BR * W4>;
var<workgroup> wd: array<vec4<f32>, BR * W4>;

// 4 channels d.. of tensor `which` (0 q, 1 k, 2 v of qkv; 3 dout) at (batch bi,
// position ti, head h), zero past hs and past t.
fn load4(bi: u32, ti: u32, which: u32, h: u32, d: u32) -> vec4<f32> {
    var v = vec4<f32>(0.0);
    if (ti >= p.t) {
        return v;
    }
    if (which == 3u) {
        let base = (bi * p.t + ti) * p.c + h * p.hs + d;
        if (d < p.hs) { v.x = dout[base]; }
        if (d + 1u < p.hs) { v.y = dout[base + 1u]; }
        if (d + 2u < p.hs) { v.z = dout[base + 2u]; }
        if (d + 3u < p.hs) { v.w = dout[base + 3u]; }
    } else {
        let base = (bi * p.t + ti) * 3u * p.c + which * p.c + h * p.hs + d;
        if (d < p.hs) { v.x = qkv[base]; }
        if (d + 1u < p.hs) { v.y = qkv[base + 1u]; }
        if (d + 2u < p.hs) { v.z = qkv[base + 2u]; }
        if (d + 3u < p.hs) { v.w = qkv[base + 3u]; }
    }
    return v;
}

// dqkv's 4 channels d.. of part `which` at (batch bi, position ti, head h); the
// caller keeps ti < t.
fn grad_at(bi: u32, ti: u32, which: u32, h: u32) -> u32 {
    return (bi * p.t + ti) * 3u * p.c + which * p.c + h * p.hs;
}

fn store4(base: u32, d: u32, v: vec4<f32>) {
    if (d < p.hs) { dqkv[base + d] = v.x; }
    if (d + 1u < p.hs) { dqkv[base + d + 1u] = v.y; }
    if (d + 2u < p.hs) { dqkv[base + d + 2u] = v.z; }
    if (d + 3u < p.hs) { dqkv[base + d + 3u] = v.w; }
}

fn read4(base: u32, d: u32) -> vec4<f32> {
    var v = vec4<f32>(0.0);
    if (d < p.hs) { v.x = dqkv[base + d]; }
    if (d + 1u < p.hs) { v.y = dqkv[base + d + 1u]; }
    if (d + 2u < p.hs) { v.z = dqkv[base + d + 2u]; }
    if (d + 3u < p.hs) { v.w = dqkv[base + d + 3u]; }
    return v;
}

// Workgroup (0, y): every key block of (batch, head) y.
@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let bh = wg.y;
    let bi = bh / p.nh;
    let h = bh % p.nh;
    // The thread's place: lo < 16 (A's keys, B's and Q's channel vec4), hi < 8
    // (A's and Q's queries, B's key quad).
    let lo = t % 8u + 8u * ((t / 32u) % 2u);
    let hi = (t % 32u) / 8u + 4u * (t / 64u);
    let live = lo < HS4;

    // Key blocks: at most ceil(t / BC), t capped by the context.
    for (var kb = 0u; kb < p.t; kb += BC) {
        for (var e = t; e < BC * HS4; e += WG) {
            let r = e / HS4;
            let d = e % HS4;
            sk[r * STRIDE + d] = load4(bi, kb + r, 1u, h, d * 4u) * p.scale;
            sv[r * STRIDE + d] = load4(bi, kb + r, 2u, h, d * 4u);
        }
        var accv#R = vec4<f32>(0.0);
        var acck#R = vec4<f32>(0.0);
        let key#A = kb + lo + 16u * #Au;

        // The first tile's q and dout: vec4 e#L of the tile, e#L < BR * HS4.
        let e#L = t + WG * #Lu;
        var nq#L = load4(bi, select(p.t, kb + e#L / HS4, e#L < BR * HS4), 0u, h, (e#L % HS4) * 4u);
        var ng#L = load4(bi, select(p.t, kb + e#L / HS4, e#L < BR * HS4), 3u, h, (e#L % HS4) * 4u);

        // Query tiles from the block's first key on: at most ceil(t / BR).
        for (var it = kb; it < p.t; it += BR) {
            // The tile loaded during the step before (the barrier that ended it keeps
            // these stores from its reads).
            if (e#L < BR * HS4) { sq[(e#L / HS4) * STRIDE + e#L % HS4] = nq#L; sg[(e#L / HS4) * STRIDE + e#L % HS4] = ng#L; }
            let query#B = it + hi + 8u * #Bu;
            let row#B = bh * p.t + min(query#B, p.t - 1u);
            let lse#B = lse[row#B];
            let dd#B = dsum[row#B];
            workgroupBarrier();

            // A: s = q · k and dp = dout · v of 2 keys x 2 queries, each summed by
            // channel lanes first: 32 independent sums, not 8 chains of dots.
            var s4#A_#B = vec4<f32>(0.0);
            var dp4#A_#B = vec4<f32>(0.0);
            // Bounded by the head size (HS4 <= 16 vec4s).
            for (var d = 0u; d < HS4; d++) {
                let k#A = sk[(lo + 16u * #Au) * STRIDE + d];
                let v#A = sv[(lo + 16u * #Au) * STRIDE + d];
                let q#B = sq[(hi + 8u * #Bu) * STRIDE + d];
                let g#B = sg[(hi + 8u * #Bu) * STRIDE + d];
                s4#A_#B = fma(k#A, q#B, s4#A_#B);
                dp4#A_#B = fma(v#A, g#B, dp4#A_#B);
            }
            let s#A_#B = (s4#A_#B.x + s4#A_#B.y) + (s4#A_#B.z + s4#A_#B.w);
            let dp#A_#B = (dp4#A_#B.x + dp4#A_#B.y) + (dp4#A_#B.z + dp4#A_#B.w);
            // Key j is visible to query i at or after it (and so j < t).
            // select, not a product: exp of a masked score may be inf.
            let pr#A_#B = select(0.0, exp(s#A_#B - lse#B), key#A <= query#B && query#B < p.t);
            let m#A_#B = keep(bh, min(query#B, p.t - 1u), key#A);
            wp[(hi + 8u * #Bu) * W4 + (lo + 16u * #Au) / 4u][lo % 4u] = pr#A_#B * m#A_#B;
            wd[(hi + 8u * #Bu) * W4 + (lo + 16u * #Au) / 4u][lo % 4u] = pr#A_#B * (m#A_#B * dp#A_#B - dd#B);
            workgroupBarrier();

            // The next tile's loads and the dq so far of Q's rows (none in the first
            // key block), issued here to land during B and Q: any earlier, they would
            // hold registers through A, whose sums need the most.
            nq#L = load4(bi, select(p.t, it + BR + e#L / HS4, e#L < BR * HS4), 0u, h, (e#L % HS4) * 4u);
            ng#L = load4(bi, select(p.t, it + BR + e#L / HS4, e#L < BR * HS4), 3u, h, (e#L % HS4) * 4u);
            let at#B = grad_at(bi, min(query#B, p.t - 1u), 0u, h);
            var dq#B = vec4<f32>(0.0);
            if (live && kb > 0u && query#B < p.t) { dq#B = read4(at#B, lo * 4u); }
            if (live) {
                // B: 4 keys x 1 channel vec4 of dv and dk. Bounded by the tile.
                for (var q = 0u; q < BR; q++) {
                    let w = wp[q * W4 + hi];
                    let z = wd[q * W4 + hi];
                    let g = sg[q * STRIDE + lo];
                    let x = sq[q * STRIDE + lo];
                    accv#R = fma(vec4<f32>(w[#Ru]), g, accv#R);
                    acck#R = fma(vec4<f32>(z[#Ru]), x, acck#R);
                }
                // Q: dq of 2 queries x 1 channel vec4 over the block's keys, 4 at a
                // time. Bounded by the block.
                for (var k4 = 0u; k4 < BC / 4u; k4++) {
                    let z#B = wd[(hi + 8u * #Bu) * W4 + k4];
                    let k#R = sk[(4u * k4 + #Ru) * STRIDE + lo];
                    dq#B = fma(vec4<f32>(z#B.x), k0, fma(vec4<f32>(z#B.y), k1, fma(vec4<f32>(z#B.z), k2, fma(vec4<f32>(z#B.w), k3, dq#B))));
                }
                if (query#B < p.t) { store4(at#B, lo * 4u, dq#B); }
            }
            workgroupBarrier();
        }

        if (live && kb + 4u * hi + #Ru < p.t) { store4(grad_at(bi, kb + 4u * hi + #Ru, 1u, h), lo * 4u, acck#R * p.scale); }
        if (live && kb + 4u * hi + #Ru < p.t) { store4(grad_at(bi, kb + 4u * hi + #Ru, 2u, h), lo * 4u, accv#R); }
    }
}

// Causal self-attention forward on tensor cores: out and the logsumexp of each row's
// scaled scores, as attention.wgsl computes them (same bindings, dropout and results
// up to f16 rounding), with q, k, v and the weights P rounded to f16 and every
// product summed in f32 by 16x16x16 cooperative matrices. attention_coop.rs prepends
// `enable f16;`, `enable wgpu_cooperative_matrix;` and writes each line holding #J
// out once a vec4 of a lane's scores (0 .. 3) and #O once a vec4 of its output (0 ..
// 7). Heads of up to 64 channels in whole vec4s (qkv and out bound as vec4s);
// channels past hs are staged as zero and never written.
//
// Workgroup (x, y): 64 queries of (batch, head) y, 4 subgroups of 32; subgroup s
// owns queries s * 16 .. + 16. For each block of 32 keys (K and V staged in f16):
// - S = Q K^T, 16 x 32 a subgroup (2 accumulators, 4 MMAs each), stored to the
//   subgroup's f32 strip of `ss`;
// - lane l takes row l / 2, keys (l % 2) * 16 .. + 16 of it: the online softmax's
//   new maximum (the pair's, by `pair_other`), the rescale of its running sum and of
//   its 32 output channels (l % 2) * 32 .. + 32, held in registers, and the weights
//   times the dropout factor, rounded to f16 into `ps`;
// - P V, 16 x 64 a subgroup (4 accumulators from zero: a cooperative matrix cannot
//   be rescaled in place), stored to the same strip, which each lane adds into its
//   output channels.
// Workgroups take query blocks from the last (the most keys) to the first.
//
// Two things wait on memory or on long integer chains, and both are started early
// enough to hide them. The next block's K is loaded into registers (`Ahead`) at the
// top of a block and staged once every subgroup is past its S; its V is loaded then
// and staged once every subgroup is past its P V. Each lane hashes its 16 dropout
// decisions into bits before the block's products, not after them, and (with
// dropout) stores them for the backward, which reads them instead of hashing each
// decision twice more (its dq and its dk/dv blocks).
//
// `stats` (u32s) holds each row's logsumexp, [b * nh, t] as f32 bits, then with
// dropout the mask: row (bh, i) is ceil(t / 16) words, bit n of word w the decision
// for key 16 w + n (16 bits a word: a lane's 16 keys, no exchange between lanes).
// The grid's y is b * nh, so the mask starts at num_workgroups.y * t.
//
// Every cooperative and subgroup operation is in the section at the end, which
// tests/attention_coop.rs swaps for plain WGSL to run this on devices without them.
struct Params { t: u32, c: u32, nh: u32, hs: u32, scale: f32, seed: u32, threshold: u32, keep_scale: f32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> qkv: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> stats: array<u32>;

const BQ: u32 = 64u;
const BK: u32 = 32u;
// Channels a staged row holds (heads of up to 64, zero-padded).
const HS: u32 = 64u;
// Row strides in halves (the f16 tiles) or floats (the f32 strips). A fragment load
// reads 8 rows of 16 bytes at a time; at these strides they fall in distinct banks.
const LDH: u32 = 72u;
const LDP: u32 = 40u;
const LDS: u32 = 68u;
// One subgroup's share of `ps` (16 x LDP) and of `ss` (16 x LDS).
const PSUB: u32 = 640u;
const SSUB: u32 = 1088u;
// Masked scores: exp(MASKED - max) is 0 and, unlike -inf, MASKED - MASKED is no NaN.
const MASKED: f32 = -1.0e30;

var<workgroup> qs: array<f16, 4608>; // BQ x LDH, scaled by p.scale
var<workgroup> ks: array<f16, 2304>; // BK x LDH
var<workgroup> vs: array<f16, 2304>; // BK x LDH
var<workgroup> ps: array<f16, 2560>; // 4 x PSUB, [query][key]
var<workgroup> ss: array<f32, 4352>; // 4 x SSUB: S, then P V

// Channels 4 d4 .. + 4 of part `which` (0 q, 1 k, 2 v) of (batch bi, position ti,
// head h), zero past hs and past t.
fn load4(bi: u32, ti: u32, which: u32, h: u32, d4: u32) -> vec4<f32> {
    if (ti >= p.t || 4u * d4 >= p.hs) {
        return vec4<f32>(0.0);
    }
    return qkv[((bi * p.t + ti) * 3u * p.c + which * p.c + h * p.hs) / 4u + d4];
}

fn put4(at: u32, v: vec4<f32>, which: u32) {
    let h = vec4<f16>(v);
    if (which == 0u) {
        qs[at] = h.x; qs[at + 1u] = h.y; qs[at + 2u] = h.z; qs[at + 3u] = h.w;
    } else if (which == 1u) {
        ks[at] = h.x; ks[at + 1u] = h.y; ks[at + 2u] = h.z; ks[at + 3u] = h.w;
    } else {
        vs[at] = h.x; vs[at + 1u] = h.y; vs[at + 2u] = h.z; vs[at + 3u] = h.w;
    }
}

// Rows r0 .. r0 + rows of part `which` into its tile (Q here, at the start), 16
// threads a row (one row's 256 bytes a load of 16 lanes). Bounded by the tile:
// rows * 16 / 128 loads.
fn stage(bi: u32, h: u32, r0: u32, rows: u32, which: u32, t: u32) {
    let scale = select(1.0, p.scale, which == 0u);
    for (var e = t; e < rows * 16u; e += 128u) {
        let r = e / 16u;
        let d4 = e % 16u;
        put4(r * LDH + d4 * 4u, load4(bi, r0 + r, which, h, d4) * scale, which);
    }
}

// A thread's share of K or V of a block of keys, loaded a phase before it is staged:
// vec4 t % 16 of rows t / 16 + 8 j (j < 4).
struct Ahead { r0: vec4<f32>, r1: vec4<f32>, r2: vec4<f32>, r3: vec4<f32> }

// Part `which` (1 K, 2 V) of the block of keys kb .. + BK.
fn fetch(bi: u32, h: u32, kb: u32, which: u32, t: u32) -> Ahead {
    let r = kb + t / 16u;
    let d4 = t % 16u;
    return Ahead(load4(bi, r, which, h, d4), load4(bi, r + 8u, which, h, d4),
        load4(bi, r + 16u, which, h, d4), load4(bi, r + 24u, which, h, d4));
}

fn put_ahead(n: Ahead, which: u32, t: u32) {
    let at = (t / 16u) * LDH + (t % 16u) * 4u;
    put4(at, n.r0, which);
    put4(at + 8u * LDH, n.r1, which);
    put4(at + 16u * LDH, n.r2, which);
    put4(at + 24u * LDH, n.r3, which);
}

fn strip4(at: u32) -> vec4<f32> {
    return vec4<f32>(ss[at], ss[at + 1u], ss[at + 2u], ss[at + 3u]);
}

fn hmax(v: vec4<f32>) -> f32 {
    return max(max(v.x, v.y), max(v.z, v.w));
}

fn hsum(v: vec4<f32>) -> f32 {
    return (v.x + v.y) + (v.z + v.w);
}

@compute @workgroup_size(128)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(subgroup_id) s: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let bh = wg.y;
    let bi = bh / p.nh;
    let h = bh % p.nh;
    let blocks = (p.t + BQ - 1u) / BQ;
    let row0 = (blocks - 1u - wg.x) * BQ;
    // This lane's row (rows past the end work on a copy of the last and write
    // nothing), and its half of the row's keys and channels.
    let r = lane / 2u;
    let half = lane % 2u;
    let i = row0 + s * 16u + r;
    let ir = min(i, p.t - 1u);
    let strip = s * SSUB + r * LDS;
    // This row's mask words (used with dropout on).
    let mask_row = nwg.y * p.t + (bh * p.t + ir) * ((p.t + 15u) / 16u);

    stage(bi, h, row0, BQ, 0u, t);
    var m = MASKED;
    var l = 0.0;
    var o#O = vec4<f32>(0.0);

    // Key blocks up to the diagonal: at most ceil(t / BK), t capped by the context.
    let kv_end = min(row0 + BQ, p.t);
    // The first block's K and V; each block stages the next one's.
    stage(bi, h, 0u, BK, 1u, t);
    stage(bi, h, 0u, BK, 2u, t);
    workgroupBarrier();
    for (var kb = 0u; kb < kv_end; kb += BK) {
        // Workgroup-uniform: kb and kv_end are the workgroup's.
        let more = kb + BK < kv_end;
        var ahead = Ahead();
        if (more) {
            ahead = fetch(bi, h, kb + BK, 1u, t);
        }
        // Keys kb + half * 16 + 4j .. + 4; one is visible to a row at or before it
        // (and so < t).
        let key#J = vec4<u32>(kb + half * 16u + 4u * #Ju) + vec4<u32>(0u, 1u, 2u, 3u);
        // Bit 4j + c: whether the weight of key c of vec4 j survives dropout (all set
        // without).
        var kbits = 0xffffffffu;
        if (p.threshold != 0u) {
            kbits = 0u;
            kbits |= select(0u, 1u, kept_at(bh, ir, key#J.x)) << (4u * #Ju);
            kbits |= select(0u, 2u, kept_at(bh, ir, key#J.y)) << (4u * #Ju);
            kbits |= select(0u, 4u, kept_at(bh, ir, key#J.z)) << (4u * #Ju);
            kbits |= select(0u, 8u, kept_at(bh, ir, key#J.w)) << (4u * #Ju);
            if (i < p.t && kb + half * 16u < p.t) {
                stats[mask_row + kb / 16u + half] = kbits;
            }
        }

        var s0 = zero_acc();
        var s1 = zero_acc();
        // Bounded by the head: 4 steps of 16 channels.
        for (var d = 0u; d < HS; d += 16u) {
            let q = q_frag(s * 16u * LDH + d);
            s0 = mma(q, k_frag(d), s0);
            s1 = mma(q, k_frag(16u * LDH + d), s1);
        }
        store_s(s0, s * SSUB);
        store_s(s1, s * SSUB + 16u);
        workgroupBarrier();
        // Every subgroup is past its S: the next block's K, then the loads of its V.
        if (more) {
            put_ahead(ahead, 1u, t);
            ahead = fetch(bi, h, kb + BK, 2u, t);
        }

        let vis#J = key#J <= vec4<u32>(ir);
        let sc#J = select(vec4<f32>(MASKED), strip4(strip + half * 16u + 4u * #Ju), vis#J);
        var mx = MASKED;
        mx = max(mx, hmax(sc#J));
        let mn = max(m, max(mx, pair_other(mx)));
        let corr = exp(m - mn);
        m = mn;
        // select, not a product: a masked weight is exactly 0.
        let w#J = select(vec4<f32>(0.0), exp(sc#J - vec4<f32>(mn)), vis#J);
        l = l * corr;
        l += hsum(w#J);
        // Dropout masks the numerator only: l sums the undropped weights.
        let kp#J = select(vec4<f32>(0.0), vec4<f32>(p.keep_scale), ((vec4<u32>(kbits >> (4u * #Ju)) >> vec4<u32>(0u, 1u, 2u, 3u)) & vec4<u32>(1u)) != vec4<u32>(0u));
        let wd#J = vec4<f16>(w#J * kp#J);
        let pat#J = s * PSUB + r * LDP + half * 16u + 4u * #Ju;
        ps[pat#J] = wd#J.x; ps[pat#J + 1u] = wd#J.y; ps[pat#J + 2u] = wd#J.z; ps[pat#J + 3u] = wd#J.w;
        o#O *= corr;
        workgroupBarrier();

        var pv0 = zero_acc();
        var pv1 = zero_acc();
        var pv2 = zero_acc();
        var pv3 = zero_acc();
        // Bounded by the block: 2 steps of 16 keys.
        for (var kk = 0u; kk < BK; kk += 16u) {
            let pf = p_frag(s * PSUB + kk);
            pv0 = mma(pf, v_frag(kk * LDH), pv0);
            pv1 = mma(pf, v_frag(kk * LDH + 16u), pv1);
            pv2 = mma(pf, v_frag(kk * LDH + 32u), pv2);
            pv3 = mma(pf, v_frag(kk * LDH + 48u), pv3);
        }
        store_s(pv0, s * SSUB);
        store_s(pv1, s * SSUB + 16u);
        store_s(pv2, s * SSUB + 32u);
        store_s(pv3, s * SSUB + 48u);
        workgroupBarrier();
        o#O += strip4(strip + half * 32u + 4u * #Ou);
        // Every subgroup is past its P V: the next block's V.
        if (more) {
            put_ahead(ahead, 2u, t);
        }
        // Before the next block's S reads K and overwrites what this one read.
        workgroupBarrier();
    }

    // Each row's sum from its two lanes' shares (both taken against the same max).
    let lt = l + pair_other(l);
    let base = ((bi * p.t + i) * p.c + h * p.hs) / 4u + half * 8u;
    if (i < p.t && 4u * (half * 8u + #Ou) < p.hs) { out[base + #Ou] = o#O / lt; }
    if (i < p.t && half == 0u) { stats[bh * p.t + i] = bitcast<u32>(m + log(lt)); }
}

// ---- cooperative operations ----
// The accumulators (f32), the f16 fragments of the staged tiles (A: 16 x 16 rows
// of qs or ps, row-major; B: 16 channels x 16 keys of ks, column-major, or 16 keys
// x 16 channels of vs, row-major), one multiply-add, the stores to `ss` and the
// exchange of a lane pair.
fn zero_acc() -> coop_mat16x16<f32, C> {
    return coop_mat16x16<f32, C>();
}

fn q_frag(at: u32) -> coop_mat16x16<f16, A> {
    return coopLoadT<coop_mat16x16<f16, A>>(&qs[at], LDH);
}

fn k_frag(at: u32) -> coop_mat16x16<f16, B> {
    return coopLoad<coop_mat16x16<f16, B>>(&ks[at], LDH);
}

fn p_frag(at: u32) -> coop_mat16x16<f16, A> {
    return coopLoadT<coop_mat16x16<f16, A>>(&ps[at], LDP);
}

fn v_frag(at: u32) -> coop_mat16x16<f16, B> {
    return coopLoadT<coop_mat16x16<f16, B>>(&vs[at], LDH);
}

fn mma(a: coop_mat16x16<f16, A>, b: coop_mat16x16<f16, B>, c: coop_mat16x16<f32, C>) -> coop_mat16x16<f32, C> {
    return coopMultiplyAdd(a, b, c);
}

fn store_s(acc: coop_mat16x16<f32, C>, at: u32) {
    coopStoreT(acc, &ss[at], LDS);
}

// x of the lane paired with this one (lane ^ 1: the other half of its row).
fn pair_other(x: f32) -> f32 {
    return subgroupShuffleXor(x, 1u);
}

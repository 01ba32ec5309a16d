// Causal self-attention backward from the forward's logsumexp (see attention.wgsl
// for layouts, the `#D` template lines and the split of a head between two
// threads). With p_ij = exp(s_ij - lse_i), dp_ij = dout_i · v_j and
// D_i = dout_i · out_i = sum_j p_ij dp_ij, the softmax backward is
// ds_ij = p_ij (dp_ij - D_i); dq_i = scale sum_j ds_ij k_j,
// dk_j = scale sum_i ds_ij q_i, dv_j = sum_i p_ij dout_i. With dropout (mask m_ij,
// scale included, recomputed as FlashAttention does) dp_ij becomes
// m_ij dout_i · v_j and dv_j sums p_ij m_ij dout_i; D_i = dout_i · out_i still
// equals sum_j p_ij dp_ij because out_i = sum_j p_ij m_ij v_j.
// One dispatch, no atomics: the first ceil(t / 64) workgroups of each (batch, head)
// are `dq_block`s, each looping over keys for its queries; the rest are
// `dkdv_block`s, each looping over queries for its keys. Each writes its own
// channels of dqkv. A dkdv block needs D of every query it streams, so it works D
// out from the tile's dout rows and `out` rather than wait for dq's: for t <= 64
// (one key block) each D is still computed once there.
// BT (attention.rs prepends it): rows of the other side a step streams. Lines
// starting `#V4 ` and V4 spans: the variant for heads in whole vec4s, its tensors
// bound as vec4 arrays (attention.wgsl says why); `#V1 `: the one for other heads.
struct Params { t: u32, c: u32, nh: u32, hs: u32, scale: f32, seed: u32, threshold: u32, keep_scale: f32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> dout: array<{V4:vec4<f32>}{V1:f32}>;
@group(0) @binding(2) var<storage, read> qkv: array<{V4:vec4<f32>}{V1:f32}>;
@group(0) @binding(3) var<storage, read> lse: array<f32>;
@group(0) @binding(4) var<storage, read_write> dqkv: array<{V4:vec4<f32>}{V1:f32}>;
// The forward's output, for D.
@group(0) @binding(5) var<storage, read> out: array<{V4:vec4<f32>}{V1:f32}>;

// Rows (queries for `dq`, keys for `dkdv`) of a workgroup, and the tile of the
// other side that streams through shared memory.
const BQ: u32 = 64u;

// The tile: two tensors, BT rows of HS4 vec4s each (k, v for `dq`; q, dout for `dkdv`).
var<workgroup> tile: array<vec4<f32>, 2u * BT * HS4>;
// Half dots (whole dots with subgroups): [tile row][thread] = (row a, row b).
var<workgroup> part: array<vec2<f32>, BT * 128u>;
var<workgroup> lse_t: array<f32, BT>;
var<workgroup> dsum_t: array<f32, BT>;
// dkdv: each dout vec4 of the tile times out's, for the tile's D.
var<workgroup> dprod: array<f32, BT * HS4>;
// With dropout, the mask's factor (`keep`) of each (tile row, block row) pair,
// [tile row][block row]: each worked out once a workgroup and read by every thread
// that needs it, where each thread hashing its own pairs hashed each one twice (dq)
// or four times (dkdv).
var<workgroup> kept_t: array<f32, BT * BQ>;

fn qkv4(bi: u32, ti: u32, which: u32, h: u32, d: u32) -> vec4<f32> {
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

fn dout4(bi: u32, ti: u32, h: u32, d: u32) -> vec4<f32> {
    let base = (bi * p.t + ti) * p.c + h * p.hs + d;
#V4     if (d >= p.hs) { return vec4<f32>(0.0); }
#V4     return dout[base / 4u];
#V1     var v = vec4<f32>(0.0);
#V1     if (d < p.hs) { v.x = dout[base]; }
#V1     if (d + 1u < p.hs) { v.y = dout[base + 1u]; }
#V1     if (d + 2u < p.hs) { v.z = dout[base + 2u]; }
#V1     if (d + 3u < p.hs) { v.w = dout[base + 3u]; }
#V1     return v;
}

fn out4(bi: u32, ti: u32, h: u32, d: u32) -> vec4<f32> {
    let base = (bi * p.t + ti) * p.c + h * p.hs + d;
#V4     if (d >= p.hs) { return vec4<f32>(0.0); }
#V4     return out[base / 4u];
#V1     var v = vec4<f32>(0.0);
#V1     if (d < p.hs) { v.x = out[base]; }
#V1     if (d + 1u < p.hs) { v.y = out[base + 1u]; }
#V1     if (d + 2u < p.hs) { v.z = out[base + 2u]; }
#V1     if (d + 3u < p.hs) { v.w = out[base + 3u]; }
#V1     return v;
}

fn store4(ti: u32, bi: u32, which: u32, h: u32, d: u32, v: vec4<f32>) {
    let base = (bi * p.t + ti) * 3u * p.c + which * p.c + h * p.hs + d;
#V4     if (d < p.hs) { dqkv[base / 4u] = v; }
#V1     if (d < p.hs) { dqkv[base] = v.x; }
#V1     if (d + 1u < p.hs) { dqkv[base + 1u] = v.y; }
#V1     if (d + 2u < p.hs) { dqkv[base + 2u] = v.z; }
#V1     if (d + 3u < p.hs) { dqkv[base + 3u] = v.w; }
}

fn hsum(v: vec4<f32>) -> f32 {
    return (v.x + v.y) + (v.z + v.w);
}

// Both blocks: 128 threads in two groups of 64 (whole warps). In each group,
// threads 2r and 2r+1 hold halves (vec4s 2d + half) of rows x*64 + r ("a") and
// x*64 + 32 + r ("b") of one operand and work out half dots of both rows with the
// streamed tile; the halves meet in `part`. Then each group accumulates one of two
// gradients, so both groups do the same work and hold 2 x HP + (1 or 2) x HP vec4s.
// Where the device has subgroups, the partners add their halves by a shuffle (as
// in attention.wgsl; lines `#SG `, the shared-memory ones `#SM `) and `part` takes
// whole dots: half the reads. The groups still meet there, behind a barrier (a
// subgroup may be narrower than a group, and a shuffle in `if (grp ..)` would be
// in non-uniform control flow, which is why D's halves stay in `part` too).

// Block x: queries x*64 .. of (batch, head) bh. Group 0 holds q (scores
// s = q·k), group 1 dout (dp = dout·v); group 0 accumulates dq of row a, group 1
// of row b. Keys stream through shared memory BT at a time.
fn dq_block(x: u32, bh: u32, t: u32) {
    let bi = bh / p.nh;
    let h = bh % p.nh;
    let row0 = x * BQ;
    let grp = t / 64u;
    let tl = t % 64u;
    let hh = tl % 2u;
    let rowa = row0 + tl / 2u;
    let rowb = rowa + 32u;
    let ia = min(rowa, p.t - 1u);
    let ib = min(rowb, p.t - 1u);

    var xa#D = vec4<f32>(0.0);
    var xb#D = vec4<f32>(0.0);
    if (grp == 0u) {
        xa#D = qkv4(bi, ia, 0u, h, (2u * #Du + hh) * 4u) * p.scale;
        xb#D = qkv4(bi, ib, 0u, h, (2u * #Du + hh) * 4u) * p.scale;
    } else {
        xa#D = dout4(bi, ia, h, (2u * #Du + hh) * 4u);
        xb#D = dout4(bi, ib, h, (2u * #Du + hh) * 4u);
        // D = dout · out, half dots; the partner's half comes through `part`.
        var da4 = vec4<f32>(0.0);
        var db4 = vec4<f32>(0.0);
        da4 = fma(xa#D, out4(bi, ia, h, (2u * #Du + hh) * 4u), da4); db4 = fma(xb#D, out4(bi, ib, h, (2u * #Du + hh) * 4u), db4);
        part[tl] = vec2<f32>(hsum(da4), hsum(db4));
    }
    var acc#D = vec4<f32>(0.0);
    workgroupBarrier();
    let dd2 = part[tl] + part[tl ^ 1u];
    // This thread's accumulated row: a in group 0, b in group 1.
    let row = select(rowb, rowa, grp == 0u);
    let ir = select(ib, ia, grp == 0u);
    let dd = select(dd2.y, dd2.x, grp == 0u);
    let lse_r = lse[bh * p.t + ir];
    // The accumulated row within the block (kept_t's column).
    let local = row - row0;

    let kv_end = min(row0 + BQ, p.t);
    for (var kt = 0u; kt < kv_end; kt += BT) {
        for (var e = t; e < 2u * BT * HS4; e += 2u * BQ) {
            let which = 1u + e / (BT * HS4);
            let f = e % (BT * HS4);
            let j = kt + f / HS4;
            var v = vec4<f32>(0.0);
            if (j < p.t) {
                v = qkv4(bi, j, which, h, (f % HS4) * 4u);
            }
            tile[e] = v;
        }
        // Key kt + jj (jj < BT) against block row r (query row0 + r).
        if (p.threshold != 0u) {
            for (var e = t; e < BT * BQ; e += 2u * BQ) {
                kept_t[e] = keep(bh, min(row0 + e % BQ, p.t - 1u), kt + e / BQ);
            }
        }
        workgroupBarrier();
        // Group 0: s against k (tile rows 0..BT); group 1: dp against v.
        let off = grp * BT * HS4 + hh;
        for (var jj = 0u; jj < BT; jj++) {
            let k0 = off + jj * HS4;
            var sa = vec4<f32>(0.0);
            var sb = vec4<f32>(0.0);
            sa = fma(xa#D, tile[k0 + 2u * #Du], sa); sb = fma(xb#D, tile[k0 + 2u * #Du], sb);
#SM         part[jj * 128u + t] = vec2<f32>(hsum(sa), hsum(sb));
#SG         let own = vec2<f32>(hsum(sa), hsum(sb));
#SG         part[jj * 128u + t] = own + subgroupShuffleXor(own, 1u);
        }
        workgroupBarrier();
        for (var jj = 0u; jj < BT; jj++) {
            // Own half plus the partner's (by shuffle, or here): both threads add
            // the same two numbers.
#SM         let s2 = part[jj * 128u + tl] + part[jj * 128u + (tl ^ 1u)];
#SM         let dp2 = part[jj * 128u + 64u + tl] + part[jj * 128u + 64u + (tl ^ 1u)];
#SG         let s2 = part[jj * 128u + tl];
#SG         let dp2 = part[jj * 128u + 64u + tl];
            let s = select(s2.y, s2.x, grp == 0u);
            let dp = select(dp2.y, dp2.x, grp == 0u);
            // select, not a product: exp of a masked score may be inf.
            let pr = select(0.0, exp(s - lse_r), kt + jj <= ir);
            let kept = select(p.keep_scale, kept_t[jj * BQ + local], p.threshold != 0u);
            let ds = vec4<f32>(pr * (kept * dp - dd));
            let k0 = jj * HS4 + hh;
            acc#D = fma(ds, tile[k0 + 2u * #Du], acc#D);
        }
        workgroupBarrier();
    }

    if (row < p.t) {
        store4(row, bi, 0u, h, (2u * #Du + hh) * 4u, acc#D * p.scale);
    }
}

// Block x: keys x*64 .. of (batch, head) bh. Group 0 holds k (scores
// s = q·k) and accumulates dv of rows a and b; group 1 holds v (dp = dout·v) and
// accumulates dk. Queries stream through shared memory BT at a time from the
// block's first key on.
fn dkdv_block(x: u32, bh: u32, t: u32) {
    let bi = bh / p.nh;
    let h = bh % p.nh;
    let row0 = x * BQ;
    let grp = t / 64u;
    let tl = t % 64u;
    let hh = tl % 2u;
    let keya = row0 + tl / 2u;
    let keyb = keya + 32u;
    let ja = min(keya, p.t - 1u);
    let jb = min(keyb, p.t - 1u);

    // k (scaled) in group 0, v in group 1.
    var xa#D = qkv4(bi, ja, 1u + grp, h, (2u * #Du + hh) * 4u) * select(1.0, p.scale, grp == 0u);
    var xb#D = qkv4(bi, jb, 1u + grp, h, (2u * #Du + hh) * 4u) * select(1.0, p.scale, grp == 0u);
    var acca#D = vec4<f32>(0.0);
    var accb#D = vec4<f32>(0.0);

    for (var it = row0; it < p.t; it += BT) {
        // Tile rows 0..BT: q; BT..2BT: dout, each vec4's share of D beside it.
        for (var e = t; e < 2u * BT * HS4; e += 2u * BQ) {
            let f = e % (BT * HS4);
            let i = it + f / HS4;
            let d = (f % HS4) * 4u;
            var v = vec4<f32>(0.0);
            var dv = 0.0;
            if (i < p.t) {
                if (e < BT * HS4) {
                    v = qkv4(bi, i, 0u, h, d);
                } else {
                    v = dout4(bi, i, h, d);
                    dv = hsum(v * out4(bi, i, h, d));
                }
            }
            tile[e] = v;
            if (e >= BT * HS4) {
                dprod[f] = dv;
            }
        }
        if (t < BT) {
            let i = min(it + t, p.t - 1u);
            lse_t[t] = lse[bh * p.t + i];
        }
        // Query it + ii (ii < BT) against block row r (key row0 + r).
        if (p.threshold != 0u) {
            for (var e = t; e < BT * BQ; e += 2u * BQ) {
                kept_t[e] = keep(bh, it + e / BQ, min(row0 + e % BQ, p.t - 1u));
            }
        }
        workgroupBarrier();
        // D of the tile's queries, read after the next barrier.
        if (t < BT) {
            var dd = 0.0;
            for (var d = 0u; d < HS4; d++) {
                dd += dprod[t * HS4 + d];
            }
            dsum_t[t] = dd;
        }
        let off = grp * BT * HS4 + hh;
        for (var ii = 0u; ii < BT; ii++) {
            let q0 = off + ii * HS4;
            var sa = vec4<f32>(0.0);
            var sb = vec4<f32>(0.0);
            sa = fma(xa#D, tile[q0 + 2u * #Du], sa); sb = fma(xb#D, tile[q0 + 2u * #Du], sb);
#SM         part[ii * 128u + t] = vec2<f32>(hsum(sa), hsum(sb));
#SG         let own = vec2<f32>(hsum(sa), hsum(sb));
#SG         part[ii * 128u + t] = own + subgroupShuffleXor(own, 1u);
        }
        workgroupBarrier();
        // Group 0 adds p * dout (tile rows BT..), group 1 ds * q (rows 0..BT).
        let other = (1u - grp) * BT * HS4 + hh;
        for (var ii = 0u; ii < BT; ii++) {
#SM         let s2 = part[ii * 128u + tl] + part[ii * 128u + (tl ^ 1u)];
#SM         let dp2 = part[ii * 128u + 64u + tl] + part[ii * 128u + 64u + (tl ^ 1u)];
#SG         let s2 = part[ii * 128u + tl];
#SG         let dp2 = part[ii * 128u + 64u + tl];
            let i = it + ii;
            let pa = select(0.0, exp(s2.x - lse_t[ii]), i >= ja && i < p.t);
            let pb = select(0.0, exp(s2.y - lse_t[ii]), i >= jb && i < p.t);
            let ka = select(p.keep_scale, kept_t[ii * BQ + tl / 2u], p.threshold != 0u);
            let kb = select(p.keep_scale, kept_t[ii * BQ + 32u + tl / 2u], p.threshold != 0u);
            var wa = pa * ka;
            var wb = pb * kb;
            if (grp == 1u) {
                wa = pa * (ka * dp2.x - dsum_t[ii]);
                wb = pb * (kb * dp2.y - dsum_t[ii]);
            }
            let q0 = other + ii * HS4;
            acca#D = fma(vec4<f32>(wa), tile[q0 + 2u * #Du], acca#D); accb#D = fma(vec4<f32>(wb), tile[q0 + 2u * #Du], accb#D);
        }
        workgroupBarrier();
    }

    // Group 0 writes dv (part 2), group 1 dk (part 1, times the scale).
    let which = 2u - grp;
    let scale = select(1.0, p.scale, grp == 1u);
    if (keya < p.t) {
        store4(keya, bi, which, h, (2u * #Du + hh) * 4u, acca#D * scale);
    }
    if (keyb < p.t) {
        store4(keyb, bi, which, h, (2u * #Du + hh) * 4u, accb#D * scale);
    }
}

// Workgroup (x, y) of (2 ceil(t / 64), b * nh): a dq block for x below ceil(t / 64),
// else a dk/dv block.
@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let blocks = (p.t + BQ - 1u) / BQ;
    if (wg.x < blocks) {
        dq_block(wg.x, wg.y, t);
    } else {
        dkdv_block(wg.x - blocks, wg.y, t);
    }
}

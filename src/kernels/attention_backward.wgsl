// Causal self-attention backward from the forward's logsumexp (see attention.wgsl
// for layouts and the `#D` template lines). With p_ij = exp(s_ij - lse_i),
// dp_ij = dout_i · v_j and D_i = dout_i · out_i = sum_j p_ij dp_ij, the softmax
// backward is ds_ij = p_ij (dp_ij - D_i); dq_i = scale sum_j ds_ij k_j,
// dk_j = scale sum_i ds_ij q_i, dv_j = sum_i p_ij dout_i. No atomics: `dq` gives
// each query row one thread (looping over keys) and writes D; then `dkdv` gives
// each key one dk thread and one dv thread (looping over queries). Each kernel
// writes its own channels of dqkv.
struct Params { t: u32, c: u32, nh: u32, hs: u32, scale: f32, _pad0: u32, _pad1: u32, _pad2: u32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> dout: array<f32>;
@group(0) @binding(2) var<storage, read> qkv: array<f32>;
@group(0) @binding(3) var<storage, read> lse: array<f32>;
// D_i: written by `dq`, read by `dkdv`.
@group(0) @binding(4) var<storage, read_write> dsum: array<f32>;
@group(0) @binding(5) var<storage, read_write> dqkv: array<f32>;
// Used by `dq` only (the last binding, so `dkdv` simply binds one buffer fewer).
@group(0) @binding(6) var<storage, read> out: array<f32>;

const BQ: u32 = 64u;
const BT: u32 = 16u;

// A tile of 16 rows (keys for `dq`, queries for `dkdv`) of two tensors.
var<workgroup> ta: array<vec4<f32>, BT * HS4>;
var<workgroup> tb: array<vec4<f32>, BT * HS4>;
var<workgroup> ra: array<f32, BT>;
var<workgroup> rb: array<f32, BT>;

fn qkv4(bi: u32, ti: u32, part: u32, h: u32, d: u32) -> vec4<f32> {
    let base = (bi * p.t + ti) * 3u * p.c + part * p.c + h * p.hs + d;
    var v = vec4<f32>(0.0);
    if (d < p.hs) { v.x = qkv[base]; }
    if (d + 1u < p.hs) { v.y = qkv[base + 1u]; }
    if (d + 2u < p.hs) { v.z = qkv[base + 2u]; }
    if (d + 3u < p.hs) { v.w = qkv[base + 3u]; }
    return v;
}

fn dout4(bi: u32, ti: u32, h: u32, d: u32) -> vec4<f32> {
    let base = (bi * p.t + ti) * p.c + h * p.hs + d;
    var v = vec4<f32>(0.0);
    if (d < p.hs) { v.x = dout[base]; }
    if (d + 1u < p.hs) { v.y = dout[base + 1u]; }
    if (d + 2u < p.hs) { v.z = dout[base + 2u]; }
    if (d + 3u < p.hs) { v.w = dout[base + 3u]; }
    return v;
}

fn out4(bi: u32, ti: u32, h: u32, d: u32) -> vec4<f32> {
    let base = (bi * p.t + ti) * p.c + h * p.hs + d;
    var v = vec4<f32>(0.0);
    if (d < p.hs) { v.x = out[base]; }
    if (d + 1u < p.hs) { v.y = out[base + 1u]; }
    if (d + 2u < p.hs) { v.z = out[base + 2u]; }
    if (d + 3u < p.hs) { v.w = out[base + 3u]; }
    return v;
}

fn store4(ti: u32, bi: u32, part: u32, h: u32, d: u32, v: vec4<f32>) {
    let base = (bi * p.t + ti) * 3u * p.c + part * p.c + h * p.hs + d;
    if (d < p.hs) { dqkv[base] = v.x; }
    if (d + 1u < p.hs) { dqkv[base + 1u] = v.y; }
    if (d + 2u < p.hs) { dqkv[base + 2u] = v.z; }
    if (d + 3u < p.hs) { dqkv[base + 3u] = v.w; }
}

fn hsum(v: vec4<f32>) -> f32 {
    return (v.x + v.y) + (v.z + v.w);
}

// Workgroup (x, y): queries x*64.. of (batch, head) y, one thread a query.
@compute @workgroup_size(64)
fn dq(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let bh = wg.y;
    let bi = bh / p.nh;
    let h = bh % p.nh;
    let qb = wg.x * BQ;
    let i = qb + lid;
    let iq = min(i, p.t - 1u);

    var q#D = qkv4(bi, iq, 0u, h, #Du * 4u) * p.scale;
    var g#D = dout4(bi, iq, h, #Du * 4u);
    var gq#D = vec4<f32>(0.0);
    var dd4 = vec4<f32>(0.0);
    dd4 = fma(g#D, out4(bi, iq, h, #Du * 4u), dd4);
    let dd = hsum(dd4);
    let li = lse[bh * p.t + iq];

    let kv_end = min(qb + BQ, p.t);
    for (var kt = 0u; kt < kv_end; kt += BT) {
        for (var e = lid; e < BT * HS4; e += BQ) {
            let j = kt + e / HS4;
            let d = (e % HS4) * 4u;
            var kv = vec4<f32>(0.0);
            var vv = vec4<f32>(0.0);
            if (j < p.t) {
                kv = qkv4(bi, j, 1u, h, d);
                vv = qkv4(bi, j, 2u, h, d);
            }
            ta[e] = kv;
            tb[e] = vv;
        }
        workgroupBarrier();
        // Two keys at a time, dots in vec4 accumulators (independent FMA chains).
        for (var jj = 0u; jj < BT; jj += 2u) {
            let b0 = jj * HS4;
            let b1 = b0 + HS4;
            var sa0 = vec4<f32>(0.0);
            var sa1 = vec4<f32>(0.0);
            var da0 = vec4<f32>(0.0);
            var da1 = vec4<f32>(0.0);
            sa0 = fma(q#D, ta[b0 + #Du], sa0); sa1 = fma(q#D, ta[b1 + #Du], sa1); da0 = fma(g#D, tb[b0 + #Du], da0); da1 = fma(g#D, tb[b1 + #Du], da1);
            // select, not a product: exp of a masked score may be inf.
            let p0 = select(0.0, exp(hsum(sa0) - li), kt + jj <= iq);
            let p1 = select(0.0, exp(hsum(sa1) - li), kt + jj + 1u <= iq);
            let ds0 = vec4<f32>(p0 * (hsum(da0) - dd));
            let ds1 = vec4<f32>(p1 * (hsum(da1) - dd));
            gq#D = fma(ds0, ta[b0 + #Du], fma(ds1, ta[b1 + #Du], gq#D));
        }
        workgroupBarrier();
    }

    if (i < p.t) {
        store4(i, bi, 0u, h, #Du * 4u, gq#D * p.scale);
        dsum[bh * p.t + i] = dd;
    }
}

// Workgroup (x, y): keys x*64.. of (batch, head) y. Threads 0..63 sum dk of one
// key each, threads 64..127 dv (whole warps take one role). Queries stream
// through shared memory 16 at a time, from the block's first key to the end.
@compute @workgroup_size(128)
fn dkdv(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let bh = wg.y;
    let bi = bh / p.nh;
    let h = bh % p.nh;
    let jb = wg.x * BQ;
    let is_dk = lid < BQ;
    let j = jb + lid % BQ;
    let jk = min(j, p.t - 1u);

    var k#D = qkv4(bi, jk, 1u, h, #Du * 4u) * p.scale;
    var v#D = select(vec4<f32>(0.0), qkv4(bi, jk, 2u, h, #Du * 4u), is_dk);
    var acc#D = vec4<f32>(0.0);

    for (var it = jb; it < p.t; it += BT) {
        for (var e = lid; e < BT * HS4; e += 2u * BQ) {
            let i = it + e / HS4;
            let d = (e % HS4) * 4u;
            var qv = vec4<f32>(0.0);
            var gv = vec4<f32>(0.0);
            if (i < p.t) {
                qv = qkv4(bi, i, 0u, h, d);
                gv = dout4(bi, i, h, d);
            }
            ta[e] = qv;
            tb[e] = gv;
        }
        if (lid < BT) {
            let i = min(it + lid, p.t - 1u);
            ra[lid] = lse[bh * p.t + i];
            rb[lid] = dsum[bh * p.t + i];
        }
        workgroupBarrier();
        if (is_dk) {
            for (var ii = 0u; ii < BT; ii += 2u) {
                let b0 = ii * HS4;
                let b1 = b0 + HS4;
                var sa0 = vec4<f32>(0.0);
                var sa1 = vec4<f32>(0.0);
                var da0 = vec4<f32>(0.0);
                var da1 = vec4<f32>(0.0);
                sa0 = fma(k#D, ta[b0 + #Du], sa0); sa1 = fma(k#D, ta[b1 + #Du], sa1); da0 = fma(v#D, tb[b0 + #Du], da0); da1 = fma(v#D, tb[b1 + #Du], da1);
                let i = it + ii;
                let p0 = select(0.0, exp(hsum(sa0) - ra[ii]), i >= jk && i < p.t);
                let p1 = select(0.0, exp(hsum(sa1) - ra[ii + 1u]), i + 1u >= jk && i + 1u < p.t);
                let ds0 = vec4<f32>(p0 * (hsum(da0) - rb[ii]));
                let ds1 = vec4<f32>(p1 * (hsum(da1) - rb[ii + 1u]));
                acc#D = fma(ds0, ta[b0 + #Du], fma(ds1, ta[b1 + #Du], acc#D));
            }
        } else {
            for (var ii = 0u; ii < BT; ii += 4u) {
                let b0 = ii * HS4;
                let b1 = b0 + HS4;
                let b2 = b1 + HS4;
                let b3 = b2 + HS4;
                var sa0 = vec4<f32>(0.0);
                var sa1 = vec4<f32>(0.0);
                var sa2 = vec4<f32>(0.0);
                var sa3 = vec4<f32>(0.0);
                sa0 = fma(k#D, ta[b0 + #Du], sa0); sa1 = fma(k#D, ta[b1 + #Du], sa1); sa2 = fma(k#D, ta[b2 + #Du], sa2); sa3 = fma(k#D, ta[b3 + #Du], sa3);
                let i = it + ii;
                let p0 = vec4<f32>(select(0.0, exp(hsum(sa0) - ra[ii]), i >= jk && i < p.t));
                let p1 = vec4<f32>(select(0.0, exp(hsum(sa1) - ra[ii + 1u]), i + 1u >= jk && i + 1u < p.t));
                let p2 = vec4<f32>(select(0.0, exp(hsum(sa2) - ra[ii + 2u]), i + 2u >= jk && i + 2u < p.t));
                let p3 = vec4<f32>(select(0.0, exp(hsum(sa3) - ra[ii + 3u]), i + 3u >= jk && i + 3u < p.t));
                acc#D = fma(p0, tb[b0 + #Du], fma(p1, tb[b1 + #Du], fma(p2, tb[b2 + #Du], fma(p3, tb[b3 + #Du], acc#D))));
            }
        }
        workgroupBarrier();
    }

    if (j < p.t) {
        if (is_dk) {
            store4(j, bi, 1u, h, #Du * 4u, acc#D * p.scale);
        } else {
            store4(j, bi, 2u, h, #Du * 4u, acc#D);
        }
    }
}

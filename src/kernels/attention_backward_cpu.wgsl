// Causal self-attention backward for CPU adapters: the results of
// attention_backward.wgsl (same bindings, same two passes, same formulas; see there)
// one row an invocation, with no workgroup memory and no barriers. `const HS4` is
// prepended as for attention_cpu.wgsl; each row's operands live in private arrays.
//
// No atomics: `dq` gives each query row its dq (looping over keys) and writes
// D_i = dout_i · out_i; then `dkdv` gives each key row its dk and dv (looping over
// queries). Lanes of a workgroup take consecutive rows of one (batch, head) and
// walk the same rows of the other side, masking what causality hides, so the
// streamed loads are the same address on every lane.
struct Params { t: u32, c: u32, nh: u32, hs: u32, scale: f32, seed: u32, threshold: u32, keep_scale: f32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> dout: array<f32>;
@group(0) @binding(2) var<storage, read> qkv: array<f32>;
@group(0) @binding(3) var<storage, read> lse: array<f32>;
// D_i: written by `dq`, read by `dkdv`.
@group(0) @binding(4) var<storage, read_write> dsum: array<f32>;
@group(0) @binding(5) var<storage, read_write> dqkv: array<f32>;
// Used by `dq` only (the last binding, so `dkdv` simply binds one buffer fewer).
@group(0) @binding(6) var<storage, read> out: array<f32>;

const ROWS: u32 = 8u;

fn qkv4(bi: u32, ti: u32, which: u32, h: u32, d: u32) -> vec4<f32> {
    let base = (bi * p.t + ti) * 3u * p.c + which * p.c + h * p.hs + d;
    if (d + 3u < p.hs) {
        return vec4<f32>(qkv[base], qkv[base + 1u], qkv[base + 2u], qkv[base + 3u]);
    }
    var v = vec4<f32>(0.0);
    if (d < p.hs) { v.x = qkv[base]; }
    if (d + 1u < p.hs) { v.y = qkv[base + 1u]; }
    if (d + 2u < p.hs) { v.z = qkv[base + 2u]; }
    return v;
}

fn dout4(bi: u32, ti: u32, h: u32, d: u32) -> vec4<f32> {
    let base = (bi * p.t + ti) * p.c + h * p.hs + d;
    if (d + 3u < p.hs) {
        return vec4<f32>(dout[base], dout[base + 1u], dout[base + 2u], dout[base + 3u]);
    }
    var v = vec4<f32>(0.0);
    if (d < p.hs) { v.x = dout[base]; }
    if (d + 1u < p.hs) { v.y = dout[base + 1u]; }
    if (d + 2u < p.hs) { v.z = dout[base + 2u]; }
    return v;
}

fn out4(bi: u32, ti: u32, h: u32, d: u32) -> vec4<f32> {
    let base = (bi * p.t + ti) * p.c + h * p.hs + d;
    if (d + 3u < p.hs) {
        return vec4<f32>(out[base], out[base + 1u], out[base + 2u], out[base + 3u]);
    }
    var v = vec4<f32>(0.0);
    if (d < p.hs) { v.x = out[base]; }
    if (d + 1u < p.hs) { v.y = out[base + 1u]; }
    if (d + 2u < p.hs) { v.z = out[base + 2u]; }
    return v;
}

fn store4(ti: u32, bi: u32, which: u32, h: u32, d: u32, v: vec4<f32>) {
    let base = (bi * p.t + ti) * 3u * p.c + which * p.c + h * p.hs + d;
    if (d < p.hs) { dqkv[base] = v.x; }
    if (d + 1u < p.hs) { dqkv[base + 1u] = v.y; }
    if (d + 2u < p.hs) { dqkv[base + 2u] = v.z; }
    if (d + 3u < p.hs) { dqkv[base + 3u] = v.w; }
}

// Attention-probability dropout, the rule of attention.wgsl: 0 if probability
// [b, h, i, j] is dropped, else keep_scale (1 without dropout).
fn mix(v: u32) -> u32 {
    var h = v;
    h ^= h >> 16u;
    h *= 0x85ebca6bu;
    h ^= h >> 13u;
    h *= 0xc2b2ae35u;
    h ^= h >> 16u;
    return h;
}

fn keep(bh: u32, i: u32, j: u32) -> f32 {
    if (p.threshold == 0u) {
        return p.keep_scale;
    }
    let idx = (bh * p.t + i) * p.t + j;
    return select(0.0, p.keep_scale, (mix(p.seed ^ mix(idx)) >> 8u) >= p.threshold);
}

// Workgroup (x, y): query rows x*ROWS .. of (batch, head) y, one a lane; keys from
// 0 to the workgroup's last row.
@compute @workgroup_size(8)
fn dq(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lane: u32) {
    let bh = wg.y;
    let bi = bh / p.nh;
    let h = bh % p.nh;
    let row0 = wg.x * ROWS;
    let row = row0 + lane;
    let i = min(row, p.t - 1u);

    var q: array<vec4<f32>, HS4>;
    var g: array<vec4<f32>, HS4>;
    var acc: array<vec4<f32>, HS4>;
    var dd4 = vec4<f32>(0.0);
    for (var d = 0u; d < HS4; d++) {
        q[d] = qkv4(bi, i, 0u, h, d * 4u) * p.scale;
        g[d] = dout4(bi, i, h, d * 4u);
        dd4 = fma(g[d], out4(bi, i, h, d * 4u), dd4);
        acc[d] = vec4<f32>(0.0);
    }
    let dd = (dd4.x + dd4.y) + (dd4.z + dd4.w);
    let lse_i = lse[bh * p.t + i];

    let kv_end = min(row0 + ROWS, p.t);
    var k: array<vec4<f32>, HS4>;
    for (var j = 0u; j < kv_end; j++) {
        var s4 = vec4<f32>(0.0);
        var dp4 = vec4<f32>(0.0);
        for (var d = 0u; d < HS4; d++) {
            k[d] = qkv4(bi, j, 1u, h, d * 4u);
            s4 = fma(q[d], k[d], s4);
            dp4 = fma(g[d], qkv4(bi, j, 2u, h, d * 4u), dp4);
        }
        let s = (s4.x + s4.y) + (s4.z + s4.w);
        let dp = (dp4.x + dp4.y) + (dp4.z + dp4.w);
        // select, not a product: exp of a masked score may be inf.
        let pr = select(0.0, exp(s - lse_i), j <= i);
        let ds = vec4<f32>(pr * (keep(bh, i, j) * dp - dd));
        for (var d = 0u; d < HS4; d++) {
            acc[d] = fma(ds, k[d], acc[d]);
        }
    }

    if (row < p.t) {
        for (var d = 0u; d < HS4; d++) {
            store4(row, bi, 0u, h, d * 4u, acc[d] * p.scale);
        }
        dsum[bh * p.t + row] = dd;
    }
}

// Workgroup (x, y): key rows x*ROWS .. of (batch, head) y, one a lane; queries from
// the workgroup's first key to the end.
@compute @workgroup_size(8)
fn dkdv(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lane: u32) {
    let bh = wg.y;
    let bi = bh / p.nh;
    let h = bh % p.nh;
    let row0 = wg.x * ROWS;
    let key = row0 + lane;
    let j = min(key, p.t - 1u);

    var k: array<vec4<f32>, HS4>;
    var v: array<vec4<f32>, HS4>;
    var dk: array<vec4<f32>, HS4>;
    var dv: array<vec4<f32>, HS4>;
    for (var d = 0u; d < HS4; d++) {
        k[d] = qkv4(bi, j, 1u, h, d * 4u) * p.scale;
        v[d] = qkv4(bi, j, 2u, h, d * 4u);
        dk[d] = vec4<f32>(0.0);
        dv[d] = vec4<f32>(0.0);
    }

    var q: array<vec4<f32>, HS4>;
    var g: array<vec4<f32>, HS4>;
    for (var i = row0; i < p.t; i++) {
        var s4 = vec4<f32>(0.0);
        var dp4 = vec4<f32>(0.0);
        for (var d = 0u; d < HS4; d++) {
            q[d] = qkv4(bi, i, 0u, h, d * 4u);
            g[d] = dout4(bi, i, h, d * 4u);
            s4 = fma(k[d], q[d], s4);
            dp4 = fma(v[d], g[d], dp4);
        }
        let s = (s4.x + s4.y) + (s4.z + s4.w);
        let dp = (dp4.x + dp4.y) + (dp4.z + dp4.w);
        let pr = select(0.0, exp(s - lse[bh * p.t + i]), i >= j);
        let kp = keep(bh, i, j);
        let wv = vec4<f32>(pr * kp);
        let wk = vec4<f32>(pr * (kp * dp - dsum[bh * p.t + i]));
        for (var d = 0u; d < HS4; d++) {
            dv[d] = fma(wv, g[d], dv[d]);
            dk[d] = fma(wk, q[d], dk[d]);
        }
    }

    if (key < p.t) {
        for (var d = 0u; d < HS4; d++) {
            store4(key, bi, 1u, h, d * 4u, dk[d] * p.scale);
            store4(key, bi, 2u, h, d * 4u, dv[d]);
        }
    }
}

// Causal self-attention backward for CPU adapters: the results of
// attention_backward.wgsl (same bindings, same two passes, same formulas; see there)
// R rows an invocation, with no workgroup memory and no barriers. `const HS4` is
// prepended as for attention_cpu.wgsl; each row's operands live in private arrays.
//
// No atomics: `dq` gives each query row its dq (looping over keys) and writes
// D_i = dout_i · out_i; then `dkdv` gives each key row its dk and dv (looping over
// queries). Lanes of a workgroup take interleaved rows of one (batch, head) and
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

// Lanes a workgroup, rows a lane (each streamed load serves R rows), rows a
// workgroup (`CPU_BLOCKS` in attention.rs).
const LANES: u32 = 8u;
const R: u32 = 2u;
const ROWS: u32 = LANES * R;

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

// Workgroup (x, y): query rows x*ROWS .. of (batch, head) y, R a lane (row r of a
// lane: row0 + r * LANES + lane); keys from 0 to the workgroup's last row.
@compute @workgroup_size(8)
fn dq(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lane: u32) {
    let bh = wg.y;
    let bi = bh / p.nh;
    let h = bh % p.nh;
    let row0 = wg.x * ROWS;
    let last = p.t - 1u;

    var q: array<vec4<f32>, R * HS4>;
    var g: array<vec4<f32>, R * HS4>;
    var acc: array<vec4<f32>, R * HS4>;
    var dd: array<f32, R>;
    var lse_r: array<f32, R>;
    for (var r = 0u; r < R; r++) {
        let i = min(row0 + r * LANES + lane, last);
        var dd4 = vec4<f32>(0.0);
        for (var d = 0u; d < HS4; d++) {
            let x = r * HS4 + d;
            q[x] = qkv4(bi, i, 0u, h, d * 4u) * p.scale;
            g[x] = dout4(bi, i, h, d * 4u);
            dd4 = fma(g[x], out4(bi, i, h, d * 4u), dd4);
            acc[x] = vec4<f32>(0.0);
        }
        dd[r] = (dd4.x + dd4.y) + (dd4.z + dd4.w);
        lse_r[r] = lse[bh * p.t + i];
    }

    let kv_end = min(row0 + ROWS, p.t);
    var k: array<vec4<f32>, HS4>;
    for (var j = 0u; j < kv_end; j++) {
        var s4: array<vec4<f32>, R>;
        var dp4: array<vec4<f32>, R>;
        for (var r = 0u; r < R; r++) {
            s4[r] = vec4<f32>(0.0);
            dp4[r] = vec4<f32>(0.0);
        }
        for (var d = 0u; d < HS4; d++) {
            let kd = qkv4(bi, j, 1u, h, d * 4u);
            let vd = qkv4(bi, j, 2u, h, d * 4u);
            k[d] = kd;
            for (var r = 0u; r < R; r++) {
                s4[r] = fma(q[r * HS4 + d], kd, s4[r]);
                dp4[r] = fma(g[r * HS4 + d], vd, dp4[r]);
            }
        }
        var ds: array<vec4<f32>, R>;
        for (var r = 0u; r < R; r++) {
            let i = min(row0 + r * LANES + lane, last);
            let s = (s4[r].x + s4[r].y) + (s4[r].z + s4[r].w);
            let dp = (dp4[r].x + dp4[r].y) + (dp4[r].z + dp4[r].w);
            // select, not a product: exp of a masked score may be inf.
            let pr = select(0.0, exp(s - lse_r[r]), j <= i);
            ds[r] = vec4<f32>(pr * (keep(bh, i, j) * dp - dd[r]));
        }
        for (var d = 0u; d < HS4; d++) {
            let kd = k[d];
            for (var r = 0u; r < R; r++) {
                acc[r * HS4 + d] = fma(ds[r], kd, acc[r * HS4 + d]);
            }
        }
    }

    for (var r = 0u; r < R; r++) {
        let row = row0 + r * LANES + lane;
        if (row < p.t) {
            for (var d = 0u; d < HS4; d++) {
                store4(row, bi, 0u, h, d * 4u, acc[r * HS4 + d] * p.scale);
            }
            dsum[bh * p.t + row] = dd[r];
        }
    }
}

// Workgroup (x, y): key rows x*ROWS .. of (batch, head) y, R a lane as in `dq`;
// queries from the workgroup's first key to the end.
@compute @workgroup_size(8)
fn dkdv(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lane: u32) {
    let bh = wg.y;
    let bi = bh / p.nh;
    let h = bh % p.nh;
    let row0 = wg.x * ROWS;
    let last = p.t - 1u;

    var k: array<vec4<f32>, R * HS4>;
    var v: array<vec4<f32>, R * HS4>;
    var dk: array<vec4<f32>, R * HS4>;
    var dv: array<vec4<f32>, R * HS4>;
    for (var r = 0u; r < R; r++) {
        let j = min(row0 + r * LANES + lane, last);
        for (var d = 0u; d < HS4; d++) {
            let x = r * HS4 + d;
            k[x] = qkv4(bi, j, 1u, h, d * 4u) * p.scale;
            v[x] = qkv4(bi, j, 2u, h, d * 4u);
            dk[x] = vec4<f32>(0.0);
            dv[x] = vec4<f32>(0.0);
        }
    }

    var q: array<vec4<f32>, HS4>;
    var g: array<vec4<f32>, HS4>;
    for (var i = row0; i < p.t; i++) {
        var s4: array<vec4<f32>, R>;
        var dp4: array<vec4<f32>, R>;
        for (var r = 0u; r < R; r++) {
            s4[r] = vec4<f32>(0.0);
            dp4[r] = vec4<f32>(0.0);
        }
        for (var d = 0u; d < HS4; d++) {
            let qd = qkv4(bi, i, 0u, h, d * 4u);
            let gd = dout4(bi, i, h, d * 4u);
            q[d] = qd;
            g[d] = gd;
            for (var r = 0u; r < R; r++) {
                s4[r] = fma(k[r * HS4 + d], qd, s4[r]);
                dp4[r] = fma(v[r * HS4 + d], gd, dp4[r]);
            }
        }
        let lse_i = lse[bh * p.t + i];
        let dd = dsum[bh * p.t + i];
        var wv: array<vec4<f32>, R>;
        var wk: array<vec4<f32>, R>;
        for (var r = 0u; r < R; r++) {
            let j = min(row0 + r * LANES + lane, last);
            let s = (s4[r].x + s4[r].y) + (s4[r].z + s4[r].w);
            let dp = (dp4[r].x + dp4[r].y) + (dp4[r].z + dp4[r].w);
            let pr = select(0.0, exp(s - lse_i), i >= j);
            let kp = keep(bh, i, j);
            wv[r] = vec4<f32>(pr * kp);
            wk[r] = vec4<f32>(pr * (kp * dp - dd));
        }
        for (var d = 0u; d < HS4; d++) {
            let qd = q[d];
            let gd = g[d];
            for (var r = 0u; r < R; r++) {
                dv[r * HS4 + d] = fma(wv[r], gd, dv[r * HS4 + d]);
                dk[r * HS4 + d] = fma(wk[r], qd, dk[r * HS4 + d]);
            }
        }
    }

    for (var r = 0u; r < R; r++) {
        let key = row0 + r * LANES + lane;
        if (key < p.t) {
            for (var d = 0u; d < HS4; d++) {
                store4(key, bi, 1u, h, d * 4u, dk[r * HS4 + d] * p.scale);
                store4(key, bi, 2u, h, d * 4u, dv[r * HS4 + d]);
            }
        }
    }
}

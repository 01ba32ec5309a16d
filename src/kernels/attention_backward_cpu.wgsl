// Causal self-attention backward for CPU adapters: the results of
// attention_backward.wgsl (same bindings, same two passes, same formulas; see there)
// R rows an invocation, with no workgroup memory and no barriers. `const HS4` and
// `const R` are prepended, and `#R` and `#C` lines written out, as for
// attention_cpu.wgsl: each row's operands live in named variables.
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

// Lanes a workgroup and rows a workgroup (R rows a lane, `CPU_ROWS` in
// attention.rs): each streamed load serves R rows.
const LANES: u32 = 8u;
const ROWS: u32 = LANES * R;

// 4 channels d.. of a row, zero past hs, branch-free as attention_cpu.wgsl's load4.
fn qkv4(bi: u32, ti: u32, which: u32, h: u32, d: u32) -> vec4<f32> {
    let base = (bi * p.t + ti) * 3u * p.c + which * p.c + h * p.hs + d;
    let last = arrayLength(&qkv) - 1u;
    let v = vec4<f32>(qkv[min(base, last)], qkv[min(base + 1u, last)], qkv[min(base + 2u, last)], qkv[min(base + 3u, last)]);
    return select(vec4<f32>(0.0), v, vec4<u32>(d) + vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(p.hs));
}

fn dout4(bi: u32, ti: u32, h: u32, d: u32) -> vec4<f32> {
    let base = (bi * p.t + ti) * p.c + h * p.hs + d;
    let last = arrayLength(&dout) - 1u;
    let v = vec4<f32>(dout[min(base, last)], dout[min(base + 1u, last)], dout[min(base + 2u, last)], dout[min(base + 3u, last)]);
    return select(vec4<f32>(0.0), v, vec4<u32>(d) + vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(p.hs));
}

fn out4(bi: u32, ti: u32, h: u32, d: u32) -> vec4<f32> {
    let base = (bi * p.t + ti) * p.c + h * p.hs + d;
    let last = arrayLength(&out) - 1u;
    let v = vec4<f32>(out[min(base, last)], out[min(base + 1u, last)], out[min(base + 2u, last)], out[min(base + 3u, last)]);
    return select(vec4<f32>(0.0), v, vec4<u32>(d) + vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(p.hs));
}

fn store4(ti: u32, bi: u32, which: u32, h: u32, d: u32, v: vec4<f32>) {
    let base = (bi * p.t + ti) * 3u * p.c + which * p.c + h * p.hs + d;
    if (d < p.hs) { dqkv[base] = v.x; }
    if (d + 1u < p.hs) { dqkv[base + 1u] = v.y; }
    if (d + 2u < p.hs) { dqkv[base + 2u] = v.z; }
    if (d + 3u < p.hs) { dqkv[base + 3u] = v.w; }
}

// Workgroup (x, y): query rows x*ROWS .. of (batch, head) y, R a lane (row #R of a
// lane: row0 + #R * LANES + lane); keys from 0 to the workgroup's last row.
@compute @workgroup_size(8)
fn dq(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lane: u32) {
    let bh = wg.y;
    let bi = bh / p.nh;
    let h = bh % p.nh;
    let row0 = wg.x * ROWS;
    let last = p.t - 1u;

    let i#R = min(row0 + #Ru * LANES + lane, last);
    let q#R_#C = qkv4(bi, i#R, 0u, h, #Cu * 4u) * p.scale;
    let g#R_#C = dout4(bi, i#R, h, #Cu * 4u);
    var acc#R_#C = vec4<f32>(0.0);
    var dd4_#R = vec4<f32>(0.0);
    dd4_#R = fma(g#R_#C, out4(bi, i#R, h, #Cu * 4u), dd4_#R);
    let dd#R = (dd4_#R.x + dd4_#R.y) + (dd4_#R.z + dd4_#R.w);
    let lse#R = lse[bh * p.t + i#R];

    let kv_end = min(row0 + ROWS, p.t);
    for (var j = 0u; j < kv_end; j++) {
        let k#C = qkv4(bi, j, 1u, h, #Cu * 4u);
        let v#C = qkv4(bi, j, 2u, h, #Cu * 4u);
        var s4_#R = vec4<f32>(0.0);
        var dp4_#R = vec4<f32>(0.0);
        s4_#R = fma(q#R_#C, k#C, s4_#R); dp4_#R = fma(g#R_#C, v#C, dp4_#R);
        let s#R = (s4_#R.x + s4_#R.y) + (s4_#R.z + s4_#R.w);
        let dp#R = (dp4_#R.x + dp4_#R.y) + (dp4_#R.z + dp4_#R.w);
        // select, not a product: exp of a masked score may be inf.
        let pr#R = select(0.0, exp(s#R - lse#R), j <= i#R);
        let ds#R = vec4<f32>(pr#R * (keep(bh, i#R, j) * dp#R - dd#R));
        acc#R_#C = fma(ds#R, k#C, acc#R_#C);
    }

    let out_row#R = row0 + #Ru * LANES + lane;
    if (out_row#R < p.t) { store4(out_row#R, bi, 0u, h, #Cu * 4u, acc#R_#C * p.scale); }
    if (out_row#R < p.t) { dsum[bh * p.t + out_row#R] = dd#R; }
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

    let j#R = min(row0 + #Ru * LANES + lane, last);
    let k#R_#C = qkv4(bi, j#R, 1u, h, #Cu * 4u) * p.scale;
    let v#R_#C = qkv4(bi, j#R, 2u, h, #Cu * 4u);
    var dk#R_#C = vec4<f32>(0.0);
    var dv#R_#C = vec4<f32>(0.0);

    for (var i = row0; i < p.t; i++) {
        let q#C = qkv4(bi, i, 0u, h, #Cu * 4u);
        let g#C = dout4(bi, i, h, #Cu * 4u);
        var s4_#R = vec4<f32>(0.0);
        var dp4_#R = vec4<f32>(0.0);
        s4_#R = fma(k#R_#C, q#C, s4_#R); dp4_#R = fma(v#R_#C, g#C, dp4_#R);
        let lse_i = lse[bh * p.t + i];
        let dd = dsum[bh * p.t + i];
        let s#R = (s4_#R.x + s4_#R.y) + (s4_#R.z + s4_#R.w);
        let dp#R = (dp4_#R.x + dp4_#R.y) + (dp4_#R.z + dp4_#R.w);
        let pr#R = select(0.0, exp(s#R - lse_i), i >= j#R);
        let kp#R = keep(bh, i, j#R);
        let wv#R = vec4<f32>(pr#R * kp#R);
        let wk#R = vec4<f32>(pr#R * (kp#R * dp#R - dd));
        dv#R_#C = fma(wv#R, g#C, dv#R_#C); dk#R_#C = fma(wk#R, q#C, dk#R_#C);
    }

    let key#R = row0 + #Ru * LANES + lane;
    if (key#R < p.t) { store4(key#R, bi, 1u, h, #Cu * 4u, dk#R_#C * p.scale); store4(key#R, bi, 2u, h, #Cu * 4u, dv#R_#C); }
}

// Causal self-attention forward for CPU adapters (lavapipe, SwiftShader, WARP):
// the results of attention.wgsl (out, and the logsumexp of each row's scaled
// scores), computed R query rows an invocation with no workgroup memory and no
// barriers (see matmul_cpu.wgsl for why CPUs want that).
//
// attention.rs prepends `const HS4` (the head size in vec4s this variant holds,
// hs <= 4 * HS4; channels past hs read as zero and are never written). The rows'
// queries and outputs live in private arrays, in the CPU's registers and L1.
//
// Workgroup (x, y): query rows x*ROWS .. x*ROWS + ROWS-1 of (batch, head) y, R a
// lane (row r of a lane: row0 + r * LANES + lane). All lanes walk the same keys (up
// to the workgroup's last row, masking the keys past their own rows), so every key
// load is the same address on every lane and serves R rows. Online softmax over 4
// keys a step: one rescale of the output per 4 keys.
struct Params { t: u32, c: u32, nh: u32, hs: u32, scale: f32, seed: u32, threshold: u32, keep_scale: f32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> qkv: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read_write> lse: array<f32>;

// Lanes a workgroup, query rows a lane (each key load serves R rows), rows a
// workgroup (`CPU_BLOCKS` in attention.rs). 4 rows a lane load each key half as
// often as 2 (the backward keeps 2: its larger state a row spills past that).
const LANES: u32 = 8u;
const R: u32 = 4u;
const ROWS: u32 = LANES * R;
// Masked scores: exp(MASKED - max) is 0 and, unlike -inf, MASKED - MASKED is no NaN.
const MASKED: f32 = -1.0e30;

// 4 channels d.. of part (0 q, 1 k, 2 v) of (batch bi, position ti, head h), zero past hs.
fn load4(bi: u32, ti: u32, which: u32, h: u32, d: u32) -> vec4<f32> {
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

fn store4(base: u32, d: u32, v: vec4<f32>) {
    if (d < p.hs) { out[base + d] = v.x; }
    if (d + 1u < p.hs) { out[base + d + 1u] = v.y; }
    if (d + 2u < p.hs) { out[base + d + 2u] = v.z; }
    if (d + 3u < p.hs) { out[base + d + 3u] = v.w; }
}

@compute @workgroup_size(8)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lane: u32) {
    let bh = wg.y;
    let bi = bh / p.nh;
    let h = bh % p.nh;
    let row0 = wg.x * ROWS;
    let last = p.t - 1u;

    // Row r of this lane: row0 + r * LANES + lane. Rows past the end compute a copy
    // of the last row and write nothing.
    var q: array<vec4<f32>, R * HS4>;
    var o: array<vec4<f32>, R * HS4>;
    var m: array<f32, R>;
    var l: array<f32, R>;
    for (var r = 0u; r < R; r++) {
        let i = min(row0 + r * LANES + lane, last);
        for (var d = 0u; d < HS4; d++) {
            q[r * HS4 + d] = load4(bi, i, 0u, h, d * 4u) * p.scale;
            o[r * HS4 + d] = vec4<f32>(0.0);
        }
        m[r] = MASKED;
        l[r] = 0.0;
    }

    let kv_end = min(row0 + ROWS, p.t);
    for (var j = 0u; j < kv_end; j += 4u) {
        // Keys past t load as the last key; their scores are masked (j > i).
        let j1 = min(j + 1u, last);
        let j2 = min(j + 2u, last);
        let j3 = min(j + 3u, last);
        var s: array<vec4<f32>, R>;
        for (var r = 0u; r < R; r++) {
            s[r] = vec4<f32>(0.0);
        }
        for (var d = 0u; d < HS4; d++) {
            let k0 = load4(bi, j, 1u, h, d * 4u);
            let k1 = load4(bi, j1, 1u, h, d * 4u);
            let k2 = load4(bi, j2, 1u, h, d * 4u);
            let k3 = load4(bi, j3, 1u, h, d * 4u);
            for (var r = 0u; r < R; r++) {
                let qd = q[r * HS4 + d];
                s[r] += vec4<f32>(dot(qd, k0), dot(qd, k1), dot(qd, k2), dot(qd, k3));
            }
        }
        var w: array<vec4<f32>, R>;
        var corr: array<f32, R>;
        let key = vec4<u32>(j) + vec4<u32>(0u, 1u, 2u, 3u);
        for (var r = 0u; r < R; r++) {
            let i = min(row0 + r * LANES + lane, last);
            let sr = select(vec4<f32>(MASKED), s[r], key <= vec4<u32>(i));
            let mnew = max(m[r], max(max(sr.x, sr.y), max(sr.z, sr.w)));
            corr[r] = exp(m[r] - mnew);
            let e = exp(sr - vec4<f32>(mnew));
            l[r] = l[r] * corr[r] + ((e.x + e.y) + (e.z + e.w));
            m[r] = mnew;
            // Dropout masks the numerator only: l sums the undropped weights.
            w[r] = e * vec4<f32>(keep(bh, i, j), keep(bh, i, j + 1u), keep(bh, i, j + 2u), keep(bh, i, j + 3u));
        }
        for (var d = 0u; d < HS4; d++) {
            let v0 = load4(bi, j, 2u, h, d * 4u);
            let v1 = load4(bi, j1, 2u, h, d * 4u);
            let v2 = load4(bi, j2, 2u, h, d * 4u);
            let v3 = load4(bi, j3, 2u, h, d * 4u);
            for (var r = 0u; r < R; r++) {
                let wr = w[r];
                let od = r * HS4 + d;
                o[od] = fma(vec4<f32>(wr.x), v0, fma(vec4<f32>(wr.y), v1,
                    fma(vec4<f32>(wr.z), v2, fma(vec4<f32>(wr.w), v3, o[od] * corr[r]))));
            }
        }
    }

    for (var r = 0u; r < R; r++) {
        let row = row0 + r * LANES + lane;
        if (row < p.t) {
            let inv = 1.0 / l[r];
            let base = (bi * p.t + row) * p.c + h * p.hs;
            for (var d = 0u; d < HS4; d++) {
                store4(base, d * 4u, o[r * HS4 + d] * inv);
            }
            lse[bh * p.t + row] = m[r] + log(l[r]);
        }
    }
}

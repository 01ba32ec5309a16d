// Causal self-attention forward for CPU adapters (lavapipe, SwiftShader, WARP):
// the results of attention.wgsl (out, and the logsumexp of each row's scaled
// scores), computed one query row an invocation with no workgroup memory and no
// barriers (see matmul_cpu.wgsl for why CPUs want that).
//
// attention.rs prepends `const HS4` (the head size in vec4s this variant holds,
// hs <= 4 * HS4; channels past hs read as zero and are never written). The row's
// query and output live in private arrays, in the CPU's registers and L1.
//
// Workgroup (x, y): query rows x*ROWS .. x*ROWS + ROWS-1 of (batch, head) y, one a
// lane. All lanes walk the same keys (up to the workgroup's last row, masking the
// keys past their own row), so every key load is the same address on every lane.
// Online softmax over 4 keys a step: one rescale of the output per 4 keys.
struct Params { t: u32, c: u32, nh: u32, hs: u32, scale: f32, seed: u32, threshold: u32, keep_scale: f32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> qkv: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read_write> lse: array<f32>;

const ROWS: u32 = 8u;
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

// Attention-probability dropout, the rule of attention.wgsl and
// reference::attention_forward: probability [b, h, i, j] is element
// (bh * t + i) * t + j (wrapping u32) of the mask seeded `p.seed`. Returns the
// factor it is multiplied by: 0 if dropped, else keep_scale (1 without dropout).
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

@compute @workgroup_size(8)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lane: u32) {
    let bh = wg.y;
    let bi = bh / p.nh;
    let h = bh % p.nh;
    let row0 = wg.x * ROWS;
    let row = row0 + lane;
    // Rows past the end compute a copy of the last row and write nothing.
    let i = min(row, p.t - 1u);
    let last = p.t - 1u;

    var q: array<vec4<f32>, HS4>;
    var o: array<vec4<f32>, HS4>;
    for (var d = 0u; d < HS4; d++) {
        q[d] = load4(bi, i, 0u, h, d * 4u) * p.scale;
        o[d] = vec4<f32>(0.0);
    }
    var m = MASKED;
    var l = 0.0;

    let kv_end = min(row0 + ROWS, p.t);
    for (var j = 0u; j < kv_end; j += 4u) {
        // Keys past t load as the last key; their scores are masked (j > i).
        let j1 = min(j + 1u, last);
        let j2 = min(j + 2u, last);
        let j3 = min(j + 3u, last);
        var s = vec4<f32>(0.0);
        for (var d = 0u; d < HS4; d++) {
            let qd = q[d];
            s += vec4<f32>(
                dot(qd, load4(bi, j, 1u, h, d * 4u)),
                dot(qd, load4(bi, j1, 1u, h, d * 4u)),
                dot(qd, load4(bi, j2, 1u, h, d * 4u)),
                dot(qd, load4(bi, j3, 1u, h, d * 4u)),
            );
        }
        let key = vec4<u32>(j) + vec4<u32>(0u, 1u, 2u, 3u);
        s = select(vec4<f32>(MASKED), s, key <= vec4<u32>(i));
        let mnew = max(m, max(max(s.x, s.y), max(s.z, s.w)));
        let corr = exp(m - mnew);
        let e = exp(s - vec4<f32>(mnew));
        l = l * corr + ((e.x + e.y) + (e.z + e.w));
        m = mnew;
        // Dropout masks the numerator only: l sums the undropped weights.
        let w = e * vec4<f32>(keep(bh, i, j), keep(bh, i, j + 1u), keep(bh, i, j + 2u), keep(bh, i, j + 3u));
        for (var d = 0u; d < HS4; d++) {
            o[d] = fma(vec4<f32>(w.x), load4(bi, j, 2u, h, d * 4u),
                fma(vec4<f32>(w.y), load4(bi, j1, 2u, h, d * 4u),
                fma(vec4<f32>(w.z), load4(bi, j2, 2u, h, d * 4u),
                fma(vec4<f32>(w.w), load4(bi, j3, 2u, h, d * 4u), o[d] * corr))));
        }
    }

    if (row < p.t) {
        let inv = 1.0 / l;
        let base = (bi * p.t + row) * p.c + h * p.hs;
        for (var d = 0u; d < HS4; d++) {
            store4(base, d * 4u, o[d] * inv);
        }
        lse[bh * p.t + row] = m + log(l);
    }
}

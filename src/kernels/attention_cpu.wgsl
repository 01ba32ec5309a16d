// Causal self-attention forward for CPU adapters (lavapipe, SwiftShader, WARP):
// the results of attention.wgsl (out, and the logsumexp of each row's scaled
// scores), computed R query rows an invocation with no workgroup memory and no
// barriers (see matmul_cpu.wgsl for why CPUs want that).
//
// attention.rs prepends `const HS4` (the head size in vec4s this variant holds,
// hs <= 4 * HS4; channels past hs read as zero and are never written) and `const R`,
// and writes each line holding `#R` out once a row of a lane (`#R` -> 0 .. R-1) and
// each holding `#C` once a vec4 of the head (0 .. HS4-1): the rows' queries and
// outputs live in named variables, which every CPU compiler keeps in registers or
// L1 (SwiftShader keeps a local array indexed by a loop counter in memory, a
// lane at a time: 2-4x slower).
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

// Lanes a workgroup and rows a workgroup (R query rows a lane, `CPU_ROWS` in
// attention.rs): each key load serves R rows.
const LANES: u32 = 8u;
const ROWS: u32 = LANES * R;
// Masked scores: exp(MASKED - max) is 0 and, unlike -inf, MASKED - MASKED is no NaN.
const MASKED: f32 = -1.0e30;

// 4 channels d.. of part (0 q, 1 k, 2 v) of (batch bi, position ti, head h), zero past hs.
// Branch-free: each read is clamped into the buffer and the channels past hs are
// selected away. It is inlined once a vec4 of the head a key, and with a branch a
// channel there LLVM (lavapipe) took minutes over the larger heads, and the kernels
// ran slower (BENCHMARKS.md: CPU attention kernels without
// branches in their loads).
fn load4(bi: u32, ti: u32, which: u32, h: u32, d: u32) -> vec4<f32> {
    let base = (bi * p.t + ti) * 3u * p.c + which * p.c + h * p.hs + d;
    let last = arrayLength(&qkv) - 1u;
    let v = vec4<f32>(qkv[min(base, last)], qkv[min(base + 1u, last)], qkv[min(base + 2u, last)], qkv[min(base + 3u, last)]);
    return select(vec4<f32>(0.0), v, vec4<u32>(d) + vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(p.hs));
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

    // Row #R of this lane: row0 + #R * LANES + lane. Rows past the end compute a
    // copy of the last row and write nothing.
    let i#R = min(row0 + #Ru * LANES + lane, last);
    let q#R_#C = load4(bi, i#R, 0u, h, #Cu * 4u) * p.scale;
    var o#R_#C = vec4<f32>(0.0);
    var m#R = MASKED;
    var l#R = 0.0;

    let kv_end = min(row0 + ROWS, p.t);
    for (var j = 0u; j < kv_end; j += 4u) {
        // Keys past t load as the last key; their scores are masked (j > i).
        let j1 = min(j + 1u, last);
        let j2 = min(j + 2u, last);
        let j3 = min(j + 3u, last);
        let k0_#C = load4(bi, j, 1u, h, #Cu * 4u);
        let k1_#C = load4(bi, j1, 1u, h, #Cu * 4u);
        let k2_#C = load4(bi, j2, 1u, h, #Cu * 4u);
        let k3_#C = load4(bi, j3, 1u, h, #Cu * 4u);
        var s#R = vec4<f32>(0.0);
        s#R += vec4<f32>(dot(q#R_#C, k0_#C), dot(q#R_#C, k1_#C), dot(q#R_#C, k2_#C), dot(q#R_#C, k3_#C));
        let key = vec4<u32>(j) + vec4<u32>(0u, 1u, 2u, 3u);
        let sm#R = select(vec4<f32>(MASKED), s#R, key <= vec4<u32>(i#R));
        let mnew#R = max(m#R, max(max(sm#R.x, sm#R.y), max(sm#R.z, sm#R.w)));
        let corr#R = exp(m#R - mnew#R);
        let e#R = exp(sm#R - vec4<f32>(mnew#R));
        l#R = l#R * corr#R + ((e#R.x + e#R.y) + (e#R.z + e#R.w));
        m#R = mnew#R;
        // Dropout masks the numerator only: l sums the undropped weights.
        let w#R = e#R * vec4<f32>(keep(bh, i#R, j), keep(bh, i#R, j + 1u), keep(bh, i#R, j + 2u), keep(bh, i#R, j + 3u));
        let v0_#C = load4(bi, j, 2u, h, #Cu * 4u);
        let v1_#C = load4(bi, j1, 2u, h, #Cu * 4u);
        let v2_#C = load4(bi, j2, 2u, h, #Cu * 4u);
        let v3_#C = load4(bi, j3, 2u, h, #Cu * 4u);
        o#R_#C = fma(vec4<f32>(w#R.x), v0_#C, fma(vec4<f32>(w#R.y), v1_#C, fma(vec4<f32>(w#R.z), v2_#C, fma(vec4<f32>(w#R.w), v3_#C, o#R_#C * corr#R))));
    }

    let out_row#R = row0 + #Ru * LANES + lane;
    let base#R = (bi * p.t + out_row#R) * p.c + h * p.hs;
    if (out_row#R < p.t) { store4(base#R, #Cu * 4u, o#R_#C * (1.0 / l#R)); }
    if (out_row#R < p.t) { lse[bh * p.t + out_row#R] = m#R + log(l#R); }
}

// f16 GEMM core without tensor cores: the tiling of matmul.wgsl (128x128 tiles of C,
// 256 threads, 8x8 outputs a thread, steps of BK = 8 through two shared buffers)
// with the operands rounded to f16 as they enter workgroup memory and every product
// and sum in f32. An f16 x f16 product is exact in f32 (11-bit significands), so
// this gives what a tensor core gives: f16 operands, f32 accumulation.
// source.rs puts `enable f16;` and A_SCALE (see matmul_coop.wgsl) in front of
// the prelude; the prelude's load_a / load_b / write4 are called as in matmul.wgsl.
// Shared: 2 x 8 x 128 halves for A and for B = 8 KiB.

const BM: u32 = 128u;
const BN: u32 = 128u;
const BK: u32 = 8u;

// [buffer][k][128 / 4]: row m (or column n) of step k is As[(buf * BK + k) * 32 + m / 4][m % 4].
var<workgroup> As: array<vec4<f16>, 512>;
var<workgroup> Bs: array<vec4<f16>, 512>;

fn put_rows_a(buf: u32, t: u32, v: vec4<f16>) {
    let r = t / 2u;
    let base = (buf * BK + (t % 2u) * 4u) * 32u + r / 4u;
    As[base][r % 4u] = v.x;
    As[base + 32u][r % 4u] = v.y;
    As[base + 64u][r % 4u] = v.z;
    As[base + 96u][r % 4u] = v.w;
}

fn put_rows_b(buf: u32, t: u32, v: vec4<f16>) {
    let r = t / 2u;
    let base = (buf * BK + (t % 2u) * 4u) * 32u + r / 4u;
    Bs[base][r % 4u] = v.x;
    Bs[base + 32u][r % 4u] = v.y;
    Bs[base + 64u][r % 4u] = v.z;
    Bs[base + 96u][r % 4u] = v.w;
}

// The rounding: A scaled by A_SCALE first (a power of two, undone on the way out),
// B as it is.
fn put_a(buf: u32, t: u32, v: vec4<f32>) {
    let h = vec4<f16>(v * A_SCALE);
    if (A_ALONG_K) { put_rows_a(buf, t, h); } else { As[(buf * BK + t / 32u) * 32u + t % 32u] = h; }
}

fn put_b(buf: u32, t: u32, v: vec4<f32>) {
    let h = vec4<f16>(v);
    if (B_ALONG_K) { put_rows_b(buf, t, h); } else { Bs[(buf * BK + t / 32u) * 32u + t % 32u] = h; }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let m0 = wg.y * BM;
    let n0 = wg.x * BN;
    let z = wg.z;
    let k_begin = z * p.k_chunk;
    let k_end = min(k_begin + p.k_chunk, p.k);
    let steps = (k_end - k_begin + BK - 1u) / BK;
    let tx = t % 16u;
    let ty = t / 16u;

    var c00 = vec4<f32>(0.0); var c01 = vec4<f32>(0.0);
    var c10 = vec4<f32>(0.0); var c11 = vec4<f32>(0.0);
    var c20 = vec4<f32>(0.0); var c21 = vec4<f32>(0.0);
    var c30 = vec4<f32>(0.0); var c31 = vec4<f32>(0.0);
    var c40 = vec4<f32>(0.0); var c41 = vec4<f32>(0.0);
    var c50 = vec4<f32>(0.0); var c51 = vec4<f32>(0.0);
    var c60 = vec4<f32>(0.0); var c61 = vec4<f32>(0.0);
    var c70 = vec4<f32>(0.0); var c71 = vec4<f32>(0.0);

    var ra = load_a(m0, k_begin, k_end, t);
    var rb = load_b(n0, k_begin, k_end, t);
    put_a(0u, t, ra);
    put_b(0u, t, rb);
    workgroupBarrier();

    for (var s = 0u; s < steps; s++) {
        let cur = s % 2u;
        let more = s + 1u < steps;
        if (more) {
            ra = load_a(m0, k_begin + (s + 1u) * BK, k_end, t);
            rb = load_b(n0, k_begin + (s + 1u) * BK, k_end, t);
        }
        for (var kk = 0u; kk < BK; kk++) {
            let base = (cur * BK + kk) * 32u;
            let a0 = vec4<f32>(As[base + ty]);
            let a1 = vec4<f32>(As[base + ty + 16u]);
            let b0 = vec4<f32>(Bs[base + tx]);
            let b1 = vec4<f32>(Bs[base + tx + 16u]);
            c00 += a0.x * b0; c01 += a0.x * b1;
            c10 += a0.y * b0; c11 += a0.y * b1;
            c20 += a0.z * b0; c21 += a0.z * b1;
            c30 += a0.w * b0; c31 += a0.w * b1;
            c40 += a1.x * b0; c41 += a1.x * b1;
            c50 += a1.y * b0; c51 += a1.y * b1;
            c60 += a1.z * b0; c61 += a1.z * b1;
            c70 += a1.w * b0; c71 += a1.w * b1;
        }
        if (more) {
            put_a(1u - cur, t, ra);
            put_b(1u - cur, t, rb);
        }
        workgroupBarrier();
    }

    let u = 1.0 / A_SCALE;
    let r0 = m0 + ty * 4u;
    let r1 = m0 + 64u + ty * 4u;
    let col0 = n0 + tx * 4u;
    let col1 = n0 + 64u + tx * 4u;
    write4(z, r0, col0, c00 * u); write4(z, r0, col1, c01 * u);
    write4(z, r0 + 1u, col0, c10 * u); write4(z, r0 + 1u, col1, c11 * u);
    write4(z, r0 + 2u, col0, c20 * u); write4(z, r0 + 2u, col1, c21 * u);
    write4(z, r0 + 3u, col0, c30 * u); write4(z, r0 + 3u, col1, c31 * u);
    write4(z, r1, col0, c40 * u); write4(z, r1, col1, c41 * u);
    write4(z, r1 + 1u, col0, c50 * u); write4(z, r1 + 1u, col1, c51 * u);
    write4(z, r1 + 2u, col0, c60 * u); write4(z, r1 + 2u, col1, c61 * u);
    write4(z, r1 + 3u, col0, c70 * u); write4(z, r1 + 3u, col1, c71 * u);
}

// Tiled f32 GEMM core: c[z][m, n] = sum over k in split z of A(m, k) * B(k, n).
// A prelude (matmul_nt / _nn / _tn.wgsl) comes first: it declares Params, the
// bindings, how tiles of A and B are read from memory (and along which axis) and
// how C is written.
//
// A workgroup of 256 threads computes a 128x128 tile of C, walking k in steps of
// BK = 8 through two shared buffers (load the next step while computing this one:
// one barrier a step). Each thread keeps an 8x8 block of C in 16 vec4 registers:
// rows ty*4..+4 and 64+ty*4..+4, columns tx*4..+4 and 64+tx*4..+4, so its shared
// reads are 4 vec4s a k (16 FMAs each) and a half-warp reads 64 contiguous floats.
// Shared: 2 x 8 x 128 floats for A and for B = 16 KiB, WebGPU's default limit.

const BM: u32 = 128u;
const BN: u32 = 128u;
const BK: u32 = 8u;

// [buffer][k][128 / 4]: row m (or column n) of step k is As[(buf * BK + k) * 32 + m / 4][m % 4].
var<workgroup> As: array<vec4<f32>, 512>;
var<workgroup> Bs: array<vec4<f32>, 512>;

// A tile read along k (row-major rows of 128 x k): thread t holds row t / 2,
// k offsets (t % 2) * 4 .. + 4, and stores them transposed.
fn put_rows_a(buf: u32, t: u32, v: vec4<f32>) {
    let r = t / 2u;
    let base = (buf * BK + (t % 2u) * 4u) * 32u + r / 4u;
    As[base][r % 4u] = v.x;
    As[base + 32u][r % 4u] = v.y;
    As[base + 64u][r % 4u] = v.z;
    As[base + 96u][r % 4u] = v.w;
}

fn put_rows_b(buf: u32, t: u32, v: vec4<f32>) {
    let r = t / 2u;
    let base = (buf * BK + (t % 2u) * 4u) * 32u + r / 4u;
    Bs[base][r % 4u] = v.x;
    Bs[base + 32u][r % 4u] = v.y;
    Bs[base + 64u][r % 4u] = v.z;
    Bs[base + 96u][r % 4u] = v.w;
}

// A tile read along m / n (k-major: k rows of 128): thread t holds step t / 32,
// columns (t % 32) * 4 .. + 4, stored as they are.
fn put_cols_a(buf: u32, t: u32, v: vec4<f32>) {
    As[(buf * BK + t / 32u) * 32u + t % 32u] = v;
}

fn put_cols_b(buf: u32, t: u32, v: vec4<f32>) {
    Bs[(buf * BK + t / 32u) * 32u + t % 32u] = v;
}

// Where a prelude's loads go: its layout constants pick the store (constant-folded).
fn put_a(buf: u32, t: u32, v: vec4<f32>) {
    if (A_ALONG_K) { put_rows_a(buf, t, v); } else { put_cols_a(buf, t, v); }
}

fn put_b(buf: u32, t: u32, v: vec4<f32>) {
    if (B_ALONG_K) { put_rows_b(buf, t, v); } else { put_cols_b(buf, t, v); }
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

    // A_SUMS (matmul_tn_sums.wgsl): the first column of tiles also sums A over the
    // split (each thread its 4 columns of A's rows t / 32, t / 32 + 8, ...; a
    // uniform branch).
    let a_sums = A_SUMS && wg.x == 0u;
    var asum = vec4<f32>(0.0);
    var ra = load_a(m0, k_begin, k_end, t);
    if (a_sums) { asum += ra; }
    var rb = load_b(n0, k_begin, k_end, t);
    put_a(0u, t, ra);
    put_b(0u, t, rb);
    workgroupBarrier();

    for (var s = 0u; s < steps; s++) {
        let cur = s % 2u;
        let more = s + 1u < steps;
        if (more) {
            // Issue the next step's global loads before this step's math.
            ra = load_a(m0, k_begin + (s + 1u) * BK, k_end, t);
            rb = load_b(n0, k_begin + (s + 1u) * BK, k_end, t);
            if (a_sums) { asum += ra; }
        }
        for (var kk = 0u; kk < BK; kk++) {
            let base = (cur * BK + kk) * 32u;
            let a0 = As[base + ty];
            let a1 = As[base + ty + 16u];
            let b0 = Bs[base + tx];
            let b1 = Bs[base + tx + 16u];
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
            // The other buffer was last read in step s - 1, before the barrier.
            put_a(1u - cur, t, ra);
            put_b(1u - cur, t, rb);
        }
        workgroupBarrier();
    }

    if (a_sums) {
        // The 8 threads of each 4 columns add their sums through As (free after the
        // loop's last barrier), in a fixed order.
        As[t] = asum;
        workgroupBarrier();
        if (t < 32u) {
            var s = As[t];
            for (var q = 1u; q < 8u; q++) { s += As[t + 32u * q]; }
            write_a_sums(z, m0 + t * 4u, s);
        }
    }

    let r0 = m0 + ty * 4u;
    let r1 = m0 + 64u + ty * 4u;
    let col0 = n0 + tx * 4u;
    let col1 = n0 + 64u + tx * 4u;
    write4(z, r0, col0, c00); write4(z, r0, col1, c01);
    write4(z, r0 + 1u, col0, c10); write4(z, r0 + 1u, col1, c11);
    write4(z, r0 + 2u, col0, c20); write4(z, r0 + 2u, col1, c21);
    write4(z, r0 + 3u, col0, c30); write4(z, r0 + 3u, col1, c31);
    write4(z, r1, col0, c40); write4(z, r1, col1, c41);
    write4(z, r1 + 1u, col0, c50); write4(z, r1 + 1u, col1, c51);
    write4(z, r1 + 2u, col0, c60); write4(z, r1 + 2u, col1, c61);
    write4(z, r1 + 3u, col0, c70); write4(z, r1 + 3u, col1, c71);
}

// Tiled f32 GEMM core with half-height tiles: c[z][m, n] = sum over k in split z of
// A(m, k) * B(k, n), 64x128 output tiles (matmul.wgsl's are 128x128). For short
// reductions (the dinp that reduces over the head's 65 columns), where a workgroup's
// set-up and stores weigh more than its products: twice the workgroups, half the
// registers a thread, so a large GPU holds more of them at once. Joined after a
// prelude (matmul_nt / _nn / _tn.wgsl) like matmul.wgsl, calling the same hooks.
//
// 256 threads walk k in steps of BK = 8 through two shared buffers (one barrier a
// step). Each thread keeps a 4x8 block of C in 8 vec4 registers: rows ty*4..+4,
// columns tx*4..+4 and 64+tx*4..+4. The prelude's load_a fills a 128-row tile over
// 256 threads; here threads 0..127 load the 64 rows through the prelude thread
// index that holds them (`a_thread`).

const BM: u32 = 64u;
const BK: u32 = 8u;

// [buffer][k][64 / 4]: row m of step k is As[(buf * BK + k) * 16 + m / 4][m % 4].
var<workgroup> As: array<vec4<f32>, 256>;
// [buffer][k][128 / 4], as in matmul.wgsl.
var<workgroup> Bs: array<vec4<f32>, 512>;

// The prelude thread index whose 4 floats of A are the ones thread u (< 128) of a
// 64-row tile stores: along k, thread t holds row t / 2 (rows 0..63 for t < 128);
// k-major, thread t holds step t / 32, columns (t % 32) * 4, and u takes step
// u / 16, columns (u % 16) * 4.
fn a_thread(u: u32) -> u32 {
    if (A_ALONG_K) { return u; }
    return (u / 16u) * 32u + u % 16u;
}

fn put_a(buf: u32, u: u32, v: vec4<f32>) {
    if (A_ALONG_K) {
        // Row u / 2, k offsets (u % 2) * 4 .. + 4, stored transposed.
        let r = u / 2u;
        let base = (buf * BK + (u % 2u) * 4u) * 16u + r / 4u;
        As[base][r % 4u] = v.x;
        As[base + 16u][r % 4u] = v.y;
        As[base + 32u][r % 4u] = v.z;
        As[base + 48u][r % 4u] = v.w;
    } else {
        As[(buf * BK + u / 16u) * 16u + u % 16u] = v;
    }
}

fn put_b(buf: u32, t: u32, v: vec4<f32>) {
    if (B_ALONG_K) {
        let r = t / 2u;
        let base = (buf * BK + (t % 2u) * 4u) * 32u + r / 4u;
        Bs[base][r % 4u] = v.x;
        Bs[base + 32u][r % 4u] = v.y;
        Bs[base + 64u][r % 4u] = v.z;
        Bs[base + 96u][r % 4u] = v.w;
    } else {
        Bs[(buf * BK + t / 32u) * 32u + t % 32u] = v;
    }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let m0 = wg.y * BM;
    let n0 = wg.x * 128u;
    let z = wg.z;
    let k_begin = z * p.k_chunk;
    let k_end = min(k_begin + p.k_chunk, p.k);
    let steps = (k_end - k_begin + BK - 1u) / BK;
    let tx = t % 16u;
    let ty = t / 16u;
    // Warps 0..3 load A (a uniform branch for warps of 32 or more).
    let loads_a = t < 128u;
    let ta = a_thread(t % 128u);

    var c00 = vec4<f32>(0.0); var c01 = vec4<f32>(0.0);
    var c10 = vec4<f32>(0.0); var c11 = vec4<f32>(0.0);
    var c20 = vec4<f32>(0.0); var c21 = vec4<f32>(0.0);
    var c30 = vec4<f32>(0.0); var c31 = vec4<f32>(0.0);

    var ra = vec4<f32>(0.0);
    if (loads_a) {
        ra = load_a(m0, k_begin, k_end, ta);
        put_a(0u, t, ra);
    }
    var rb = load_b(n0, k_begin, k_end, t);
    put_b(0u, t, rb);
    workgroupBarrier();

    for (var s = 0u; s < steps; s++) {
        let cur = s % 2u;
        let more = s + 1u < steps;
        if (more) {
            // Issue the next step's global loads before this step's math.
            if (loads_a) { ra = load_a(m0, k_begin + (s + 1u) * BK, k_end, ta); }
            rb = load_b(n0, k_begin + (s + 1u) * BK, k_end, t);
        }
        for (var kk = 0u; kk < BK; kk++) {
            let a0 = As[(cur * BK + kk) * 16u + ty];
            let base = (cur * BK + kk) * 32u;
            let b0 = Bs[base + tx];
            let b1 = Bs[base + tx + 16u];
            c00 += a0.x * b0; c01 += a0.x * b1;
            c10 += a0.y * b0; c11 += a0.y * b1;
            c20 += a0.z * b0; c21 += a0.z * b1;
            c30 += a0.w * b0; c31 += a0.w * b1;
        }
        if (more) {
            // The other buffer was last read in step s - 1, before the barrier.
            if (loads_a) { put_a(1u - cur, t, ra); }
            put_b(1u - cur, t, rb);
        }
        workgroupBarrier();
    }

    let r0 = m0 + ty * 4u;
    let col0 = n0 + tx * 4u;
    let col1 = n0 + 64u + tx * 4u;
    write4(z, r0, col0, c00); write4(z, r0, col1, c01);
    write4(z, r0 + 1u, col0, c10); write4(z, r0 + 1u, col1, c11);
    write4(z, r0 + 2u, col0, c20); write4(z, r0 + 2u, col1, c21);
    write4(z, r0 + 3u, col0, c30); write4(z, r0 + 3u, col1, c31);
}

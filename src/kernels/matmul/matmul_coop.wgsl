// Tensor-core GEMM core: c[z][m, n] = sum over k in split z of A(m, k) * B(k, n),
// with A and B rounded to f16 and the products summed in f32 by cooperative
// matrices (16x16x16, f16 x f16 -> f32: what wgpu exposes as
// EXPERIMENTAL_COOPERATIVE_MATRIX on VK_KHR_cooperative_matrix). Joined after the
// same preludes as matmul.wgsl; source.rs puts `enable f16;`,
// `enable wgpu_cooperative_matrix;` and A_SCALE in front of them.
//
// A workgroup of 256 threads in 8 subgroups of 32 (the launcher runs this core only
// where subgroups are exactly 32 wide) computes a 128x128 tile of C. Each step of
// BK = 16 along k, every thread calls the prelude's load_a / load_b twice (two
// 128 x 8 tiles), rounds the 4 + 4 floats to f16 and stores them in workgroup
// memory: A as [m][k], B as [k][n], row-major, rows padded by 8 halves. Subgroup s
// owns rows (s / 2) * 32 .. + 32 and columns (s % 2) * 64 .. + 64 of the tile: 2 x 4
// accumulators, 2 A and 4 B fragments a step. Like matmul.wgsl, the next step's
// global loads are issued before this step's math (two shared buffers, one barrier
// a step). At the end each accumulator goes through workgroup memory, 16x16 floats
// a subgroup at a time, to the prelude's write4 (bias, epilogues, split slices).
//
// A_SCALE: the A operand is multiplied by it (a power of two) before rounding and
// the sums by 1 / A_SCALE after: in the backward GEMMs A is a gradient, whose
// elements (about 1e-6 and below) would otherwise fall to f16's subnormals. The
// scaling is exact in f32; only the f16 rounding sees it.
//
// Shared: A 2 x 128 x 24 halves (12 KiB), B 2 x 16 x 136 halves (8.5 KiB), the
// output staging 8 x 256 floats (8 KiB).

const BM: u32 = 128u;
const BN: u32 = 128u;
const BK: u32 = 16u;
const A_STRIDE: u32 = 24u;
const B_STRIDE: u32 = 136u;
const A_BUF: u32 = 3072u; // BM * A_STRIDE
const B_BUF: u32 = 2176u; // BK * B_STRIDE

var<workgroup> As: array<f16, 6144>;
var<workgroup> Bs: array<f16, 4352>;
var<workgroup> Cs: array<f32, 2048>;

// Stores the 4 floats thread t loaded for k offsets k8 .. k8 + 8 of buffer buf.
fn put_a(buf: u32, k8: u32, t: u32, v: vec4<f32>) {
    let h = vec4<f16>(v * A_SCALE);
    if (A_ALONG_K) {
        // Row t / 2, k offsets (t % 2) * 4 .. + 4.
        let at = buf * A_BUF + (t / 2u) * A_STRIDE + k8 + (t % 2u) * 4u;
        As[at] = h.x; As[at + 1u] = h.y; As[at + 2u] = h.z; As[at + 3u] = h.w;
    } else {
        // Step t / 32, rows (t % 32) * 4 .. + 4.
        let at = buf * A_BUF + (t % 32u) * 4u * A_STRIDE + k8 + t / 32u;
        As[at] = h.x;
        As[at + A_STRIDE] = h.y;
        As[at + 2u * A_STRIDE] = h.z;
        As[at + 3u * A_STRIDE] = h.w;
    }
}

fn put_b(buf: u32, k8: u32, t: u32, v: vec4<f32>) {
    let h = vec4<f16>(v);
    if (B_ALONG_K) {
        // Column t / 2, k offsets (t % 2) * 4 .. + 4.
        let at = buf * B_BUF + (k8 + (t % 2u) * 4u) * B_STRIDE + t / 2u;
        Bs[at] = h.x;
        Bs[at + B_STRIDE] = h.y;
        Bs[at + 2u * B_STRIDE] = h.z;
        Bs[at + 3u * B_STRIDE] = h.w;
    } else {
        // Step t / 32, columns (t % 32) * 4 .. + 4.
        let at = buf * B_BUF + (k8 + t / 32u) * B_STRIDE + (t % 32u) * 4u;
        Bs[at] = h.x; Bs[at + 1u] = h.y; Bs[at + 2u] = h.z; Bs[at + 3u] = h.w;
    }
}

// Through this subgroup's 16x16 staging block to write4: lane l writes rows
// (l + i * width) / 4, columns ((l + i * width) % 4) * 4 .. + 4.
fn flush(z: u32, s: u32, lane: u32, width: u32, r0: u32, c0: u32, acc: coop_mat16x16<f32, C>) {
    coopStoreT(acc, &Cs[s * 256u], 16u);
    workgroupBarrier();
    for (var i = lane; i < 64u; i += width) {
        let at = s * 256u + (i / 4u) * 16u + (i % 4u) * 4u;
        let v = vec4<f32>(Cs[at], Cs[at + 1u], Cs[at + 2u], Cs[at + 3u]) * (1.0 / A_SCALE);
        write4(z, r0 + i / 4u, c0 + (i % 4u) * 4u, v);
    }
    workgroupBarrier();
}

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
    @builtin(subgroup_id) s: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) width: u32,
) {
    let m0 = wg.y * BM;
    let n0 = wg.x * BN;
    let z = wg.z;
    let k_begin = z * p.k_chunk;
    let k_end = min(k_begin + p.k_chunk, p.k);
    let steps = (k_end - k_begin + BK - 1u) / BK;
    // This subgroup's rows and columns within the tile.
    let sm = (s / 2u) * 32u;
    let sn = (s % 2u) * 64u;

    var ra0 = load_a(m0, k_begin, k_end, t);
    var ra1 = load_a(m0, k_begin + 8u, k_end, t);
    var rb0 = load_b(n0, k_begin, k_end, t);
    var rb1 = load_b(n0, k_begin + 8u, k_end, t);
    put_a(0u, 0u, t, ra0); put_a(0u, 8u, t, ra1);
    put_b(0u, 0u, t, rb0); put_b(0u, 8u, t, rb1);
    workgroupBarrier();

    var c00 = coop_mat16x16<f32, C>(); var c01 = coop_mat16x16<f32, C>();
    var c02 = coop_mat16x16<f32, C>(); var c03 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>(); var c11 = coop_mat16x16<f32, C>();
    var c12 = coop_mat16x16<f32, C>(); var c13 = coop_mat16x16<f32, C>();

    for (var step = 0u; step < steps; step++) {
        let cur = step % 2u;
        let more = step + 1u < steps;
        if (more) {
            let k0 = k_begin + (step + 1u) * BK;
            ra0 = load_a(m0, k0, k_end, t);
            ra1 = load_a(m0, k0 + 8u, k_end, t);
            rb0 = load_b(n0, k0, k_end, t);
            rb1 = load_b(n0, k0 + 8u, k_end, t);
        }
        let a_at = cur * A_BUF + sm * A_STRIDE;
        let b_at = cur * B_BUF + sn;
        let a0 = coopLoadT<coop_mat16x16<f16, A>>(&As[a_at], A_STRIDE);
        let a1 = coopLoadT<coop_mat16x16<f16, A>>(&As[a_at + 16u * A_STRIDE], A_STRIDE);
        let b0 = coopLoadT<coop_mat16x16<f16, B>>(&Bs[b_at], B_STRIDE);
        let b1 = coopLoadT<coop_mat16x16<f16, B>>(&Bs[b_at + 16u], B_STRIDE);
        let b2 = coopLoadT<coop_mat16x16<f16, B>>(&Bs[b_at + 32u], B_STRIDE);
        let b3 = coopLoadT<coop_mat16x16<f16, B>>(&Bs[b_at + 48u], B_STRIDE);
        c00 = coopMultiplyAdd(a0, b0, c00); c01 = coopMultiplyAdd(a0, b1, c01);
        c02 = coopMultiplyAdd(a0, b2, c02); c03 = coopMultiplyAdd(a0, b3, c03);
        c10 = coopMultiplyAdd(a1, b0, c10); c11 = coopMultiplyAdd(a1, b1, c11);
        c12 = coopMultiplyAdd(a1, b2, c12); c13 = coopMultiplyAdd(a1, b3, c13);
        if (more) {
            // The other buffers were last read in step - 1, before the barrier.
            put_a(1u - cur, 0u, t, ra0); put_a(1u - cur, 8u, t, ra1);
            put_b(1u - cur, 0u, t, rb0); put_b(1u - cur, 8u, t, rb1);
        }
        workgroupBarrier();
    }

    let r0 = m0 + sm;
    let c0 = n0 + sn;
    flush(z, s, lane, width, r0, c0, c00);
    flush(z, s, lane, width, r0, c0 + 16u, c01);
    flush(z, s, lane, width, r0, c0 + 32u, c02);
    flush(z, s, lane, width, r0, c0 + 48u, c03);
    flush(z, s, lane, width, r0 + 16u, c0, c10);
    flush(z, s, lane, width, r0 + 16u, c0 + 16u, c11);
    flush(z, s, lane, width, r0 + 16u, c0 + 32u, c12);
    flush(z, s, lane, width, r0 + 16u, c0 + 48u, c13);
}

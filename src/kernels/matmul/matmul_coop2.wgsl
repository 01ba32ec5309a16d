// Tensor-core GEMM core, second version: the same product, rounding and tiles as
// matmul_coop.wgsl (128x128 of C a workgroup, 8 subgroups of 32, each 32x64 in
// 2 x 4 accumulators of 16x16x16 f16 x f16 -> f32), fed faster:
//
// - BK = 32 a step: two 16-deep products a barrier, 16 MMAs a subgroup per barrier.
// - Interior steps (the tile inside m and n, the step inside the split, and m, n, k
//   and the split's start multiples of 4) load through the preludes' unguarded
//   `load_a_fast` / `load_b_fast`; edge steps through `load_a` / `load_b`. Both give
//   the same 4 floats (GELU prologue included).
// - Each operand is stored in workgroup memory in the order the hook delivers it
//   (4 consecutive halves a thread, no transposing stores): along k as [mn][k],
//   otherwise as [k][mn]; the fragments are then loaded row- or column-major
//   to match.
// - The next step's 16 + 16 global loads are issued before this step's products
//   (two buffers, one barrier a step), as in matmul_coop.wgsl.
//
// Row strides: [mn][k] 40 halves (80 bytes), [k][mn] 136 halves (272 bytes): the 8
// rows of a fragment's 16-byte rows fall in distinct banks.
// Shared: A and B 2 x 5120 halves each (20 KiB each), output staging 8 subgroups x
// 256 floats (8 KiB): 48 KiB, the most a Vulkan workgroup has on NVIDIA
// (`coop2_supported` checks the limit). The staging cannot be shared by halves of the
// workgroup in turn: cooperative stores need uniform control flow.
// A_SCALE as in matmul_coop.wgsl.

const BM: u32 = 128u;
const BN: u32 = 128u;
const BK: u32 = 32u;
const LD_K: u32 = 40u;
const LD_MN: u32 = 136u;
// Halves of one buffer: max(128 * LD_K, BK * LD_MN).
const BUF: u32 = 5120u;

var<workgroup> As: array<f16, 10240>;
var<workgroup> Bs: array<f16, 10240>;
var<workgroup> Cs: array<f32, 2048>;

// Stores the 4 floats thread t loaded for k offsets k8 .. k8 + 8 of buffer buf.
fn put_a(buf: u32, k8: u32, t: u32, v: vec4<f32>) {
    let h = vec4<f16>(v * A_SCALE);
    var at: u32;
    if (A_ALONG_K) {
        // Row t / 2, k offsets (t % 2) * 4 .. + 4.
        at = buf * BUF + (t / 2u) * LD_K + k8 + (t % 2u) * 4u;
    } else {
        // k offset t / 32, rows (t % 32) * 4 .. + 4.
        at = buf * BUF + (k8 + t / 32u) * LD_MN + (t % 32u) * 4u;
    }
    As[at] = h.x; As[at + 1u] = h.y; As[at + 2u] = h.z; As[at + 3u] = h.w;
}

fn put_b(buf: u32, k8: u32, t: u32, v: vec4<f32>) {
    let h = vec4<f16>(v);
    var at: u32;
    if (B_ALONG_K) {
        // Column t / 2, k offsets (t % 2) * 4 .. + 4.
        at = buf * BUF + (t / 2u) * LD_K + k8 + (t % 2u) * 4u;
    } else {
        // k offset t / 32, columns (t % 32) * 4 .. + 4.
        at = buf * BUF + (k8 + t / 32u) * LD_MN + (t % 32u) * 4u;
    }
    Bs[at] = h.x; Bs[at + 1u] = h.y; Bs[at + 2u] = h.z; Bs[at + 3u] = h.w;
}

// Thread t's 4 + 4 vec4 of the 32-deep step at k0: unguarded where the whole step
// lies inside the tile and the split (`interior`: uniform over the workgroup).
fn fetch(m0: u32, n0: u32, k0: u32, k_end: u32, interior: bool, t: u32,
    ra0: ptr<function, vec4<f32>>, ra1: ptr<function, vec4<f32>>,
    ra2: ptr<function, vec4<f32>>, ra3: ptr<function, vec4<f32>>,
    rb0: ptr<function, vec4<f32>>, rb1: ptr<function, vec4<f32>>,
    rb2: ptr<function, vec4<f32>>, rb3: ptr<function, vec4<f32>>) {
    if (interior && k0 + BK <= k_end) {
        *ra0 = load_a_fast(m0, k0, t); *ra1 = load_a_fast(m0, k0 + 8u, t);
        *ra2 = load_a_fast(m0, k0 + 16u, t); *ra3 = load_a_fast(m0, k0 + 24u, t);
        *rb0 = load_b_fast(n0, k0, t); *rb1 = load_b_fast(n0, k0 + 8u, t);
        *rb2 = load_b_fast(n0, k0 + 16u, t); *rb3 = load_b_fast(n0, k0 + 24u, t);
    } else {
        *ra0 = load_a(m0, k0, k_end, t); *ra1 = load_a(m0, k0 + 8u, k_end, t);
        *ra2 = load_a(m0, k0 + 16u, k_end, t); *ra3 = load_a(m0, k0 + 24u, k_end, t);
        *rb0 = load_b(n0, k0, k_end, t); *rb1 = load_b(n0, k0 + 8u, k_end, t);
        *rb2 = load_b(n0, k0 + 16u, k_end, t); *rb3 = load_b(n0, k0 + 24u, k_end, t);
    }
}

fn stash(buf: u32, t: u32, ra0: vec4<f32>, ra1: vec4<f32>, ra2: vec4<f32>, ra3: vec4<f32>,
    rb0: vec4<f32>, rb1: vec4<f32>, rb2: vec4<f32>, rb3: vec4<f32>) {
    put_a(buf, 0u, t, ra0); put_a(buf, 8u, t, ra1);
    put_a(buf, 16u, t, ra2); put_a(buf, 24u, t, ra3);
    put_b(buf, 0u, t, rb0); put_b(buf, 8u, t, rb1);
    put_b(buf, 16u, t, rb2); put_b(buf, 24u, t, rb3);
}

// The A fragment of rows row .. + 16, k offsets kk .. + 16 of buffer buf.
fn frag_a(buf: u32, row: u32, kk: u32) -> coop_mat16x16<f16, A> {
    if (A_ALONG_K) {
        return coopLoadT<coop_mat16x16<f16, A>>(&As[buf * BUF + row * LD_K + kk], LD_K);
    }
    return coopLoad<coop_mat16x16<f16, A>>(&As[buf * BUF + kk * LD_MN + row], LD_MN);
}

// The B fragment of k offsets kk .. + 16, columns col .. + 16 of buffer buf.
fn frag_b(buf: u32, kk: u32, col: u32) -> coop_mat16x16<f16, B> {
    if (B_ALONG_K) {
        return coopLoad<coop_mat16x16<f16, B>>(&Bs[buf * BUF + col * LD_K + kk], LD_K);
    }
    return coopLoadT<coop_mat16x16<f16, B>>(&Bs[buf * BUF + kk * LD_MN + col], LD_MN);
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
    // Workgroup-uniform: whether full steps of this tile may skip the bounds checks.
    let interior = m0 + BM <= p.m && n0 + BN <= p.n
        && ((p.m | p.n | p.k | k_begin) & 3u) == 0u;
    // This subgroup's rows and columns within the tile.
    let sm = (s / 2u) * 32u;
    let sn = (s % 2u) * 64u;

    var c00 = coop_mat16x16<f32, C>(); var c01 = coop_mat16x16<f32, C>();
    var c02 = coop_mat16x16<f32, C>(); var c03 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>(); var c11 = coop_mat16x16<f32, C>();
    var c12 = coop_mat16x16<f32, C>(); var c13 = coop_mat16x16<f32, C>();
    var ra0: vec4<f32>; var ra1: vec4<f32>; var ra2: vec4<f32>; var ra3: vec4<f32>;
    var rb0: vec4<f32>; var rb1: vec4<f32>; var rb2: vec4<f32>; var rb3: vec4<f32>;
    fetch(m0, n0, k_begin, k_end, interior, t, &ra0, &ra1, &ra2, &ra3, &rb0, &rb1, &rb2, &rb3);
    stash(0u, t, ra0, ra1, ra2, ra3, rb0, rb1, rb2, rb3);
    workgroupBarrier();

    // No cooperative operation under a branch: they need uniform control flow.
    for (var step = 0u; step < steps; step++) {
        let cur = step % 2u;
        let more = step + 1u < steps;
        if (more) {
            fetch(m0, n0, k_begin + (step + 1u) * BK, k_end, interior, t,
                &ra0, &ra1, &ra2, &ra3, &rb0, &rb1, &rb2, &rb3);
        }
        var a0 = frag_a(cur, sm, 0u);
        var a1 = frag_a(cur, sm + 16u, 0u);
        var b0 = frag_b(cur, 0u, sn);
        var b1 = frag_b(cur, 0u, sn + 16u);
        var b2 = frag_b(cur, 0u, sn + 32u);
        var b3 = frag_b(cur, 0u, sn + 48u);
        c00 = coopMultiplyAdd(a0, b0, c00); c01 = coopMultiplyAdd(a0, b1, c01);
        c02 = coopMultiplyAdd(a0, b2, c02); c03 = coopMultiplyAdd(a0, b3, c03);
        c10 = coopMultiplyAdd(a1, b0, c10); c11 = coopMultiplyAdd(a1, b1, c11);
        c12 = coopMultiplyAdd(a1, b2, c12); c13 = coopMultiplyAdd(a1, b3, c13);
        a0 = frag_a(cur, sm, 16u);
        a1 = frag_a(cur, sm + 16u, 16u);
        b0 = frag_b(cur, 16u, sn);
        b1 = frag_b(cur, 16u, sn + 16u);
        b2 = frag_b(cur, 16u, sn + 32u);
        b3 = frag_b(cur, 16u, sn + 48u);
        c00 = coopMultiplyAdd(a0, b0, c00); c01 = coopMultiplyAdd(a0, b1, c01);
        c02 = coopMultiplyAdd(a0, b2, c02); c03 = coopMultiplyAdd(a0, b3, c03);
        c10 = coopMultiplyAdd(a1, b0, c10); c11 = coopMultiplyAdd(a1, b1, c11);
        c12 = coopMultiplyAdd(a1, b2, c12); c13 = coopMultiplyAdd(a1, b3, c13);
        if (more) {
            // The other buffers were last read in step - 1, before the barrier.
            stash(1u - cur, t, ra0, ra1, ra2, ra3, rb0, rb1, rb2, rb3);
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

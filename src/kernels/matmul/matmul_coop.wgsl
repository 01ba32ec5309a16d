// Tensor-core GEMM cores: c[z][m, n] = sum over k in split z of A(m, k) * B(k, n),
// with A and B rounded to f16 and the products summed in f32 by cooperative
// matrices (16x16x16, f16 x f16 -> f32: what wgpu exposes as
// EXPERIMENTAL_COOPERATIVE_MATRIX on VK_KHR_cooperative_matrix). Joined after the
// same preludes as the tiled cores; source.rs puts `enable f16;`,
// `enable wgpu_cooperative_matrix;` and A_SCALE in front of them. One template,
// two cores (source.rs names each one's tag):
//   C1  `Coop`: steps of BK = 16; each step every thread calls the prelude's load_a
//       / load_b twice (two 128 x 8 tiles), rounds the 4 + 4 floats to f16 and
//       stores them in workgroup memory: A as [m][k], B as [k][n], row-major, rows
//       padded by 8 halves.
//   C2  `Coop2`: steps of BK = 32 (two 16-deep products a barrier, 16 MMAs a
//       subgroup per barrier). Interior steps (the tile inside m and n, the step
//       inside the split, and m, n, k and the split's start multiples of 4) load
//       through the preludes' unguarded `load_a_fast` / `load_b_fast` (one vec4
//       each, from the operands' vec4 views, where `views_whole()`), edge steps
//       through `load_a` / `load_b` (the same 4 floats, GELU prologue included).
//       B's loads are held as `BVec`: in the forward's and dinp's `_w16` twins,
//       vec4<f16> read from the weights' f16 copy (source.rs, Views), else vec4<f32>.
//       An operand read along k is read as whole 128-byte rows, 4 a subgroup a load
//       (`slice_of` / `thread_of`): against 16 rows of 32 bytes the forwards (both
//       operands along k) ran 1.2-1.4x faster and the f16 step 6% (bench-results/
//       gemm-vs-cublas/2026-12-04-coop-whole-rows). Holding A's 4 vec4s over the
//       first 16-deep product and B's over the second (half the registers for
//       loads) lost: the f16 step 25.7 ms against 23.2, every coop2 GEMM slower
//       (.../2026-12-04-coop-half-loads). Each operand is stored in the order
//       the hook delivers it (4 consecutive halves a thread, one vec4<f16> store,
//       no transposing): along k as [mn][k], otherwise as [k][mn]; the fragments
//       are loaded row- or column-major to match. Row strides 40 halves ([mn][k]) and 136
//       ([k][mn]): the 8 rows of a fragment's 16-byte rows fall in distinct banks.
//
// A workgroup of 256 threads in 8 subgroups of 32 (the launcher runs these cores
// only where subgroups are exactly 32 wide) computes a 128x128 tile of C. Subgroup s
// owns rows (s / 2) * 32 .. + 32 and columns (s % 2) * 64 .. + 64 of the tile: 2 x 4
// accumulators, 2 A and 4 B fragments a 16-deep product. C1 issues the next step's
// global loads before this step's math (two shared buffers, one barrier a step); C2
// issues them two steps ahead, in two sets of registers. C2 runs one workgroup an SM
// (its 48 KiB of workgroup memory and 256 threads of 195-213 registers, below), so
// registers up to 255 a thread cost no occupancy, and its loads (32 KiB a step from
// L2) waited through one step's products; through two, twice the bytes are in
// flight. At the end each accumulator goes through workgroup memory, 16x16 floats a
// subgroup at a time, to the prelude's write4_with (bias, epilogues, split slices),
// the epilogue's loads (`epilogue_in`: resid, aux) all issued before the first.
// On Hopper (benches/kernel_stats.rs) C2 took 177-200 registers a thread with
// one set of loads in flight, 195-213 with two: one workgroup an SM either way. A 64x128 tile with 2 x 2 accumulators a subgroup took 122-130 (two
// workgroups an SM for dinp and dweight, the forward still one) and lost everywhere:
// the f16 step 28.5 ms against 23.0, c_fc's input gradient 0.266 ms against 0.173
// (bench-results/gemm-vs-cublas/2026-12-04-coop2-64-rows): the loop is held by its
// work a workgroup, not by how many workgroups share an SM. The dweight sums dbias
// in its first column of tiles, as the tiled core does, adding each step's A tile into
// the sums where it is stored, after the products: added as the loads were issued,
// those workgroups waited for global memory before their math, and the kernel took
// 4.42 GPU ms a step against 3.81 for the plain one with 0.47 of column sums beside
// it; added after the math it takes 3.83-3.94 and the column sums are gone
// (bench-results/step-vs-torch/2026-12-05-loads-after-math).
//
// A_SCALE: the A operand is multiplied by it (a power of two) before rounding and
// the sums by 1 / A_SCALE after: in the backward GEMMs A is a gradient, whose
// elements (about 1e-6 and below) would otherwise fall to f16's subnormals. The
// scaling is exact in f32; only the f16 rounding sees it.
//
// Shared, C1: A 2 x 128 x 24 halves (12 KiB), B 2 x 16 x 136 halves (8.5 KiB), the
// output staging 8 x 256 floats (8 KiB). C2: A and B 2 x 5120 halves each (20 KiB
// each), the staging: 48 KiB, the most a Vulkan workgroup has on NVIDIA
// (`coop2_supported` checks the limit). The staging cannot be shared by halves of
// the workgroup in turn: cooperative stores need uniform control flow.

const BM: u32 = 128u;
const BN: u32 = 128u;
const BK: u32 = {C1:16u}{C2:32u};
#C1 const A_STRIDE: u32 = 24u;
#C1 const B_STRIDE: u32 = 136u;
#C1 const A_BUF: u32 = 3072u; // BM * A_STRIDE
#C1 const B_BUF: u32 = 2176u; // BK * B_STRIDE
#C2 const LD_K: u32 = 40u;
#C2 const LD_MN: u32 = 136u;
// Halves of one buffer: max(128 * LD_K, BK * LD_MN).
#C2 const BUF: u32 = 5120u;
// The same in the tiles' vec4s (every offset below is a multiple of 4 halves).
#C2 const LD_K4: u32 = 10u;
#C2 const LD_MN4: u32 = 34u;

// C2 keeps its tiles as vec4<f16>: each put is one 8-byte store where 4 stores of a
// half are 4 instructions (C1's), and the fragments load them with offsets and strides
// in vec4s (a cooperative load of a vector array reads its components in order).
var<workgroup> As: array<{C1:f16, 6144}{C2:vec4<f16>, 2560}>;
var<workgroup> Bs: array<{C1:f16, 4352}{C2:vec4<f16>, 2560}>;
var<workgroup> Cs: array<f32, 2048>;

// Stores the 4 floats thread t loaded for k offsets k8 .. k8 + 8 of buffer buf.
fn put_a(buf: u32, k8: u32, t: u32, v: vec4<f32>) {
    let h = vec4<f16>(prologue_a(v) * A_SCALE);
#C2     var at: u32;
    if (A_ALONG_K) {
        // Row t / 2, k offsets (t % 2) * 4 .. + 4.
#C1         let at = buf * A_BUF + (t / 2u) * A_STRIDE + k8 + (t % 2u) * 4u;
#C1         As[at] = h.x; As[at + 1u] = h.y; As[at + 2u] = h.z; As[at + 3u] = h.w;
#C2         at = buf * BUF + (t / 2u) * LD_K + k8 + (t % 2u) * 4u;
    } else {
#C1         // Step t / 32, rows (t % 32) * 4 .. + 4.
#C1         let at = buf * A_BUF + (t % 32u) * 4u * A_STRIDE + k8 + t / 32u;
#C1         As[at] = h.x;
#C1         As[at + A_STRIDE] = h.y;
#C1         As[at + 2u * A_STRIDE] = h.z;
#C1         As[at + 3u * A_STRIDE] = h.w;
#C2         // k offset t / 32, rows (t % 32) * 4 .. + 4.
#C2         at = buf * BUF + (k8 + t / 32u) * LD_MN + (t % 32u) * 4u;
    }
#C2     As[at / 4u] = h;
}

fn put_b(buf: u32, k8: u32, t: u32, v: BVec) {
    let h = vec4<f16>(prologue_b(v));
#C2     var at: u32;
    if (B_ALONG_K) {
        // Column t / 2, k offsets (t % 2) * 4 .. + 4.
#C1         let at = buf * B_BUF + (k8 + (t % 2u) * 4u) * B_STRIDE + t / 2u;
#C1         Bs[at] = h.x;
#C1         Bs[at + B_STRIDE] = h.y;
#C1         Bs[at + 2u * B_STRIDE] = h.z;
#C1         Bs[at + 3u * B_STRIDE] = h.w;
#C2         at = buf * BUF + (t / 2u) * LD_K + k8 + (t % 2u) * 4u;
    } else {
#C1         // Step t / 32, columns (t % 32) * 4 .. + 4.
#C1         let at = buf * B_BUF + (k8 + t / 32u) * B_STRIDE + (t % 32u) * 4u;
#C1         Bs[at] = h.x; Bs[at + 1u] = h.y; Bs[at + 2u] = h.z; Bs[at + 3u] = h.w;
#C2         // k offset t / 32, columns (t % 32) * 4 .. + 4.
#C2         at = buf * BUF + (k8 + t / 32u) * LD_MN + (t % 32u) * 4u;
    }
#C2     Bs[at / 4u] = h;
}

// Which of the 32-deep step's 8-deep slices (its first k offset) and which prelude
// thread index (`load_a` / `put_a`'s t) thread t's load j takes. Along k a prelude
// thread takes 4 floats of row t / 2 of one slice, so the same t in each slice would
// spread a subgroup's load over 16 rows, 32 bytes of each; here a subgroup's load j
// is 4 whole 128-byte rows (32 * j + t / 8 .. + 4), each thread the slice
// (t % 8) / 2 of its row. Across k (k-major) a subgroup's load is already one row.
#C2 fn slice_of(along_k: bool, j: u32, t: u32) -> u32 {
#C2     if (along_k) { return ((t % 8u) / 2u) * 8u; }
#C2     return j * 8u;
#C2 }
#C2 fn thread_of(along_k: bool, j: u32, t: u32) -> u32 {
#C2     if (along_k) { return 2u * (32u * j + t / 8u) + t % 2u; }
#C2     return t;
#C2 }

// Thread t's 4 + 4 vec4 of the 32-deep step at k0: unguarded where the whole step
// lies inside the tile and the split (`interior`: uniform over the workgroup).
#C2 fn fetch(m0: u32, n0: u32, k0: u32, k_end: u32, interior: bool, t: u32,
#C2     ra0: ptr<function, vec4<f32>>, ra1: ptr<function, vec4<f32>>,
#C2     ra2: ptr<function, vec4<f32>>, ra3: ptr<function, vec4<f32>>,
#C2     rb0: ptr<function, BVec>, rb1: ptr<function, BVec>,
#C2     rb2: ptr<function, BVec>, rb3: ptr<function, BVec>) {
#C2     let ka = k0 + slice_of(A_ALONG_K, 0u, t);
#C2     let kb = k0 + slice_of(B_ALONG_K, 0u, t);
#C2     let da = slice_of(A_ALONG_K, 1u, t) - slice_of(A_ALONG_K, 0u, t);
#C2     let db = slice_of(B_ALONG_K, 1u, t) - slice_of(B_ALONG_K, 0u, t);
#C2     let ta0 = thread_of(A_ALONG_K, 0u, t); let ta1 = thread_of(A_ALONG_K, 1u, t);
#C2     let ta2 = thread_of(A_ALONG_K, 2u, t); let ta3 = thread_of(A_ALONG_K, 3u, t);
#C2     let tb0 = thread_of(B_ALONG_K, 0u, t); let tb1 = thread_of(B_ALONG_K, 1u, t);
#C2     let tb2 = thread_of(B_ALONG_K, 2u, t); let tb3 = thread_of(B_ALONG_K, 3u, t);
#C2     if (interior && k0 + BK <= k_end) {
#C2         *ra0 = load_a_fast(m0, ka, ta0); *ra1 = load_a_fast(m0, ka + da, ta1);
#C2         *ra2 = load_a_fast(m0, ka + 2u * da, ta2); *ra3 = load_a_fast(m0, ka + 3u * da, ta3);
#C2         *rb0 = load_b_fast(n0, kb, tb0); *rb1 = load_b_fast(n0, kb + db, tb1);
#C2         *rb2 = load_b_fast(n0, kb + 2u * db, tb2); *rb3 = load_b_fast(n0, kb + 3u * db, tb3);
#C2     } else {
#C2         *ra0 = load_a(m0, ka, k_end, ta0); *ra1 = load_a(m0, ka + da, k_end, ta1);
#C2         *ra2 = load_a(m0, ka + 2u * da, k_end, ta2); *ra3 = load_a(m0, ka + 3u * da, k_end, ta3);
#C2         *rb0 = BVec(load_b(n0, kb, k_end, tb0)); *rb1 = BVec(load_b(n0, kb + db, k_end, tb1));
#C2         *rb2 = BVec(load_b(n0, kb + 2u * db, k_end, tb2)); *rb3 = BVec(load_b(n0, kb + 3u * db, k_end, tb3));
#C2     }
#C2 }

#C2 fn stash(buf: u32, t: u32, ra0: vec4<f32>, ra1: vec4<f32>, ra2: vec4<f32>, ra3: vec4<f32>,
#C2     rb0: BVec, rb1: BVec, rb2: BVec, rb3: BVec) {
#C2     put_a(buf, slice_of(A_ALONG_K, 0u, t), thread_of(A_ALONG_K, 0u, t), ra0);
#C2     put_a(buf, slice_of(A_ALONG_K, 1u, t), thread_of(A_ALONG_K, 1u, t), ra1);
#C2     put_a(buf, slice_of(A_ALONG_K, 2u, t), thread_of(A_ALONG_K, 2u, t), ra2);
#C2     put_a(buf, slice_of(A_ALONG_K, 3u, t), thread_of(A_ALONG_K, 3u, t), ra3);
#C2     put_b(buf, slice_of(B_ALONG_K, 0u, t), thread_of(B_ALONG_K, 0u, t), rb0);
#C2     put_b(buf, slice_of(B_ALONG_K, 1u, t), thread_of(B_ALONG_K, 1u, t), rb1);
#C2     put_b(buf, slice_of(B_ALONG_K, 2u, t), thread_of(B_ALONG_K, 2u, t), rb2);
#C2     put_b(buf, slice_of(B_ALONG_K, 3u, t), thread_of(B_ALONG_K, 3u, t), rb3);
#C2 }

// The A fragment of rows row .. + 16, k offsets kk .. + 16 of buffer buf.
#C2 fn frag_a(buf: u32, row: u32, kk: u32) -> coop_mat16x16<f16, A> {
#C2     if (A_ALONG_K) {
#C2         return coopLoadT<coop_mat16x16<f16, A>>(&As[(buf * BUF + row * LD_K + kk) / 4u], LD_K4);
#C2     }
#C2     return coopLoad<coop_mat16x16<f16, A>>(&As[(buf * BUF + kk * LD_MN + row) / 4u], LD_MN4);
#C2 }

// The B fragment of k offsets kk .. + 16, columns col .. + 16 of buffer buf.
#C2 fn frag_b(buf: u32, kk: u32, col: u32) -> coop_mat16x16<f16, B> {
#C2     if (B_ALONG_K) {
#C2         return coopLoad<coop_mat16x16<f16, B>>(&Bs[(buf * BUF + col * LD_K + kk) / 4u], LD_K4);
#C2     }
#C2     return coopLoadT<coop_mat16x16<f16, B>>(&Bs[(buf * BUF + kk * LD_MN + col) / 4u], LD_MN4);
#C2 }

// Through this subgroup's 16x16 staging block to write4_with: lane l writes rows
// l / 4 and l / 4 + 8, columns (l % 4) * 4 .. + 4 (the launcher runs these cores only
// where subgroups are 32 wide), with e0 and e1 the epilogue's operands there
// (`epilogue_in`, loaded by the caller for every block before the first flush: loaded
// here, each block's waited for memory after the barrier before it, 8 waits a
// tile). The block is the subgroup's own, so only its lanes meet, at subgroup
// barriers: a workgroup barrier pair an accumulator made all 8 subgroups wait for
// each other 16 times after the loop, more barriers than the loop's own at k = 384.
// naga gives the subgroup barrier subgroup memory semantics, not workgroup memory's;
// that NVIDIA's compiler keeps workgroup-memory accesses on their side of it (as
// CUDA's __syncwarp does) is what the f16 GEMM tests on the tensor cores check.
fn flush(z: u32, s: u32, lane: u32, r0: u32, c0: u32, acc: coop_mat16x16<f32, C>,
    e0: vec4<f32>, e1: vec4<f32>) {
    coopStoreT(acc, &Cs[s * 256u], 16u);
    subgroupBarrier();
    let at = s * 256u + (lane / 4u) * 16u + (lane % 4u) * 4u;
    let v0 = vec4<f32>(Cs[at], Cs[at + 1u], Cs[at + 2u], Cs[at + 3u]) * (1.0 / A_SCALE);
    let v1 = vec4<f32>(Cs[at + 128u], Cs[at + 129u], Cs[at + 130u], Cs[at + 131u]) * (1.0 / A_SCALE);
    write4_with(z, r0 + lane / 4u, c0 + (lane % 4u) * 4u, v0, e0);
    write4_with(z, r0 + lane / 4u + 8u, c0 + (lane % 4u) * 4u, v1, e1);
    subgroupBarrier();
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
#C2     let interior = views_whole() && m0 + BM <= p.m && n0 + BN <= p.n
#C2         && ((p.m | p.n | p.k | k_begin) & 3u) == 0u;
    // This subgroup's rows and columns within the tile.
    let sm = (s / 2u) * 32u;
    let sn = (s % 2u) * 64u;

#C1     var ra0 = load_a(m0, k_begin, k_end, t);
#C1     var ra1 = load_a(m0, k_begin + 8u, k_end, t);
#C1     var rb0 = load_b(n0, k_begin, k_end, t);
#C1     var rb1 = load_b(n0, k_begin + 8u, k_end, t);
#C1     put_a(0u, 0u, t, ra0); put_a(0u, 8u, t, ra1);
#C1     put_b(0u, 0u, t, rb0); put_b(0u, 8u, t, rb1);
#C1     workgroupBarrier();

    var c00 = coop_mat16x16<f32, C>(); var c01 = coop_mat16x16<f32, C>();
    var c02 = coop_mat16x16<f32, C>(); var c03 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>(); var c11 = coop_mat16x16<f32, C>();
    var c12 = coop_mat16x16<f32, C>(); var c13 = coop_mat16x16<f32, C>();
#C2     // Two sets of loads in flight: r* and y*, each a step's 4 + 4 vec4s. A step's
#C2     // loads are issued two steps before it is worked on (set by the step's parity:
#C2     // odd steps in y*, even in r*), so each waits through two steps' products, not one.
#C2     var ra0: vec4<f32>; var ra1: vec4<f32>; var ra2: vec4<f32>; var ra3: vec4<f32>;
#C2     var rb0: BVec; var rb1: BVec; var rb2: BVec; var rb3: BVec;
#C2     var ya0: vec4<f32>; var ya1: vec4<f32>; var ya2: vec4<f32>; var ya3: vec4<f32>;
#C2     var yb0: BVec; var yb1: BVec; var yb2: BVec; var yb3: BVec;
#C2     fetch(m0, n0, k_begin, k_end, interior, t, &ra0, &ra1, &ra2, &ra3, &rb0, &rb1, &rb2, &rb3);
#C2     // A_SUMS (dweight, matmul_tn_sums.wgsl): the first column of tiles also sums A
#C2     // (dout) over the split, in f32 as loaded: every load of thread t is of
#C2     // columns (t % 32) * 4 .. + 4 (A is read across k). A uniform branch.
#C2     let a_sums = A_SUMS && wg.x == 0u;
#C2     var asum = vec4<f32>(0.0);
#C2     if (a_sums) { asum += (ra0 + ra1) + (ra2 + ra3); }
#C2     stash(0u, t, ra0, ra1, ra2, ra3, rb0, rb1, rb2, rb3);
#C2     if (steps > 1u) {
#C2         fetch(m0, n0, k_begin + BK, k_end, interior, t, &ya0, &ya1, &ya2, &ya3, &yb0, &yb1, &yb2, &yb3);
#C2     }
#C2     workgroupBarrier();

    // No cooperative operation under a branch: they need uniform control flow.
    for (var step = 0u; step < steps; step++) {
        let cur = step % 2u;
        let more = step + 1u < steps;
        if (more) {
#C1             let k0 = k_begin + (step + 1u) * BK;
#C1             ra0 = load_a(m0, k0, k_end, t);
#C1             ra1 = load_a(m0, k0 + 8u, k_end, t);
#C1             rb0 = load_b(n0, k0, k_end, t);
#C1             rb1 = load_b(n0, k0 + 8u, k_end, t);
        }
#C2         // Step + 2's loads, into the set step's own loads left (stashed last step).
#C2         if (step + 2u < steps) {
#C2             let k2 = k_begin + (step + 2u) * BK;
#C2             if (cur == 0u) {
#C2                 fetch(m0, n0, k2, k_end, interior, t, &ra0, &ra1, &ra2, &ra3, &rb0, &rb1, &rb2, &rb3);
#C2             } else {
#C2                 fetch(m0, n0, k2, k_end, interior, t, &ya0, &ya1, &ya2, &ya3, &yb0, &yb1, &yb2, &yb3);
#C2             }
#C2         }
#C1         let a_at = cur * A_BUF + sm * A_STRIDE;
#C1         let b_at = cur * B_BUF + sn;
#C1         let a0 = coopLoadT<coop_mat16x16<f16, A>>(&As[a_at], A_STRIDE);
#C1         let a1 = coopLoadT<coop_mat16x16<f16, A>>(&As[a_at + 16u * A_STRIDE], A_STRIDE);
#C1         let b0 = coopLoadT<coop_mat16x16<f16, B>>(&Bs[b_at], B_STRIDE);
#C1         let b1 = coopLoadT<coop_mat16x16<f16, B>>(&Bs[b_at + 16u], B_STRIDE);
#C1         let b2 = coopLoadT<coop_mat16x16<f16, B>>(&Bs[b_at + 32u], B_STRIDE);
#C1         let b3 = coopLoadT<coop_mat16x16<f16, B>>(&Bs[b_at + 48u], B_STRIDE);
        // The products of each 16-deep half of the step (C1's step is one).
#C2         var a0 = frag_a(cur, sm, 0u);
#C2         var a1 = frag_a(cur, sm + 16u, 0u);
#C2         var b0 = frag_b(cur, 0u, sn);
#C2         var b1 = frag_b(cur, 0u, sn + 16u);
#C2         var b2 = frag_b(cur, 0u, sn + 32u);
#C2         var b3 = frag_b(cur, 0u, sn + 48u);
        c00 = coopMultiplyAdd(a0, b0, c00); c01 = coopMultiplyAdd(a0, b1, c01);
        c02 = coopMultiplyAdd(a0, b2, c02); c03 = coopMultiplyAdd(a0, b3, c03);
        c10 = coopMultiplyAdd(a1, b0, c10); c11 = coopMultiplyAdd(a1, b1, c11);
        c12 = coopMultiplyAdd(a1, b2, c12); c13 = coopMultiplyAdd(a1, b3, c13);
#C2         a0 = frag_a(cur, sm, 16u);
#C2         a1 = frag_a(cur, sm + 16u, 16u);
#C2         b0 = frag_b(cur, 16u, sn);
#C2         b1 = frag_b(cur, 16u, sn + 16u);
#C2         b2 = frag_b(cur, 16u, sn + 32u);
#C2         b3 = frag_b(cur, 16u, sn + 48u);
#C2         c00 = coopMultiplyAdd(a0, b0, c00); c01 = coopMultiplyAdd(a0, b1, c01);
#C2         c02 = coopMultiplyAdd(a0, b2, c02); c03 = coopMultiplyAdd(a0, b3, c03);
#C2         c10 = coopMultiplyAdd(a1, b0, c10); c11 = coopMultiplyAdd(a1, b1, c11);
#C2         c12 = coopMultiplyAdd(a1, b2, c12); c13 = coopMultiplyAdd(a1, b3, c13);
        if (more) {
            // The sums wait for the loads here, after the products (as the tiled
            // core's do).
            // The other buffers were last read in step - 1, before the barrier.
#C1             put_a(1u - cur, 0u, t, ra0); put_a(1u - cur, 8u, t, ra1);
#C1             put_b(1u - cur, 0u, t, rb0); put_b(1u - cur, 8u, t, rb1);
#C2             // Step + 1's loads: odd steps' are in y*, even steps' in r*.
#C2             if (cur == 0u) {
#C2                 if (a_sums) { asum += (ya0 + ya1) + (ya2 + ya3); }
#C2                 stash(1u, t, ya0, ya1, ya2, ya3, yb0, yb1, yb2, yb3);
#C2             } else {
#C2                 if (a_sums) { asum += (ra0 + ra1) + (ra2 + ra3); }
#C2                 stash(0u, t, ra0, ra1, ra2, ra3, rb0, rb1, rb2, rb3);
#C2             }
        }
        workgroupBarrier();
    }

#C2     // The 8 threads of each 4 columns add their sums through Cs (free after the
#C2     // loop's last barrier, and again before the staging), in a fixed order.
#C2     if (a_sums) {
#C2         Cs[4u * t] = asum.x; Cs[4u * t + 1u] = asum.y;
#C2         Cs[4u * t + 2u] = asum.z; Cs[4u * t + 3u] = asum.w;
#C2         workgroupBarrier();
#C2         if (t < 32u) {
#C2             var sum = vec4<f32>(Cs[4u * t], Cs[4u * t + 1u], Cs[4u * t + 2u], Cs[4u * t + 3u]);
#C2             for (var q = 1u; q < 8u; q++) {
#C2                 let at = 4u * (t + 32u * q);
#C2                 sum += vec4<f32>(Cs[at], Cs[at + 1u], Cs[at + 2u], Cs[at + 3u]);
#C2             }
#C2             write_a_sums(z, m0 + t * 4u, sum);
#C2         }
#C2         workgroupBarrier();
#C2     }

    let r0 = m0 + sm;
    let c0 = n0 + sn;
    // The epilogue's operands of all 8 blocks first (see flush), the lane's two rows
    // of each: block (a, b) is rows r0 + 16 * a .., columns c0 + 16 * b ...
    let lr = r0 + lane / 4u;
    let lc = c0 + (lane % 4u) * 4u;
    let e00 = epilogue_in(lr, lc); let f00 = epilogue_in(lr + 8u, lc);
    let e01 = epilogue_in(lr, lc + 16u); let f01 = epilogue_in(lr + 8u, lc + 16u);
    let e02 = epilogue_in(lr, lc + 32u); let f02 = epilogue_in(lr + 8u, lc + 32u);
    let e03 = epilogue_in(lr, lc + 48u); let f03 = epilogue_in(lr + 8u, lc + 48u);
    let e10 = epilogue_in(lr + 16u, lc); let f10 = epilogue_in(lr + 24u, lc);
    let e11 = epilogue_in(lr + 16u, lc + 16u); let f11 = epilogue_in(lr + 24u, lc + 16u);
    let e12 = epilogue_in(lr + 16u, lc + 32u); let f12 = epilogue_in(lr + 24u, lc + 32u);
    let e13 = epilogue_in(lr + 16u, lc + 48u); let f13 = epilogue_in(lr + 24u, lc + 48u);
    flush(z, s, lane, r0, c0, c00, e00, f00);
    flush(z, s, lane, r0, c0 + 16u, c01, e01, f01);
    flush(z, s, lane, r0, c0 + 32u, c02, e02, f02);
    flush(z, s, lane, r0, c0 + 48u, c03, e03, f03);
    flush(z, s, lane, r0 + 16u, c0, c10, e10, f10);
    flush(z, s, lane, r0 + 16u, c0 + 16u, c11, e11, f11);
    flush(z, s, lane, r0 + 16u, c0 + 32u, c12, e12, f12);
    flush(z, s, lane, r0 + 16u, c0 + 48u, c13, e13, f13);
}

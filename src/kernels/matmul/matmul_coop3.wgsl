// Tensor-core GEMM core C3 (`Coop3`): c[z][m, n] = sum over k in split z of A(m, k)
// * B(k, n), A and B rounded to f16, the products summed in f32 by 16x16x16
// cooperative matrices, after the same preludes and through the same hooks as
// matmul_coop.wgsl's cores (source.rs puts `enable f16;`, `enable
// wgpu_cooperative_matrix;` and A_SCALE in front, and writes each line holding #I or
// #J out once an index 0 .. 3).
//
// Built for throughput where cooperative matrices lower to warp MMAs (NVIDIA:
// mma.sync fed by ldmatrix from workgroup memory). C2 reaches a small part of what
// the H200's MMAs allow; the likely bounds are the work around each MMA (0.75
// fragment loads an MMA: 2 A + 4 B a 16-deep product for 8 MMAs; a subgroup
// barrier pair an accumulator to stage the output) and, at 256 threads of some 140 registers,
// one workgroup an SM, which then idles at every barrier (`scripts/gpu-run.sh
// gemm-sweep` times both beside cuBLAS). This core:
//   - gives each subgroup a 64x64 block: 4 x 4 accumulators, so each A fragment
//     serves 4 MMAs and each B fragment 4: 8 fragment loads for 16 MMAs (0.5 an MMA);
//   - runs 4 subgroups (128 threads) on a 128x128 tile, so the grid, the splits and
//     the edges are C2's, and keeps workgroup memory at 42 KiB and the registers
//     (a lane holds 128 floats of accumulators, 32 registers of fragments, 32 of
//     the next step's operands) under 255 a thread: two workgroups share an SM,
//     and one computes while the other waits at its barrier;
//   - takes steps of BK = 16 (16 MMAs a subgroup, 64 a workgroup, a barrier), double
//     buffered: the next step's global loads are issued before this step's MMAs and
//     stored after them. Steps of 32 would need 40 KiB of operand buffers and 64
//     registers of loads in flight, too much for two workgroups an SM.
// Interior steps (the tile inside m and n, the step inside the split, m, n, k and
// the split's start multiples of 4) load through the preludes' unguarded
// `load_a_fast` / `load_b_fast` (vec4 views, where `views_whole()`), edge steps
// through `load_a` / `load_b` (the same 4
// floats, GELU prologue included). Each of the 128 threads calls a hook for thread
// indices t and t + 128 of the hooks' 256-thread tiles. Operands are stored in the
// order the hooks deliver them (4 consecutive halves a call): read along k as
// [mn][k], row stride LD_K = 24 halves, else as [k][mn], row stride LD_MN = 136. In
// both, the 8 16-byte rows one fragment load reads at a time fall in distinct banks.
//
// Subgroup s owns rows (s / 2) * 64 .. + 64 and columns (s % 2) * 64 .. + 64 of the
// tile. At the end each row of 4 accumulators goes through the subgroup's 16x64
// strip of workgroup memory to the prelude's write4 (bias, epilogues, split
// slices): 4 barrier pairs, not one an accumulator, and each turn of a subgroup's
// lanes covers two whole 256-byte rows of the output. The operand buffers cannot
// hold that staging: they are f16 and a cooperative store of an f32 accumulator
// needs an f32 array; nor can fewer subgroups stage at a time: cooperative stores
// need uniform control flow.
//
// A_SCALE: A is multiplied by it before rounding and the sums by 1 / A_SCALE after
// (matmul_coop.wgsl says why).
//
// Shared: A and B 2 x 3072 halves each (12 KiB each), the staging 4 x 16 x 72 floats
// (18 KiB): 42 KiB (`MatmulVariant::workgroup_bytes`), 84 KiB for two workgroups
// of an SM's 228.

const BM: u32 = 128u;
const BN: u32 = 128u;
const BK: u32 = 16u;
const THREADS: u32 = 128u;
const LD_K: u32 = 24u;
const LD_MN: u32 = 136u;
// Halves of one buffer: max(128 * LD_K, BK * LD_MN).
const BUF: u32 = 3072u;

var<workgroup> As: array<f16, 6144>;
var<workgroup> Bs: array<f16, 6144>;
// Row stride of the staging strips in floats: the 8-byte stores of half a subgroup
// (4 rows of a 16x16 accumulator) fall in distinct banks, and rows stay 16-byte
// aligned for the vec4 reads.
const STRIP_LD: u32 = 72u;
// Floats of one subgroup's strip: 16 * STRIP_LD.
const STRIP: u32 = 1152u;
var<workgroup> Cs: array<f32, 4608>;

// One step's operands as the hooks return them: calls for thread indices t (0, 1)
// and t + 128 (2, 3) at k offsets 0 (0, 2) and 8 (1, 3).
struct Step {
    a0: vec4<f32>, a1: vec4<f32>, a2: vec4<f32>, a3: vec4<f32>,
    b0: vec4<f32>, b1: vec4<f32>, b2: vec4<f32>, b3: vec4<f32>,
}

// Where hook thread index u's 4 halves of k offsets k8 .. k8 + 8 go in a buffer: row
// u / 2, k offsets (u % 2) * 4 .. + 4 along k, else k offset u / 32, rows or
// columns (u % 32) * 4 .. + 4.
// Rounded down to a multiple of 4 (which it already is): the 4 halves are 8-byte
// aligned.
fn slot(along_k: bool, buf: u32, k8: u32, u: u32) -> u32 {
    if (along_k) {
        return (buf * BUF + (u / 2u) * LD_K + k8 + (u % 2u) * 4u) & ~3u;
    }
    return (buf * BUF + (k8 + u / 32u) * LD_MN + (u % 32u) * 4u) & ~3u;
}

fn put_a(buf: u32, k8: u32, u: u32, v: vec4<f32>) {
    let h = vec4<f16>(prologue_a(v) * A_SCALE);
    let at = slot(A_ALONG_K, buf, k8, u);
    As[at] = h.x; As[at + 1u] = h.y; As[at + 2u] = h.z; As[at + 3u] = h.w;
}

fn put_b(buf: u32, k8: u32, u: u32, v: vec4<f32>) {
    let h = vec4<f16>(prologue_b(v));
    let at = slot(B_ALONG_K, buf, k8, u);
    Bs[at] = h.x; Bs[at + 1u] = h.y; Bs[at + 2u] = h.z; Bs[at + 3u] = h.w;
}

// Thread t's share of the 16-deep step at k0: unguarded where the whole step lies
// inside the tile and the split (`interior`: uniform over the workgroup).
fn fetch(m0: u32, n0: u32, k0: u32, k_end: u32, interior: bool, t: u32) -> Step {
    let u = t + THREADS;
    var s: Step;
    if (interior && k0 + BK <= k_end) {
        s.a0 = load_a_fast(m0, k0, t); s.a1 = load_a_fast(m0, k0 + 8u, t);
        s.a2 = load_a_fast(m0, k0, u); s.a3 = load_a_fast(m0, k0 + 8u, u);
        s.b0 = load_b_fast(n0, k0, t); s.b1 = load_b_fast(n0, k0 + 8u, t);
        s.b2 = load_b_fast(n0, k0, u); s.b3 = load_b_fast(n0, k0 + 8u, u);
    } else {
        s.a0 = load_a(m0, k0, k_end, t); s.a1 = load_a(m0, k0 + 8u, k_end, t);
        s.a2 = load_a(m0, k0, k_end, u); s.a3 = load_a(m0, k0 + 8u, k_end, u);
        s.b0 = load_b(n0, k0, k_end, t); s.b1 = load_b(n0, k0 + 8u, k_end, t);
        s.b2 = load_b(n0, k0, k_end, u); s.b3 = load_b(n0, k0 + 8u, k_end, u);
    }
    return s;
}

fn stash(buf: u32, t: u32, s: Step) {
    let u = t + THREADS;
    put_a(buf, 0u, t, s.a0); put_a(buf, 8u, t, s.a1);
    put_a(buf, 0u, u, s.a2); put_a(buf, 8u, u, s.a3);
    put_b(buf, 0u, t, s.b0); put_b(buf, 8u, t, s.b1);
    put_b(buf, 0u, u, s.b2); put_b(buf, 8u, u, s.b3);
}

// The A fragment of tile rows row .. + 16 in buffer buf.
fn frag_a(buf: u32, row: u32) -> coop_mat16x16<f16, A> {
    if (A_ALONG_K) {
        return coopLoadT<coop_mat16x16<f16, A>>(&As[buf * BUF + row * LD_K], LD_K);
    }
    return coopLoad<coop_mat16x16<f16, A>>(&As[buf * BUF + row], LD_MN);
}

// The B fragment of tile columns col .. + 16 in buffer buf.
fn frag_b(buf: u32, col: u32) -> coop_mat16x16<f16, B> {
    if (B_ALONG_K) {
        return coopLoad<coop_mat16x16<f16, B>>(&Bs[buf * BUF + col * LD_K], LD_K);
    }
    return coopLoadT<coop_mat16x16<f16, B>>(&Bs[buf * BUF + col], LD_MN);
}

// Accumulators acc0 .. acc3 (rows r0 .. + 16, columns c0 .. + 64) through this
// subgroup's strip to write4: lane l writes row (l + i * width) / 16, columns
// ((l + i * width) % 16) * 4 .. + 4.
fn flush_strip(z: u32, s: u32, lane: u32, width: u32, r0: u32, c0: u32,
    acc0: coop_mat16x16<f32, C>, acc1: coop_mat16x16<f32, C>,
    acc2: coop_mat16x16<f32, C>, acc3: coop_mat16x16<f32, C>) {
    let at = s * STRIP;
    coopStoreT(acc0, &Cs[at], STRIP_LD);
    coopStoreT(acc1, &Cs[at + 16u], STRIP_LD);
    coopStoreT(acc2, &Cs[at + 32u], STRIP_LD);
    coopStoreT(acc3, &Cs[at + 48u], STRIP_LD);
    workgroupBarrier();
    for (var i = lane; i < 256u; i += width) {
        let q = at + (i / 16u) * STRIP_LD + (i % 16u) * 4u;
        let v = vec4<f32>(Cs[q], Cs[q + 1u], Cs[q + 2u], Cs[q + 3u]) * (1.0 / A_SCALE);
        write4(z, r0 + i / 16u, c0 + (i % 16u) * 4u, v);
    }
    workgroupBarrier();
}

@compute @workgroup_size(128)
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
    let interior = views_whole() && m0 + BM <= p.m && n0 + BN <= p.n
        && ((p.m | p.n | p.k | k_begin) & 3u) == 0u;
    // This subgroup's rows and columns within the tile.
    let sm = (s / 2u) * 64u;
    let sn = (s % 2u) * 64u;

    var c#I#J = coop_mat16x16<f32, C>();
    stash(0u, t, fetch(m0, n0, k_begin, k_end, interior, t));
    workgroupBarrier();

    // No cooperative operation under a branch: they need uniform control flow.
    for (var step = 0u; step < steps; step++) {
        let cur = step % 2u;
        let more = step + 1u < steps;
        var next: Step;
        if (more) {
            next = fetch(m0, n0, k_begin + (step + 1u) * BK, k_end, interior, t);
        }
        let b#J = frag_b(cur, sn + #Ju * 16u);
        let a#I = frag_a(cur, sm + #Iu * 16u);
        c#I#J = coopMultiplyAdd(a#I, b#J, c#I#J);
        if (more) {
            // The other buffers were last read in step - 1, before the barrier.
            stash(1u - cur, t, next);
        }
        workgroupBarrier();
    }

    flush_strip(z, s, lane, width, m0 + sm + #Iu * 16u, n0 + sn, c#I0, c#I1, c#I2, c#I3);
}

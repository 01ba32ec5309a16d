// Tiled GEMM cores: c[z][m, n] = sum over k in split z of A(m, k) * B(k, n), after a
// layout prelude (matmul_nt / _nn / _tn.wgsl: Params, the bindings, how tiles of A
// and B are read and along which axis, how C is written; src/kernels/README.md).
// One template, three cores (source.rs names each one's tags):
//   F32 WIDE SUMS    `Tiled`: 128x128 tiles of C, 8x8 a thread, f32 in workgroup
//                    memory; with A_SUMS (matmul_tn_sums.wgsl) the first column of
//                    tiles also sums A, giving dbias beside dweight.
//   F16 WIDE         `F16`: the same tiling with the operands rounded to f16 as they
//                    enter workgroup memory (A scaled by A_SCALE first, undone on
//                    the way out), every product and sum in f32: an f16 x f16
//                    product is exact in f32, so this gives what a tensor core gives.
//   F32 NARROW SUMS  `Narrow`: 64x128 tiles, 4x8 a thread: twice the workgroups and
//                    fewer registers; with A_SUMS, dbias beside dweight as `Tiled`.
//
// 256 threads walk k in steps of BK = 8 through two shared buffers (load the next
// step while computing this one: one barrier a step). Two 8-deep steps a barrier
// (32 KiB of workgroup memory, twice the loads held in registers) measured slower on
// the H200: the f32 step 52.3 ms against 45.4, the GEMMs 0.38-0.69 of cuBLAS against
// 0.49-0.82 (bench-results/gemm-vs-cublas/2026-12-04-deep-steps). Two 8-deep slices a
// barrier with one slice's loads held at a time (registers as today, 32 KiB wide) lost
// too: the f32 step 50.4 ms against 44.8, the split weight gradients 0.40-0.57 of
// cuBLAS against 0.57-0.81 (.../2026-12-04-two-slices-a-barrier); and `Narrow` as 128
// threads of 8x8 (16 accumulators, 3 vec4 loads a step) took the inputs' gradients
// from 0.77 of cuBLAS to 0.67-0.68 (.../2026-12-04-narrow-128-threads). Thread (tx, ty) keeps rows
// ty*4..+4 (wide: and 64+ty*4..+4) by columns tx*4..+4 and 64+tx*4..+4 of C in vec4
// registers, so its shared reads are a few vec4s a k (16 FMAs each) and a half-warp
// reads 64 contiguous floats. The prelude's load_a fills a 128-row tile over 256
// threads; narrow, threads 0..127 load its 64 rows through the prelude thread index
// that holds them (`a_thread`). Launches whose every tile and step is whole
// (WHOLE_TILES) take the prelude's load_a_fast / load_b_fast instead: one vec4 from
// the operands' vec4 views, where four guarded loads of a float cost the H200 a
// fifth of the loop's speed (benches/gemm_ceiling.rs).
// Shared: [buffer][k][BM / 4] vec4s of A and [buffer][k][128 / 4] of B: 16 KiB wide
// in f32 (WebGPU's default limit), 8 KiB in f16, 12 KiB narrow.

const BM: u32 = {WIDE:128u}{NARROW:64u};
#WIDE const BN: u32 = 128u;
const BK: u32 = 8u;

// Row m (or column n) of step k is As[(buf * BK + k) * (BM / 4) + m / 4][m % 4].
var<workgroup> As: array<vec4<{F32:f32}{F16:f16}>, {WIDE:512}{NARROW:256}>;
var<workgroup> Bs: array<vec4<{F32:f32}{F16:f16}>, 512>;

// A tile read along k (rows of the tile x k): thread t holds row t / 2, k offsets
// (t % 2) * 4 .. + 4, and stores them transposed.
fn put_rows_a(buf: u32, t: u32, v: vec4<{F32:f32}{F16:f16}>) {
    let r = t / 2u;
    let base = (buf * BK + (t % 2u) * 4u) * {WIDE:32u}{NARROW:16u} + r / 4u;
    As[base][r % 4u] = v.x;
    As[base + {WIDE:32u}{NARROW:16u}][r % 4u] = v.y;
    As[base + {WIDE:64u}{NARROW:32u}][r % 4u] = v.z;
    As[base + {WIDE:96u}{NARROW:48u}][r % 4u] = v.w;
}

fn put_rows_b(buf: u32, t: u32, v: vec4<{F32:f32}{F16:f16}>) {
    let r = t / 2u;
    let base = (buf * BK + (t % 2u) * 4u) * 32u + r / 4u;
    Bs[base][r % 4u] = v.x;
    Bs[base + 32u][r % 4u] = v.y;
    Bs[base + 64u][r % 4u] = v.z;
    Bs[base + 96u][r % 4u] = v.w;
}

// A tile read along m / n (k-major: k rows of the tile): thread t holds step
// t / (BM / 4), columns (t % (BM / 4)) * 4 .. + 4, stored as they are.
fn put_cols_a(buf: u32, t: u32, v: vec4<{F32:f32}{F16:f16}>) {
    As[(buf * BK + t / {WIDE:32u}{NARROW:16u}) * {WIDE:32u}{NARROW:16u} + t % {WIDE:32u}{NARROW:16u}] = v;
}

fn put_cols_b(buf: u32, t: u32, v: vec4<{F32:f32}{F16:f16}>) {
    Bs[(buf * BK + t / 32u) * 32u + t % 32u] = v;
}

// Where a prelude's loads go: its layout constants pick the store (constant-folded).
// In f16, A is scaled by A_SCALE (a power of two) before the rounding, B not.
fn put_a(buf: u32, t: u32, loaded: vec4<f32>) {
    let v = prologue_a(loaded);
#F16     let h = vec4<f16>(v * A_SCALE);
    if (A_ALONG_K) { put_rows_a(buf, t, {F32:v}{F16:h}); } else { put_cols_a(buf, t, {F32:v}{F16:h}); }
}

// B's loads are BVec: vec4<f16> where the F16 core reads an f16 copy of the weights.
fn put_b(buf: u32, t: u32, loaded: BVec) {
    let v = prologue_b(loaded);
#F16     let h = vec4<f16>(v);
    if (B_ALONG_K) { put_rows_b(buf, t, {F32:v}{F16:h}); } else { put_cols_b(buf, t, {F32:v}{F16:h}); }
}

// The prelude thread index whose 4 floats of A are the ones thread u (< 128) of a
// 64-row tile stores: along k, thread t holds row t / 2 (rows 0..63 for t < 128);
// k-major, thread t holds step t / 32, columns (t % 32) * 4, and u takes step
// u / 16, columns (u % 16) * 4.
#NARROW fn a_thread(u: u32) -> u32 {
#NARROW     if (A_ALONG_K) { return u; }
#NARROW     return (u / 16u) * 32u + u % 16u;
#NARROW }

// The 4 floats of thread t's slot in the step at k0: one unguarded vec4 where the
// launch has WHOLE_TILES (a literal in the launched source: the compiler keeps one
// of the two paths; a per-tile test that kept both slowed the H200's GEMMs), else
// the prelude's guarded loads.
fn fetch_a(m0: u32, k0: u32, k_end: u32, t: u32) -> vec4<f32> {
    if (fused(p.flags, WHOLE_TILES)) { return load_a_fast(m0, k0, t); }
    return load_a(m0, k0, k_end, t);
}

fn fetch_b(n0: u32, k0: u32, k_end: u32, t: u32) -> BVec {
    if (fused(p.flags, WHOLE_TILES)) { return load_b_fast(n0, k0, t); }
    return BVec(load_b(n0, k0, k_end, t));
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let m0 = wg.y * BM;
    let n0 = wg.x * {WIDE:BN}{NARROW:128u};
    let z = wg.z;
    let k_begin = z * p.k_chunk;
    let k_end = min(k_begin + p.k_chunk, p.k);
    let steps = (k_end - k_begin + BK - 1u) / BK;
    let tx = t % 16u;
    let ty = t / 16u;
    // Warps 0..3 load A (a uniform branch for warps of 32 or more).
#NARROW     let loads_a = t < 128u;
#NARROW     let ta = a_thread(t % 128u);

    var c00 = vec4<f32>(0.0); var c01 = vec4<f32>(0.0);
    var c10 = vec4<f32>(0.0); var c11 = vec4<f32>(0.0);
    var c20 = vec4<f32>(0.0); var c21 = vec4<f32>(0.0);
    var c30 = vec4<f32>(0.0); var c31 = vec4<f32>(0.0);
#WIDE     var c40 = vec4<f32>(0.0); var c41 = vec4<f32>(0.0);
#WIDE     var c50 = vec4<f32>(0.0); var c51 = vec4<f32>(0.0);
#WIDE     var c60 = vec4<f32>(0.0); var c61 = vec4<f32>(0.0);
#WIDE     var c70 = vec4<f32>(0.0); var c71 = vec4<f32>(0.0);

    // A_SUMS: the first column of tiles also sums A over the split (each thread the
    // 4 columns it loads, over its rows t / (BM / 4), + 8, ...; a uniform branch).
#SUMS     let a_sums = A_SUMS && wg.x == 0u;
#SUMS     var asum = vec4<f32>(0.0);
#WIDE     var ra = fetch_a(m0, k_begin, k_end, t);
#WIDE     var rb = fetch_b(n0, k_begin, k_end, t);
#WIDE     put_a(0u, t, ra);
#WIDE     put_b(0u, t, rb);
#NARROW     var ra = vec4<f32>(0.0);
#NARROW     if (loads_a) {
#NARROW         ra = fetch_a(m0, k_begin, k_end, ta);
#NARROW         put_a(0u, t, ra);
#NARROW     }
#NARROW     var rb = fetch_b(n0, k_begin, k_end, t);
#NARROW     put_b(0u, t, rb);
    // Narrow: threads past 128 load no A, and their ra stays 0.
#SUMS     if (a_sums) { asum += ra; }
    workgroupBarrier();

    for (var s = 0u; s < steps; s++) {
        let cur = s % 2u;
        let more = s + 1u < steps;
        if (more) {
            // Issue the next step's global loads before this step's math.
#WIDE             ra = fetch_a(m0, k_begin + (s + 1u) * BK, k_end, t);
#NARROW             if (loads_a) { ra = fetch_a(m0, k_begin + (s + 1u) * BK, k_end, ta); }
            rb = fetch_b(n0, k_begin + (s + 1u) * BK, k_end, t);
        }
        for (var kk = 0u; kk < BK; kk++) {
#NARROW             let a0 = As[(cur * BK + kk) * 16u + ty];
            let base = (cur * BK + kk) * 32u;
#WIDE             let a0 = {F16:vec4<f32>(}As[base + ty]{F16:)};
#WIDE             let a1 = {F16:vec4<f32>(}As[base + ty + 16u]{F16:)};
            let b0 = {F16:vec4<f32>(}Bs[base + tx]{F16:)};
            let b1 = {F16:vec4<f32>(}Bs[base + tx + 16u]{F16:)};
            c00 += a0.x * b0; c01 += a0.x * b1;
            c10 += a0.y * b0; c11 += a0.y * b1;
            c20 += a0.z * b0; c21 += a0.z * b1;
            c30 += a0.w * b0; c31 += a0.w * b1;
#WIDE             c40 += a1.x * b0; c41 += a1.x * b1;
#WIDE             c50 += a1.y * b0; c51 += a1.y * b1;
#WIDE             c60 += a1.z * b0; c61 += a1.z * b1;
#WIDE             c70 += a1.w * b0; c71 += a1.w * b1;
        }
        if (more) {
            // The sums wait for the loads here, after the math: added as the loads
            // were issued, they stalled the first column's workgroups on every step.
#SUMS             if (a_sums) { asum += ra; }
            // The other buffer was last read in step s - 1, before the barrier.
#WIDE             put_a(1u - cur, t, ra);
#NARROW             if (loads_a) { put_a(1u - cur, t, ra); }
            put_b(1u - cur, t, rb);
        }
        workgroupBarrier();
    }

    // The 8 threads of each 4 columns (one a step) add their sums of A through As
    // (free after the loop's last barrier), in a fixed order: thread t's columns are
    // t % (BM / 4), in narrow too (`a_thread`).
#SUMS     if (a_sums) {
#SUMS         As[t] = asum;
#SUMS         workgroupBarrier();
#SUMS         if (t < BM / 4u) {
#SUMS             var s = As[t];
#SUMS             for (var q = 1u; q < 8u; q++) { s += As[t + (BM / 4u) * q]; }
#SUMS             write_a_sums(z, m0 + t * 4u, s);
#SUMS         }
#SUMS     }

#F16     let u = 1.0 / A_SCALE;
    let r0 = m0 + ty * 4u;
#WIDE     let r1 = m0 + 64u + ty * 4u;
    let col0 = n0 + tx * 4u;
    let col1 = n0 + 64u + tx * 4u;
    write4(z, r0, col0, c00{F16: * u}); write4(z, r0, col1, c01{F16: * u});
    write4(z, r0 + 1u, col0, c10{F16: * u}); write4(z, r0 + 1u, col1, c11{F16: * u});
    write4(z, r0 + 2u, col0, c20{F16: * u}); write4(z, r0 + 2u, col1, c21{F16: * u});
    write4(z, r0 + 3u, col0, c30{F16: * u}); write4(z, r0 + 3u, col1, c31{F16: * u});
#WIDE     write4(z, r1, col0, c40{F16: * u}); write4(z, r1, col1, c41{F16: * u});
#WIDE     write4(z, r1 + 1u, col0, c50{F16: * u}); write4(z, r1 + 1u, col1, c51{F16: * u});
#WIDE     write4(z, r1 + 2u, col0, c60{F16: * u}); write4(z, r1 + 2u, col1, c61{F16: * u});
#WIDE     write4(z, r1 + 3u, col0, c70{F16: * u}); write4(z, r1 + 3u, col1, c71{F16: * u});
}

// GEMM for CPU adapters (lavapipe, SwiftShader, WARP): c[z][m, n] = sum over k in
// split z of A(m, k) * B(k, n), after the same preludes as matmul_tiled.wgsl.
//
// CPU implementations run a workgroup's invocations as the SIMD lanes of one CPU
// thread: a barrier is a switch between lanes' coroutines, workgroup memory buys
// nothing over the CPU's caches, and a load is one load a lane. So this kernel has
// no workgroup memory and no barriers. Each of 8 lanes keeps ROWS x 8 outputs (8
// consecutive columns), and a workgroup computes ROWS rows by 64 columns. A step of
// k loads the lane's 8 values of B (a gather across lanes) and one value of A a row
// (the same address on every lane), for 8 * ROWS multiply-adds.
//
// source.rs writes a line holding `#R` out once a row (`#R` -> 0 .. ROWS-1) and
// prepends `const ROWS`: SwiftShader's JIT (Subzero, in Chromium) keeps neither
// loops unrolled nor arrays in registers, and an array indexed by a loop counter
// costs it a memory access a lane (BENCHMARKS.md: CPU adapters). Rows past
// the edges are clamped to the last row / column (loads stay in bounds without
// branches) and write4 drops those results.

const LANES: u32 = 8u;

@compute @workgroup_size(8)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lane: u32) {
    let z = wg.z;
    let k_begin = z * p.k_chunk;
    let k_end = min(k_begin + p.k_chunk, p.k);
    let r0 = wg.y * ROWS;
    let n0 = (wg.x * LANES + lane) * 8u;
    let last_r = p.m - 1u;
    let last_n = p.n - 1u;
    let nb0 = min(n0, last_n);
    let nb1 = min(n0 + 1u, last_n);
    let nb2 = min(n0 + 2u, last_n);
    let nb3 = min(n0 + 3u, last_n);
    let nb4 = min(n0 + 4u, last_n);
    let nb5 = min(n0 + 5u, last_n);
    let nb6 = min(n0 + 6u, last_n);
    let nb7 = min(n0 + 7u, last_n);
    let ra#R = min(r0 + #Ru, last_r);
    var lo#R = vec4<f32>(0.0);
    var hi#R = vec4<f32>(0.0);
    for (var k = k_begin; k < k_end; k++) {
        let b_lo = vec4<f32>(b_at(k, nb0), b_at(k, nb1), b_at(k, nb2), b_at(k, nb3));
        let b_hi = vec4<f32>(b_at(k, nb4), b_at(k, nb5), b_at(k, nb6), b_at(k, nb7));
        let a#R = a_at(ra#R, k); lo#R += a#R * b_lo; hi#R += a#R * b_hi;
    }
    write4(z, r0 + #Ru, n0, lo#R); write4(z, r0 + #Ru, n0 + 4u, hi#R);
}

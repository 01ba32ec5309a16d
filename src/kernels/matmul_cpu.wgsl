// GEMM for CPU adapters (lavapipe, SwiftShader, WARP): c[z][m, n] = sum over k in
// split z of A(m, k) * B(k, n), after the same preludes as matmul.wgsl.
//
// CPU implementations run a workgroup's invocations as the SIMD lanes of one CPU
// thread: a barrier is a switch between lanes' coroutines, workgroup memory buys
// nothing over the CPU's caches, and a load is one load a lane. So this kernel has
// no workgroup memory and no barriers, and each lane keeps an 8x8 block of C in
// registers: 16 loads for 64 multiply-adds a step of k. A workgroup of 8 lanes
// computes 8 rows by 64 columns.
// Indices past the edges are clamped to the last row / column (loads stay in bounds
// without branches) and write4 drops those results.

const RM: u32 = 8u;
const LANES: u32 = 8u;

fn clamp8(first: u32, last: u32) -> array<u32, 8> {
    return array<u32, 8>(
        min(first, last), min(first + 1u, last), min(first + 2u, last), min(first + 3u, last),
        min(first + 4u, last), min(first + 5u, last), min(first + 6u, last), min(first + 7u, last),
    );
}

@compute @workgroup_size(8)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lane: u32) {
    let z = wg.z;
    let k_begin = z * p.k_chunk;
    let k_end = min(k_begin + p.k_chunk, p.k);
    let r0 = wg.y * RM;
    let n0 = (wg.x * LANES + lane) * 8u;
    let ra = clamp8(r0, p.m - 1u);
    let nb = clamp8(n0, p.n - 1u);
    var c: array<vec4<f32>, 16>;
    for (var i = 0u; i < 16u; i++) {
        c[i] = vec4<f32>(0.0);
    }
    var k = k_begin;
    if (CPU_DOT4 && A_ALONG_K && B_ALONG_K) {
        // The forward (A·Bᵀ) reads both operands along k: 4 steps of k at once, as
        // dot products of 4 consecutive floats of each (matmul.rs prepends CPU_DOT4:
        // on for SwiftShader, whose forward this speeds up, off for lavapipe).
        for (; k + 4u <= k_end; k += 4u) {
            var b4: array<vec4<f32>, 8>;
            for (var j = 0u; j < 8u; j++) {
                b4[j] = vec4<f32>(b_at(k, nb[j]), b_at(k + 1u, nb[j]), b_at(k + 2u, nb[j]), b_at(k + 3u, nb[j]));
            }
            for (var i = 0u; i < 8u; i++) {
                let a = vec4<f32>(a_at(ra[i], k), a_at(ra[i], k + 1u), a_at(ra[i], k + 2u), a_at(ra[i], k + 3u));
                c[2u * i] += vec4<f32>(dot(a, b4[0]), dot(a, b4[1]), dot(a, b4[2]), dot(a, b4[3]));
                c[2u * i + 1u] += vec4<f32>(dot(a, b4[4]), dot(a, b4[5]), dot(a, b4[6]), dot(a, b4[7]));
            }
        }
    }
    for (; k < k_end; k++) {
        let b0 = vec4<f32>(b_at(k, nb[0]), b_at(k, nb[1]), b_at(k, nb[2]), b_at(k, nb[3]));
        let b1 = vec4<f32>(b_at(k, nb[4]), b_at(k, nb[5]), b_at(k, nb[6]), b_at(k, nb[7]));
        for (var i = 0u; i < 8u; i++) {
            let a = a_at(ra[i], k);
            c[2u * i] += a * b0;
            c[2u * i + 1u] += a * b1;
        }
    }
    for (var i = 0u; i < 8u; i++) {
        write4(z, r0 + i, n0, c[2u * i]);
        write4(z, r0 + i, n0 + 4u, c[2u * i + 1u]);
    }
}

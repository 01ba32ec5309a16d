// dweight = doutᵀ · inp, Aᵀ·B: dweight[j, i] = sum_r dout[r, j] * inp[r, i], split
// over r: split z sums rows z*k_chunk .. and writes its own slice of `part`
// ([splits, n, k]); matmul_reduce.wgsl adds the slices in a fixed order.
// With FUSE_GELU_INP, inp goes through GELU as it is stored (as in the forward).
// GEMM m = n (dweight's rows), n = k, k = rows.
struct Params { m: u32, n: u32, k: u32, k_chunk: u32, flags: u32, seed: u32, threshold: u32, scale: f32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> dout: array<f32>;
@group(0) @binding(2) var<storage, read> inp: array<f32>;
@group(0) @binding(3) var<storage, read_write> part: array<f32>;
// VEC4 (the tensor-core cores): bindings 4 and 5 hold the same buffers as 1 and 2,
// read as vec4s: one 16-byte load where four loads of a float would issue four (the
// driver does not merge them), for the unguarded interior steps below.
#VEC4 @group(0) @binding(4) var<storage, read> dout4: array<vec4<f32>>;
#VEC4 @group(0) @binding(5) var<storage, read> inp4: array<vec4<f32>>;
#VEC4 // Whether the views hold the whole operands (A is m x k, B k x n): a stand-in
#VEC4 // bound in their place (where a dispatch binds everything read_write, or an operand
#VEC4 // is under 16 bytes) does not, and the cores then take the guarded loads.
#VEC4 fn views_whole() -> bool {
#VEC4     return arrayLength(&dout4) * 4u >= p.m * p.k && arrayLength(&inp4) * 4u >= p.k * p.n;
#VEC4 }

// dout read along its columns j (the GEMM's m), one row r a step.
fn load_a(m0: u32, k0: u32, k_end: u32, t: u32) -> vec4<f32> {
    let r = k0 + t / 32u;
    let j = m0 + (t % 32u) * 4u;
    var v = vec4<f32>(0.0);
    if (r < k_end) {
        let base = r * p.m + j;
        if (j < p.m) { v.x = dout[base]; }
        if (j + 1u < p.m) { v.y = dout[base + 1u]; }
        if (j + 2u < p.m) { v.z = dout[base + 2u]; }
        if (j + 3u < p.m) { v.w = dout[base + 3u]; }
    }
    return v;
}

const A_ALONG_K: bool = false;

// load_a / load_b without the bounds checks, for the tensor-core cores' interior steps
// (the 128 x 8 tile inside m, n and the split; m, n, k and k0 multiples of 4, so the
// 4 floats are one vec4).
#VEC4 fn load_a_fast(m0: u32, k0: u32, t: u32) -> vec4<f32> {
#VEC4     return dout4[((k0 + t / 32u) * p.m + m0 + (t % 32u) * 4u) / 4u];
#VEC4 }

fn load_b(n0: u32, k0: u32, k_end: u32, t: u32) -> vec4<f32> {
    let r = k0 + t / 32u;
    let i = n0 + (t % 32u) * 4u;
    var v = vec4<f32>(0.0);
    if (r < k_end) {
        let base = r * p.n + i;
        if (i < p.n) { v.x = inp[base]; }
        if (i + 1u < p.n) { v.y = inp[base + 1u]; }
        if (i + 2u < p.n) { v.z = inp[base + 2u]; }
        if (i + 3u < p.n) { v.w = inp[base + 3u]; }
    }
    return v;
}

const B_ALONG_K: bool = false;

// What the cores apply to a load as they store it, after the step's math (see
// matmul_nt.wgsl): GELU on B with FUSE_GELU_INP (BVec is vec4<f32> here). Padding
// stays 0: gelu(0) = 0.
fn prologue_a(v: vec4<f32>) -> vec4<f32> { return v; }
fn prologue_b(v: BVec) -> BVec {
    if (fused(p.flags, FUSE_GELU_INP)) { return gelu4(v); }
    return v;
}

#VEC4 // B is an activation: BVec is vec4<f32> here.
#VEC4 fn load_b_fast(n0: u32, k0: u32, t: u32) -> BVec {
#VEC4     return inp4[((k0 + t / 32u) * p.n + n0 + (t % 32u) * 4u) / 4u];
#VEC4 }

// A(m, k) and B(k, n), unguarded: for matmul_cpu.wgsl, which clamps its indices.
// No GELU prologue here: that core gets GELU's output in a buffer instead
// (`MatmulVariant::gelu_on_load`): even an untaken branch in its inner loop slowed
// lavapipe's tiny step (BENCHMARKS figures in the commit).
fn a_at(m: u32, k: u32) -> f32 { return dout[k * p.m + m]; }
fn b_at(k: u32, n: u32) -> f32 { return inp[k * p.n + n]; }

fn write4(z: u32, j: u32, i: u32, v: vec4<f32>) {
    if (j >= p.m) { return; }
    let base = (z * p.m + j) * p.n + i;
    for (var c = 0u; c < 4u; c++) {
        if (i + c < p.n) { part[base + c] = v[c]; }
    }
}
// write4 in two parts, as in matmul_nt.wgsl: dweight's output has no epilogue.
fn epilogue_in(j: u32, i: u32) -> vec4<f32> { return vec4<f32>(0.0); }
fn write4_with(z: u32, j: u32, i: u32, v: vec4<f32>, e: vec4<f32>) { write4(z, j, i, v); }


// dinp = dout · weight, A·B: dinp[r, i] = sum_j dout[r, j] * weight[j, i], times
// gelu'(aux[r, i]) with FUSE_GELU_GRAD (aux: the pre-GELU input of a forward that
// fused GELU_INP, so dinp is the gradient before the GELU).
// GEMM m = rows, n = k (dinp's columns), k = n (dout's columns).
struct Params { m: u32, n: u32, k: u32, k_chunk: u32, flags: u32, seed: u32, threshold: u32, scale: f32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> dout: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
// OUT4 (launches with `OUT_VEC4`): dinp and aux as vec4s, see write4.
@group(0) @binding(3) var<storage, read_write> dinp: array<{OUT1:f32}{OUT4:vec4<f32>}>;
// Bound to `dout` again without FUSE_GELU_GRAD.
@group(0) @binding(4) var<storage, read> aux: array<{OUT1:f32}{OUT4:vec4<f32>}>;
// VEC4 (the tensor-core cores): bindings 5 and 6 hold the same buffers as 1 and 2,
// read as vec4s: one 16-byte load where four loads of a float would issue four (the
// driver does not merge them), for the unguarded interior steps below. Binding 6
// may instead hold the weight's f16 copy (BVec = vec4<f16>: source.rs, Views).
#VEC4 @group(0) @binding(5) var<storage, read> dout4: array<vec4<f32>>;
#VEC4 @group(0) @binding(6) var<storage, read> weight4: array<BVec>;
#VEC4 // Whether the views hold the whole operands (A is m x k, B k x n): a stand-in
#VEC4 // bound in their place (where a dispatch binds everything read_write, or an operand
#VEC4 // is under 16 bytes) does not, and the cores then take the guarded loads.
#VEC4 fn views_whole() -> bool {
#VEC4     return arrayLength(&dout4) * 4u >= p.m * p.k && arrayLength(&weight4) * 4u >= p.k * p.n;
#VEC4 }

// dout rows, read along the reduction.
fn load_a(m0: u32, k0: u32, k_end: u32, t: u32) -> vec4<f32> {
    let r = m0 + t / 2u;
    let k = k0 + (t % 2u) * 4u;
    var v = vec4<f32>(0.0);
    if (r < p.m) {
        let base = r * p.k + k;
        if (k < k_end) { v.x = dout[base]; }
        if (k + 1u < k_end) { v.y = dout[base + 1u]; }
        if (k + 2u < k_end) { v.z = dout[base + 2u]; }
        if (k + 3u < k_end) { v.w = dout[base + 3u]; }
    }
    return v;
}

const A_ALONG_K: bool = true;

// the tiled core's sums of A (matmul_tn_sums.wgsl): none here.
const A_SUMS: bool = false;
fn write_a_sums(z: u32, j: u32, v: vec4<f32>) {}

// load_a / load_b without the bounds checks, for the tensor-core cores' interior steps
// (the 128 x 8 tile inside m, n and the split; m, n, k and k0 multiples of 4, so the
// 4 floats are one vec4).
#VEC4 fn load_a_fast(m0: u32, k0: u32, t: u32) -> vec4<f32> {
#VEC4     return dout4[((m0 + t / 2u) * p.k + k0 + (t % 2u) * 4u) / 4u];
#VEC4 }

// weight rows j are the reduction index; read along dinp's columns.
fn load_b(n0: u32, k0: u32, k_end: u32, t: u32) -> vec4<f32> {
    let k = k0 + t / 32u;
    let i = n0 + (t % 32u) * 4u;
    var v = vec4<f32>(0.0);
    if (k < k_end) {
        let base = k * p.n + i;
        if (i < p.n) { v.x = weight[base]; }
        if (i + 1u < p.n) { v.y = weight[base + 1u]; }
        if (i + 2u < p.n) { v.z = weight[base + 2u]; }
        if (i + 3u < p.n) { v.w = weight[base + 3u]; }
    }
    return v;
}

const B_ALONG_K: bool = false;

// What the cores apply to a load as they store it (see matmul_nt.wgsl): nothing here.
fn prologue_a(v: vec4<f32>) -> vec4<f32> { return v; }
fn prologue_b(v: BVec) -> BVec { return v; }

#VEC4 fn load_b_fast(n0: u32, k0: u32, t: u32) -> BVec {
#VEC4     return weight4[((k0 + t / 32u) * p.n + n0 + (t % 32u) * 4u) / 4u];
#VEC4 }

// A(m, k) and B(k, n), unguarded: for matmul_cpu.wgsl, which clamps its indices.
fn a_at(m: u32, k: u32) -> f32 { return dout[m * p.k + k]; }
fn b_at(k: u32, n: u32) -> f32 { return weight[k * p.n + n]; }

// write4 in two parts, as in matmul_nt.wgsl: epilogue_in loads the pre-GELU
// activations (aux, with FUSE_GELU_GRAD), write4_with applies GELU's gradient.
#OUT1 fn epilogue_in(r: u32, i: u32) -> vec4<f32> {
#OUT1     var e = vec4<f32>(0.0);
#OUT1     if (fused(p.flags, FUSE_GELU_GRAD) && r < p.m) {
#OUT1         for (var c = 0u; c < 4u; c++) {
#OUT1             if (i + c < p.n) { e[c] = aux[r * p.n + i + c]; }
#OUT1         }
#OUT1     }
#OUT1     return e;
#OUT1 }
#OUT1 fn write4_with(z: u32, r: u32, i: u32, v: vec4<f32>, e: vec4<f32>) {
#OUT1     if (r >= p.m) { return; }
#OUT1     // Split-K: split z writes its own slice of `dinp` ([splits, m, n]), without the
#OUT1     // epilogue (matmul_reduce.wgsl applies it to the sum).
#OUT1     let base = (z * p.m + r) * p.n + i;
#OUT1     let grad = fused(p.flags, FUSE_GELU_GRAD);
#OUT1     for (var c = 0u; c < 4u; c++) {
#OUT1         if (i + c < p.n) {
#OUT1             var w = v[c];
#OUT1             if (grad) { w *= gelu_grad(e[c]); }
#OUT1             dinp[base + c] = w;
#OUT1         }
#OUT1     }
#OUT1 }

// OUT_VEC4: n is a multiple of 4 and every buffer is bound whole: a thread's 4
// columns are one 16-byte load of aux and one store (as in matmul_nt.wgsl).
#OUT4 fn epilogue_in(r: u32, i: u32) -> vec4<f32> {
#OUT4     if (!fused(p.flags, FUSE_GELU_GRAD) || r >= p.m || i >= p.n) { return vec4<f32>(0.0); }
#OUT4     return aux[(r * p.n + i) / 4u];
#OUT4 }
#OUT4 fn write4_with(z: u32, r: u32, i: u32, v: vec4<f32>, e: vec4<f32>) {
#OUT4     if (r >= p.m || i >= p.n) { return; }
#OUT4     var w = v;
#OUT4     if (fused(p.flags, FUSE_GELU_GRAD)) { w *= gelu_grad4(e); }
#OUT4     dinp[((z * p.m + r) * p.n + i) / 4u] = w;
#OUT4 }

fn write4(z: u32, r: u32, i: u32, v: vec4<f32>) { write4_with(z, r, i, v, epilogue_in(r, i)); }

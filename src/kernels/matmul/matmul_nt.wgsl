// Forward, A·Bᵀ: out[r, j] = sum_i act(inp[r, i]) * weight[j, i] + bias[j], act =
// GELU with FUSE_GELU_INP (the MLP's c_proj reads c_fc's pre-GELU output), else none;
// with FUSE_DROPOUT and FUSE_RESIDUAL, out = resid + dropout(that): a residual
// branch's end (matmul_fuse.wgsl).
// GEMM m = rows, n = n, k = k; both operands are read along k.
struct Params { m: u32, n: u32, k: u32, k_chunk: u32, flags: u32, seed: u32, threshold: u32, scale: f32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> inp: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
// Bound to `inp` again when there is no bias.
// OUT4 (launches with `OUT_VEC4`): bias, out and resid as vec4s, see write4.
@group(0) @binding(3) var<storage, read> bias: array<{OUT1:f32}{OUT4:vec4<f32>}>;
@group(0) @binding(4) var<storage, read_write> out: array<{OUT1:f32}{OUT4:vec4<f32>}>;
// Bound to `inp` again without FUSE_RESIDUAL.
@group(0) @binding(5) var<storage, read> resid: array<{OUT1:f32}{OUT4:vec4<f32>}>;
// VEC4 (the tensor-core cores): bindings 6 and 7 hold the same buffers as 1 and 2,
// read as vec4s: one 16-byte load where four loads of a float would issue four (the
// driver does not merge them), for the unguarded interior steps below. Binding 7
// may instead hold the weight's f16 copy (BVec = vec4<f16>: source.rs, Views).
#VEC4 @group(0) @binding(6) var<storage, read> inp4: array<vec4<f32>>;
#VEC4 @group(0) @binding(7) var<storage, read> weight4: array<BVec>;
#VEC4 // Whether the views hold the whole operands (A is m x k, B k x n): a stand-in
#VEC4 // bound in their place (where a dispatch binds everything read_write, or an operand
#VEC4 // is under 16 bytes) does not, and the cores then take the guarded loads.
#VEC4 fn views_whole() -> bool {
#VEC4     return arrayLength(&inp4) * 4u >= p.m * p.k && arrayLength(&weight4) * 4u >= p.k * p.n;
#VEC4 }

fn load_a(m0: u32, k0: u32, k_end: u32, t: u32) -> vec4<f32> {
    let r = m0 + t / 2u;
    let k = k0 + (t % 2u) * 4u;
    var v = vec4<f32>(0.0);
    if (r < p.m) {
        let base = r * p.k + k;
        if (k < k_end) { v.x = inp[base]; }
        if (k + 1u < k_end) { v.y = inp[base + 1u]; }
        if (k + 2u < k_end) { v.z = inp[base + 2u]; }
        if (k + 3u < k_end) { v.w = inp[base + 3u]; }
    }
    return v;
}

// What the cores apply to a load as they store it, after the step's math (applied as
// the loads were issued, it made each thread wait for them before the math): GELU
// on A with FUSE_GELU_INP. Padding stays 0: gelu(0) = 0.
fn prologue_a(v: vec4<f32>) -> vec4<f32> {
    if (fused(p.flags, FUSE_GELU_INP)) { return gelu4(v); }
    return v;
}
fn prologue_b(v: BVec) -> BVec { return v; }

// Both operands are read along k (rows of A, rows of `weight`).
const A_ALONG_K: bool = true;

// the tiled core's sums of A (matmul_tn_sums.wgsl): none here.
const A_SUMS: bool = false;
fn write_a_sums(z: u32, j: u32, v: vec4<f32>) {}

// load_a / load_b without the bounds checks, for the tensor-core cores' interior steps
// (the 128 x 8 tile inside m, n and the split; m, n, k and k0 multiples of 4, so the
// 4 floats are one vec4).
#VEC4 fn load_a_fast(m0: u32, k0: u32, t: u32) -> vec4<f32> {
#VEC4     return inp4[((m0 + t / 2u) * p.k + k0 + (t % 2u) * 4u) / 4u];
#VEC4 }

fn load_b(n0: u32, k0: u32, k_end: u32, t: u32) -> vec4<f32> {
    let j = n0 + t / 2u;
    let k = k0 + (t % 2u) * 4u;
    var v = vec4<f32>(0.0);
    if (j < p.n) {
        let base = j * p.k + k;
        if (k < k_end) { v.x = weight[base]; }
        if (k + 1u < k_end) { v.y = weight[base + 1u]; }
        if (k + 2u < k_end) { v.z = weight[base + 2u]; }
        if (k + 3u < k_end) { v.w = weight[base + 3u]; }
    }
    return v;
}

const B_ALONG_K: bool = true;

#VEC4 fn load_b_fast(n0: u32, k0: u32, t: u32) -> BVec {
#VEC4     return weight4[((n0 + t / 2u) * p.k + k0 + (t % 2u) * 4u) / 4u];
#VEC4 }

// A(m, k) and B(k, n), unguarded: for matmul_cpu.wgsl, which clamps its indices.
// No GELU prologue here: that core gets GELU's output in a buffer instead
// (`MatmulVariant::gelu_on_load`): even an untaken branch in its inner loop slowed
// lavapipe's tiny step (BENCHMARKS figures in the commit).
fn a_at(m: u32, k: u32) -> f32 { return inp[m * p.k + k]; }
fn b_at(k: u32, n: u32) -> f32 { return weight[n * p.k + k]; }

// write4 in two parts, so that a core can issue the loads of all its outputs'
// epilogues before its first write (matmul_coop.wgsl's staging, whose subgroup barriers
// keep the driver from moving a write's loads ahead of the write before it):
// epilogue_in(r, j) loads what the epilogue of outputs (r, j .. j + 4) reads from
// memory (resid, with FUSE_RESIDUAL), write4_with applies the epilogue given it.
#OUT1 fn epilogue_in(r: u32, j: u32) -> vec4<f32> {
#OUT1     var e = vec4<f32>(0.0);
#OUT1     if (fused(p.flags, FUSE_RESIDUAL) && r < p.m) {
#OUT1         for (var i = 0u; i < 4u; i++) {
#OUT1             if (j + i < p.n) { e[i] = resid[r * p.n + j + i]; }
#OUT1         }
#OUT1     }
#OUT1     return e;
#OUT1 }
#OUT1 fn write4_with(z: u32, r: u32, j: u32, v: vec4<f32>, e: vec4<f32>) {
#OUT1     if (r >= p.m) { return; }
#OUT1     // Split-K: split z writes its own slice of `out` ([splits, m, n]), without the
#OUT1     // epilogue (matmul_reduce.wgsl applies it to the sum).
#OUT1     let base = (z * p.m + r) * p.n + j;
#OUT1     for (var i = 0u; i < 4u; i++) {
#OUT1         if (j + i < p.n) {
#OUT1             let at = r * p.n + j + i;
#OUT1             var w = v[i];
#OUT1             if (fused(p.flags, FUSE_BIAS)) { w += bias[j + i]; }
#OUT1             if (fused(p.flags, FUSE_DROPOUT)) { w = dropout_at(w, at, p.seed, p.threshold, p.scale); }
#OUT1             if (fused(p.flags, FUSE_RESIDUAL)) { w = e[i] + w; }
#OUT1             out[base + i] = w;
#OUT1         }
#OUT1     }
#OUT1 }

// OUT_VEC4: n is a multiple of 4 and every buffer is bound whole, so a thread's 4
// columns (j a multiple of 4) are one 16-byte load of bias and resid and one store:
// four stores of a float are four store instructions on the H200's driver.
#OUT4 fn epilogue_in(r: u32, j: u32) -> vec4<f32> {
#OUT4     if (!fused(p.flags, FUSE_RESIDUAL) || r >= p.m || j >= p.n) { return vec4<f32>(0.0); }
#OUT4     return resid[(r * p.n + j) / 4u];
#OUT4 }
#OUT4 fn write4_with(z: u32, r: u32, j: u32, v: vec4<f32>, e: vec4<f32>) {
#OUT4     if (r >= p.m || j >= p.n) { return; }
#OUT4     let at = r * p.n + j;
#OUT4     var w = v;
#OUT4     if (fused(p.flags, FUSE_BIAS)) { w += bias[j / 4u]; }
#OUT4     if (fused(p.flags, FUSE_DROPOUT)) { w = dropout4_at(w, at, p.seed, p.threshold, p.scale); }
#OUT4     if (fused(p.flags, FUSE_RESIDUAL)) { w = e + w; }
#OUT4     out[((z * p.m + r) * p.n + j) / 4u] = w;
#OUT4 }

fn write4(z: u32, r: u32, j: u32, v: vec4<f32>) { write4_with(z, r, j, v, epilogue_in(r, j)); }

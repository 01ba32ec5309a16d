// Helpers shared by the kernels, joined in front of each kernel's own source when
// it is loaded (`with_prelude!` in kernels/mod.rs). A kernel joined with it declares
// `const WG: u32`, the workgroup size of its entry points (a power of two).

// Index of this thread in a 1-D launch over `grid_1d(n, WG)`, which spreads
// workgroups past WebGPU's 65535 a dimension onto y.
fn linear(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * WG;
}

var<workgroup> red: array<f32, WG>;

// ---- block reductions: shared memory (prelude_subgroups.wgsl replaces this part
// where the device has subgroups; gpu::source_for chooses) ----

// Sum of `x` over the workgroup, returned to every thread, added in a fixed order.
// Called in uniform control flow; leaves `red` free for the next call.
fn block_sum(x: f32, lid: u32) -> f32 {
    red[lid] = x;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            red[lid] += red[lid + s];
        }
        workgroupBarrier();
    }
    let total = red[0];
    workgroupBarrier();
    return total;
}

// Max of `x` over the workgroup, like block_sum.
fn block_max(x: f32, lid: u32) -> f32 {
    red[lid] = x;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            red[lid] = max(red[lid], red[lid + s]);
        }
        workgroupBarrier();
    }
    let total = red[0];
    workgroupBarrier();
    return total;
}

// ---- the kernel's own source ----

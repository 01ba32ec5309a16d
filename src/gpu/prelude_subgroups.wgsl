// ---- block reductions: subgroups (in place of prelude.wgsl's shared-memory ones
// where the device has subgroups; gpu::source_for chooses) ----
//
// Each subgroup reduces its lanes in hardware, its first lane stores the result in
// `red`, and every thread combines the subgroups' results in subgroup order: two
// barriers instead of log2(WG) + 2, and the same order on every run of one device.
// Assumed: subgroups are runs of consecutive `lid` in a 1-D workgroup, as drivers
// lay them out; no API promises it, so op parity checks it on each device it runs
// on. The width may be any the device picks between its minimum and maximum: it is
// counted here, and the context uses this prelude only where the maximum is at most
// gpu::MAX_SUBGROUP_WIDTH (128), which divides every WG that reduces.

// Sum of `x` over the workgroup, returned to every thread, added in a fixed order.
// Called in uniform control flow; leaves `red` free for the next call.
fn block_sum(x: f32, lid: u32) -> f32 {
    // Every lane is active here (uniform control flow), so this counts the subgroup.
    let width = subgroupAdd(1u);
    let part = subgroupAdd(x);
    if (lid % width == 0u) {
        red[lid / width] = part;
    }
    workgroupBarrier();
    var total = red[0];
    for (var i = 1u; i < WG / width; i++) {
        total += red[i];
    }
    workgroupBarrier();
    return total;
}

// Max of `x` over the workgroup, like block_sum.
fn block_max(x: f32, lid: u32) -> f32 {
    let width = subgroupAdd(1u);
    let part = subgroupMax(x);
    if (lid % width == 0u) {
        red[lid / width] = part;
    }
    workgroupBarrier();
    var total = red[0];
    for (var i = 1u; i < WG / width; i++) {
        total = max(total, red[i]);
    }
    workgroupBarrier();
    return total;
}

// ---- the kernel's own source ----

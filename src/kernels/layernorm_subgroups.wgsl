// LayerNorm forward with a subgroup a row: what layernorm.wgsl's `forward` computes
// with a workgroup a row (the mean, then the variance around it, then the
// normalized, scaled row), for devices with subgroups. Each subgroup sums its row
// with subgroupAdd: no workgroup memory and no barrier, where a workgroup a row
// meets at four (two block sums). A workgroup's rows are its subgroups', WG /
// subgroup size of them; subgroups are runs of consecutive invocations, as
// prelude_subgroups.wgsl takes them. The launcher counts workgroups with the
// device's largest subgroup size (fewest rows a workgroup), so smaller subgroups only
// leave the last workgroups without rows.
// The dinp pass in the same form measured 0.655 GPU ms a step on the H200 where
// layernorm.wgsl's took 0.702 in an earlier call, and the step did not move (44.38
// against 44.40 ms in one call, bench-results/step-vs-torch/2026-12-04-layernorm-dinp-
// subgroups): that pass reads three tensors and writes two, and stays as it is.

// The uniform, EPS and WG: layernorm_common.wgsl; the forward's bindings:
// layernorm_bindings.wgsl (both joined in front).

@compute @workgroup_size(WG)
fn forward_subgroups(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_size) width: u32,
) {
    let lane = lid % width;
    let row = (wid.x + wid.y * nwg.x) * (WG / width) + lid / width;
    // A row past the end sums a copy of the last row and writes nothing: every lane
    // takes part in its subgroup's sums.
    let base = min(row, p.rows - 1u) * p.c;
    let cf = f32(p.c);
    // Bounded by c / width iterations a lane.
    var s = 0.0;
    for (var i = lane; i < p.c; i += width) {
        s += inp[base + i];
    }
    let m = subgroupAdd(s) / cf;
    var q = 0.0;
    for (var i = lane; i < p.c; i += width) {
        let d = inp[base + i] - m;
        q += d * d;
    }
    let rs = 1.0 / sqrt(subgroupAdd(q) / cf + EPS);
    if (row < p.rows) {
        for (var i = lane; i < p.c; i += width) {
            out[base + i] = (inp[base + i] - m) * rs * weight[i] + bias[i];
        }
        if (lane == 0u) {
            mean_out[row] = m;
            rstd_out[row] = rs;
        }
    }
}

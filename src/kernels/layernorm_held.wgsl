// LayerNorm with each row held in registers, a subgroup a row, for devices with
// subgroups and rows of whole vec4s. Lane l of a subgroup `width` wide holds the
// row's vec4s l, l + width, ..., HELD of them at most (layernorm.rs joins
// `const HELD` in front: the fewest of its sizes that hold c). layernorm.wgsl reads
// a row from memory again for each of its sums; these read it once.
//   forward_held   the mean, then the variance around it, then the normalized,
//                  scaled row, as layernorm.wgsl's forward computes them
//   backward_held  dinp of ROWS rows a workgroup (subgroup s takes rows s, s + WG /
//                  width, ...), as layernorm.wgsl's backward_dinp computes it with
//                  RESID and MASK, and those rows' weight gradients: each lane adds
//                  its channels over its subgroup's rows in registers, the subgroups
//                  are added in turn in workgroup memory, and the workgroup writes one
//                  partial sum a channel, series by series: partial[s * blocks +
//                  block], series s < c dweight's, then c of dbias's
//   final_held     a subgroup a series: each lane adds every width-th partial, four
//                  sums a trip, and subgroupAdd adds the lanes
// Every sum runs in a fixed order on a device. subgroupAdd is called where every
// lane of the subgroup takes part: rows past the end are read as copies of the last
// row and write nothing.

// The uniform, EPS and WG: layernorm_common.wgsl (joined in front), with
// hash.wgsl for the dropout mask.

// ROWS (layernorm.rs joins it in front, beside HELD): rows a workgroup of
// backward_held. The launcher runs it where subgroups are at least WG / ROWS wide,
// so each subgroup takes a whole number of rows.
// Vec4s of a row the workgroup's sums hold: backward_held takes rows of up to
// 4 * RED_C4 channels.
const RED_C4: u32 = 256u;

// forward_held: inp, weight, bias, out, mean, rstd
@group(0) @binding(1) var<storage, read> f_inp: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> f_weight: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> f_bias: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> f_out: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> f_mean: array<f32>;
@group(0) @binding(6) var<storage, read_write> f_rstd: array<f32>;

// backward_held: dout, inp, weight, mean, rstd, dinp, resid, masked, partial (resid
// bound to dout without RESID, masked to partial without MASK, as in layernorm.rs)
@group(0) @binding(1) var<storage, read> b_dout: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> b_inp: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> b_weight: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> b_mean: array<f32>;
@group(0) @binding(5) var<storage, read> b_rstd: array<f32>;
@group(0) @binding(6) var<storage, read_write> b_dinp: array<vec4<f32>>;
@group(0) @binding(7) var<storage, read> b_resid: array<vec4<f32>>;
@group(0) @binding(8) var<storage, read_write> b_masked: array<vec4<f32>>;
@group(0) @binding(9) var<storage, read_write> b_partial: array<f32>;

// final_held: partial, dweight, dbias
@group(0) @binding(1) var<storage, read> q_partial: array<f32>;
@group(0) @binding(2) var<storage, read_write> q_dweight: array<f32>;
@group(0) @binding(3) var<storage, read_write> q_dbias: array<f32>;

// backward_held's weight gradients of the workgroup's rows: dweight's vec4s, then
// from RED_C4 dbias's.
var<workgroup> sums: array<vec4<f32>, 512>;

fn total4(v: vec4<f32>) -> f32 {
    return (v.x + v.y) + (v.z + v.w);
}

@compute @workgroup_size(WG)
fn forward_held(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_size) width: u32,
) {
    let lane = lid % width;
    let row = (wid.x + wid.y * nwg.x) * (WG / width) + lid / width;
    let c4 = p.c / 4u;
    let base = min(row, p.rows - 1u) * c4;
    let cf = f32(p.c);
    var x: array<vec4<f32>, HELD>;
    var s = vec4<f32>(0.0);
    for (var j = 0u; j < HELD; j++) {
        let i = lane + j * width;
        if (i < c4) {
            x[j] = f_inp[base + i];
            s += x[j];
        }
    }
    let m = subgroupAdd(total4(s)) / cf;
    var q = 0.0;
    for (var j = 0u; j < HELD; j++) {
        if (lane + j * width < c4) {
            let d = x[j] - m;
            q += dot(d, d);
        }
    }
    let rs = 1.0 / sqrt(subgroupAdd(q) / cf + EPS);
    if (row < p.rows) {
        for (var j = 0u; j < HELD; j++) {
            let i = lane + j * width;
            if (i < c4) {
                f_out[base + i] = (x[j] - m) * rs * f_weight[i] + f_bias[i];
            }
        }
        if (lane == 0u) {
            f_mean[row] = m;
            f_rstd[row] = rs;
        }
    }
}

// dinp's vec4 `at`, plus the residual gradient and its masked copy when asked.
fn store_dinp4(at: u32, v: vec4<f32>) {
    var d = v;
    if ((p.flags & RESID) != 0u) { d = b_resid[at] + d; }
    b_dinp[at] = d;
    if ((p.flags & MASK) != 0u) {
        let e = at * 4u;
        let keep = vec4<bool>(kept(p.seed, e, p.threshold), kept(p.seed, e + 1u, p.threshold),
            kept(p.seed, e + 2u, p.threshold), kept(p.seed, e + 3u, p.threshold));
        b_masked[at] = select(vec4<f32>(0.0), d * p.scale, keep);
    }
}

@compute @workgroup_size(WG)
fn backward_held(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_size) width: u32,
) {
    let lane = lid % width;
    let sg = lid / width;
    let subgroups = WG / width;
    let block = wid.x + wid.y * nwg.x;
    let c4 = p.c / 4u;
    let cf = f32(p.c);
    var dw: array<vec4<f32>, HELD>;
    var db: array<vec4<f32>, HELD>;
    // One row a trip: two rows a trip, or the next row's loads issued before this
    // row's sums, measured slower on the H100 (BENCHMARKS.md: the step against PyTorch).
    for (var k = 0u; k < ROWS / subgroups; k++) {
        let row = block * ROWS + k * subgroups + sg;
        let r = min(row, p.rows - 1u);
        let base = r * c4;
        let m = b_mean[r];
        let rs = b_rstd[r];
        // The row's dout and normalized input, and the sums of g = weight * dout and
        // of g * n.
        var d: array<vec4<f32>, HELD>;
        var n: array<vec4<f32>, HELD>;
        var sum_g = vec4<f32>(0.0);
        var sum_gn = vec4<f32>(0.0);
        for (var j = 0u; j < HELD; j++) {
            let i = lane + j * width;
            if (i < c4) {
                d[j] = b_dout[base + i];
                n[j] = (b_inp[base + i] - m) * rs;
                let g = b_weight[i] * d[j];
                sum_g += g;
                sum_gn += g * n[j];
            }
        }
        let mean_g = subgroupAdd(total4(sum_g)) / cf;
        let mean_gn = subgroupAdd(total4(sum_gn)) / cf;
        if (row < p.rows) {
            for (var j = 0u; j < HELD; j++) {
                let i = lane + j * width;
                if (i < c4) {
                    let g = b_weight[i] * d[j];
                    store_dinp4(base + i, rs * (g - mean_g - n[j] * mean_gn));
                    dw[j] += d[j] * n[j];
                    db[j] += d[j];
                }
            }
        }
    }
    // The subgroups' sums, added in subgroup order.
    for (var s = 0u; s < subgroups; s++) {
        if (sg == s) {
            for (var j = 0u; j < HELD; j++) {
                let i = lane + j * width;
                if (i < c4) {
                    if (s == 0u) {
                        sums[i] = dw[j];
                        sums[RED_C4 + i] = db[j];
                    } else {
                        sums[i] += dw[j];
                        sums[RED_C4 + i] += db[j];
                    }
                }
            }
        }
        workgroupBarrier();
    }
    let blocks = p.chunks;
    for (var i = lid; i < c4; i += WG) {
        let w = sums[i];
        let b = sums[RED_C4 + i];
        let at = 4u * i * blocks + block;
        let bias_at = at + p.c * blocks;
        b_partial[at] = w.x;
        b_partial[at + blocks] = w.y;
        b_partial[at + 2u * blocks] = w.z;
        b_partial[at + 3u * blocks] = w.w;
        b_partial[bias_at] = b.x;
        b_partial[bias_at + blocks] = b.y;
        b_partial[bias_at + 2u * blocks] = b.z;
        b_partial[bias_at + 3u * blocks] = b.w;
    }
}

@compute @workgroup_size(WG)
fn final_held(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_size) width: u32,
) {
    let lane = lid % width;
    let series = (wid.x + wid.y * nwg.x) * (WG / width) + lid / width;
    let blocks = p.chunks;
    let base = min(series, 2u * p.c - 1u) * blocks;
    var acc = vec4<f32>(0.0);
    var b = lane;
    for (; b + 3u * width < blocks; b += 4u * width) {
        acc += vec4<f32>(q_partial[base + b], q_partial[base + b + width],
            q_partial[base + b + 2u * width], q_partial[base + b + 3u * width]);
    }
    for (; b < blocks; b += width) {
        acc.x += q_partial[base + b];
    }
    let total = subgroupAdd(total4(acc));
    if (lane == 0u && series < 2u * p.c) {
        if (series < p.c) {
            q_dweight[series] = total;
        } else {
            q_dbias[series - p.c] = total;
        }
    }
}

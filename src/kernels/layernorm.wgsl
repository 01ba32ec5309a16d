// LayerNorm over rows of c floats (eps 1e-5, biased variance). Entry points:
//   forward        one workgroup a row: mean, then variance around it (two passes,
//                  steadier than E[x^2] - mean^2), then the normalized, scaled row
//   backward_dinp  one workgroup a row: dinp = rstd * (g - mean(g) - n * mean(g * n))
//                  with n the normalized input and g = weight * dout; with RESID,
//                  plus the residual stream's gradient (dinp = resid + that), and
//                  with MASK also that sum through a dropout mask into `masked` (the
//                  gradient of the residual branch that produced the input)
//   forward_rows, backward_dinp_rows  the same with one thread a row (CPU adapters:
//                  no barriers)
//   backward_dinp_params  backward_dinp in its first `rows` workgroups, and in the
//                  ceil(c / PC) after them dweight/dbias in one pass: workgroup w sums
//                  channels [w * PC, w * PC + PC) over every row, PL lanes of rows a
//                  channel, then adds the lanes in a fixed tree (GPUs, up to 4096 rows:
//                  the weight gradients take no dispatch of their own)
//   backward_partial  dweight/dbias otherwise, first pass: one thread per (chunk of
//                  chunk_rows rows, channel) sums its chunk into `partial` ([dweight
//                  chunks; dbias chunks])
//   backward_final second pass: one thread a channel sums its chunks in order
// Every output element has one writer, so the row reduction needs no atomics.
// Entry points share bindings; each uses exactly those its launcher passes.

// The uniform, EPS and WG: layernorm_common.wgsl; the forward's bindings:
// layernorm_bindings.wgsl (both joined in front).

// backward_dinp: dout, inp, weight, mean, rstd, dinp
@group(0) @binding(1) var<storage, read> dout: array<f32>;
@group(0) @binding(2) var<storage, read> b_inp: array<f32>;
@group(0) @binding(3) var<storage, read> b_weight: array<f32>;
@group(0) @binding(4) var<storage, read> b_mean: array<f32>;
@group(0) @binding(5) var<storage, read> b_rstd: array<f32>;
@group(0) @binding(6) var<storage, read_write> dinp: array<f32>;
// Bound to `dout` without RESID, and to the scratch `partial` (written only by the
// next pass) without MASK.
@group(0) @binding(7) var<storage, read> d_resid: array<f32>;
@group(0) @binding(8) var<storage, read_write> d_masked: array<f32>;

// backward_dinp_params: backward_dinp's, then the weight gradients
@group(0) @binding(9) var<storage, read_write> c_dweight: array<f32>;
@group(0) @binding(10) var<storage, read_write> c_dbias: array<f32>;

// backward_partial: dout, inp, mean, rstd, partial
@group(0) @binding(3) var<storage, read> p_mean: array<f32>;
@group(0) @binding(4) var<storage, read> p_rstd: array<f32>;
@group(0) @binding(5) var<storage, read_write> partial: array<f32>;

// backward_final: partial, dweight, dbias
@group(0) @binding(1) var<storage, read> f_partial: array<f32>;
@group(0) @binding(2) var<storage, read_write> dweight: array<f32>;
@group(0) @binding(3) var<storage, read_write> dbias: array<f32>;

@compute @workgroup_size(WG)
fn forward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= p.rows) {
        return;
    }
    let base = row * p.c;
    let cf = f32(p.c);
    var s = 0.0;
    for (var i = lid; i < p.c; i += WG) {
        s += inp[base + i];
    }
    let m = block_sum(s, lid) / cf;
    var q = 0.0;
    for (var i = lid; i < p.c; i += WG) {
        let d = inp[base + i] - m;
        q += d * d;
    }
    let rs = 1.0 / sqrt(block_sum(q, lid) / cf + EPS);
    for (var i = lid; i < p.c; i += WG) {
        out[base + i] = (inp[base + i] - m) * rs * weight[i] + bias[i];
    }
    if (lid == 0u) {
        mean_out[row] = m;
        rstd_out[row] = rs;
    }
}

// dinp's element `at`, plus the residual gradient and its masked copy when asked.
fn store_dinp(at: u32, v: f32) {
    var d = v;
    if ((p.flags & RESID) != 0u) { d = d_resid[at] + d; }
    dinp[at] = d;
    if ((p.flags & MASK) != 0u) {
        d_masked[at] = select(0.0, d * p.scale, kept(p.seed, at, p.threshold));
    }
}

// mean(g) and mean(g * n) of the row at `base` (g = weight * dout, n the normalized
// input), over the workgroup.
fn dinp_means(base: u32, m: f32, rs: f32, lid: u32) -> vec2<f32> {
    var sg = 0.0;
    var sgn = 0.0;
    for (var i = lid; i < p.c; i += WG) {
        let g = b_weight[i] * dout[base + i];
        sg += g;
        sgn += g * (b_inp[base + i] - m) * rs;
    }
    let cf = f32(p.c);
    return vec2<f32>(block_sum(sg, lid) / cf, block_sum(sgn, lid) / cf);
}

// backward_dinp of one row.
fn dinp_row(row: u32, lid: u32) {
    let base = row * p.c;
    let m = b_mean[row];
    let rs = b_rstd[row];
    let means = dinp_means(base, m, rs, lid);
    for (var i = lid; i < p.c; i += WG) {
        let g = b_weight[i] * dout[base + i];
        let n = (b_inp[base + i] - m) * rs;
        store_dinp(base + i, rs * (g - means.x - n * means.y));
    }
}

@compute @workgroup_size(WG)
fn backward_dinp(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= p.rows) {
        return;
    }
    dinp_row(row, lid);
}

// backward_dinp_params' column workgroups: PC channels each, PL lanes of rows a
// channel.
const PC: u32 = 2u;
const PL: u32 = WG / PC;
var<workgroup> red_db: array<f32, WG>;

// dweight and dbias of channels [g * PC, g * PC + PC) over every row: each lane sums
// every PL-th row, two rows a trip into two sums (as in backward_partial), then the
// lanes are added in a fixed tree.
fn column_sums(g: u32, lid: u32) {
    let i = g * PC + lid % PC;
    let lane = lid / PC;
    var dw = vec2<f32>(0.0);
    var db = vec2<f32>(0.0);
    if (i < p.c) {
        var r = lane;
        for (; r + PL < p.rows; r += 2u * PL) {
            let s = r + PL;
            let d = vec2<f32>(dout[r * p.c + i], dout[s * p.c + i]);
            let x = vec2<f32>(b_inp[r * p.c + i], b_inp[s * p.c + i]);
            dw += d * (x - vec2<f32>(b_mean[r], b_mean[s])) * vec2<f32>(b_rstd[r], b_rstd[s]);
            db += d;
        }
        if (r < p.rows) {
            let d = dout[r * p.c + i];
            dw.x += d * (b_inp[r * p.c + i] - b_mean[r]) * b_rstd[r];
            db.x += d;
        }
    }
    red[lid] = dw.x + dw.y;
    red_db[lid] = db.x + db.y;
    workgroupBarrier();
    for (var s = PL / 2u; s > 0u; s >>= 1u) {
        if (lane < s) {
            red[lid] += red[lid + s * PC];
            red_db[lid] += red_db[lid + s * PC];
        }
        workgroupBarrier();
    }
    if (lane == 0u && i < p.c) {
        c_dweight[i] = red[lid];
        c_dbias[i] = red_db[lid];
    }
}

@compute @workgroup_size(WG)
fn backward_dinp_params(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let group = wid.x + wid.y * nwg.x;
    if (group >= p.rows) {
        if (group < p.rows + (p.c + PC - 1u) / PC) {
            column_sums(group - p.rows, lid);
        }
        return;
    }
    dinp_row(group, lid);
}

@compute @workgroup_size(WG)
fn forward_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = linear(gid, nwg);
    if (row >= p.rows) {
        return;
    }
    let base = row * p.c;
    let cf = f32(p.c);
    var s = 0.0;
    for (var i = 0u; i < p.c; i++) {
        s += inp[base + i];
    }
    let m = s / cf;
    var q = 0.0;
    for (var i = 0u; i < p.c; i++) {
        let d = inp[base + i] - m;
        q += d * d;
    }
    let rs = 1.0 / sqrt(q / cf + EPS);
    for (var i = 0u; i < p.c; i++) {
        out[base + i] = (inp[base + i] - m) * rs * weight[i] + bias[i];
    }
    mean_out[row] = m;
    rstd_out[row] = rs;
}

@compute @workgroup_size(WG)
fn backward_dinp_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = linear(gid, nwg);
    if (row >= p.rows) {
        return;
    }
    let base = row * p.c;
    let m = b_mean[row];
    let rs = b_rstd[row];
    var sg = 0.0;
    var sgn = 0.0;
    for (var i = 0u; i < p.c; i++) {
        let g = b_weight[i] * dout[base + i];
        sg += g;
        sgn += g * (b_inp[base + i] - m) * rs;
    }
    let cf = f32(p.c);
    let g_mean = sg / cf;
    let gn_mean = sgn / cf;
    for (var i = 0u; i < p.c; i++) {
        let g = b_weight[i] * dout[base + i];
        let n = (b_inp[base + i] - m) * rs;
        store_dinp(base + i, rs * (g - g_mean - n * gn_mean));
    }
}

@compute @workgroup_size(WG)
fn backward_partial(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = linear(gid, nwg);
    if (idx >= p.chunks * p.c) {
        return;
    }
    let chunk = idx / p.c;
    let i = idx % p.c;
    let first = chunk * p.chunk_rows;
    let last = min(first + p.chunk_rows, p.rows);
    // Two rows a trip into two sums: the loads of both rows are independent, so they
    // overlap even where the driver does not unroll the loop (WebGPU's bounds clamps
    // kept Dawn's build of the plain loop about 2x slower on the H200).
    var dw = vec2<f32>(0.0);
    var db = vec2<f32>(0.0);
    var r = first;
    for (; r + 1u < last; r += 2u) {
        let d = vec2<f32>(dout[r * p.c + i], dout[(r + 1u) * p.c + i]);
        let x = vec2<f32>(b_inp[r * p.c + i], b_inp[(r + 1u) * p.c + i]);
        let m = vec2<f32>(p_mean[r], p_mean[r + 1u]);
        let s = vec2<f32>(p_rstd[r], p_rstd[r + 1u]);
        dw += d * (x - m) * s;
        db += d;
    }
    if (r < last) {
        let d = dout[r * p.c + i];
        dw.x += d * (b_inp[r * p.c + i] - p_mean[r]) * p_rstd[r];
        db.x += d;
    }
    partial[idx] = dw.x + dw.y;
    partial[p.chunks * p.c + idx] = db.x + db.y;
}

@compute @workgroup_size(WG)
fn backward_final(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if (i >= p.c) {
        return;
    }
    // Four chunks a trip into four sums, as in backward_partial.
    var dw = vec4<f32>(0.0);
    var db = vec4<f32>(0.0);
    let stride = p.c;
    let db_base = p.chunks * p.c;
    var k = 0u;
    for (; k + 3u < p.chunks; k += 4u) {
        let at = k * stride + i;
        dw += vec4<f32>(f_partial[at], f_partial[at + stride], f_partial[at + 2u * stride], f_partial[at + 3u * stride]);
        db += vec4<f32>(f_partial[db_base + at], f_partial[db_base + at + stride],
            f_partial[db_base + at + 2u * stride], f_partial[db_base + at + 3u * stride]);
    }
    for (; k < p.chunks; k++) {
        dw.x += f_partial[k * stride + i];
        db.x += f_partial[db_base + k * stride + i];
    }
    dweight[i] = (dw.x + dw.y) + (dw.z + dw.w);
    dbias[i] = (db.x + db.y) + (db.z + db.w);
}

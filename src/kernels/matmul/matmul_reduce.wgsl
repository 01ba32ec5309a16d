// The race-free halves of matmul_backward's weight gradients.
//
// `sum_splits_fused`: out[i] = sum over s of part[s * len + i], in a fixed order, so the
// result is the same on every run (no atomics, one writer an element), then the epilogue
// a split-K GEMM leaves out of its partials (matmul_fuse.wgsl's flags): the forward's
// + bias[i % n] (n = row_chunk), dropout at i and + resid[i]; dinp's times gelu'(aux[i]).
// Plain sums, one or many a dispatch, are multi_tensor.wgsl's `sum_splits`, in
// the same order.
// `colsum_part`: dbias partials. Workgroup (x, y) sums rows y*row_chunk .. of 64
// columns of dout with 4 lanes of rows each, then adds the lanes in a fixed order
// into part[y, col].
struct Params { len: u32, splits: u32, rows: u32, row_chunk: u32, flags: u32, seed: u32, threshold: u32, scale: f32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> part: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
// sum_splits_fused: bound to `part` again where its flag is off.
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read> aux: array<f32>;
@group(0) @binding(5) var<storage, read> resid: array<f32>;

// The sum over splits of part[s * len + i]: four splits a trip into four sums, so the
// loads overlap even where the driver does not unroll the loop (WebGPU's bounds clamps
// kept Dawn's build of a plain loop 1.5x slower on the H200). Fixed order: the same
// result every run.
fn split_sum(i: u32, len: u32, splits: u32) -> f32 {
    var acc = vec4<f32>(0.0);
    var s = 0u;
    for (; s + 3u < splits; s += 4u) {
        let at = s * len + i;
        acc += vec4<f32>(part[at], part[at + len], part[at + 2u * len], part[at + 3u * len]);
    }
    for (; s < splits; s++) {
        acc.x += part[s * len + i];
    }
    return (acc.x + acc.y) + (acc.z + acc.w);
}

@compute @workgroup_size(256)
fn sum_splits_fused(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= p.len) {
        return;
    }
    var acc = split_sum(i, p.len, p.splits);
    if (fused(p.flags, FUSE_BIAS)) { acc += bias[i % p.row_chunk]; }
    if (fused(p.flags, FUSE_DROPOUT)) { acc = dropout_at(acc, i, p.seed, p.threshold, p.scale); }
    if (fused(p.flags, FUSE_RESIDUAL)) { acc = resid[i] + acc; }
    if (fused(p.flags, FUSE_GELU_GRAD)) { acc *= gelu_grad(aux[i]); }
    out[i] = acc;
}

var<workgroup> lanes: array<f32, 256>;

// Here `part` is dout [rows, len] and `out` the partials [splits, len].
@compute @workgroup_size(256)
fn colsum_part(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let col = wg.x * 64u + t % 64u;
    let lane = t / 64u;
    let r_begin = wg.y * p.row_chunk;
    let r_end = min(r_begin + p.row_chunk, p.rows);
    // Four of the lane's rows a trip into four sums (as split_sum).
    var sums = vec4<f32>(0.0);
    if (col < p.len) {
        var r = r_begin + lane;
        for (; r + 12u < r_end; r += 16u) {
            let at = r * p.len + col;
            sums += vec4<f32>(part[at], part[at + 4u * p.len], part[at + 8u * p.len], part[at + 12u * p.len]);
        }
        for (; r < r_end; r += 4u) {
            sums.x += part[r * p.len + col];
        }
    }
    lanes[t] = (sums.x + sums.y) + (sums.z + sums.w);
    workgroupBarrier();
    if (lane == 0u && col < p.len) {
        out[wg.y * p.len + col] = ((lanes[t] + lanes[t + 64u]) + lanes[t + 128u]) + lanes[t + 192u];
    }
}

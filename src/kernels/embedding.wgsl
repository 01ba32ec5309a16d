// Token + position embedding, forward and backward. Entry points:
//   forward      out[r, i] = wte[tokens[r], i] + wpe[r % t, i]      (one thread an element),
//                through the embedding's dropout mask (threshold 0, scale 1: none)
//   dwte_rows_only  dwte[k, i] = sum of dout[r, i] over the rows r holding token k
//                (CPU adapters: a thread a (token, channel))
//   dwte_rows_extra the same plus extra[k, i] (the tied output head's gradient,
//                or with p.extra_splits > 1 the sum of its split partials)
//   dwpe_sum     dwpe[s, i] = sum over the batch of dout[b*t + s, i] (CPU adapters)
//   dwte_dwpe    both in one dispatch (GPUs): dwte (plus extra with p.extra_splits) in
//                a workgroup a token and 32 channels, its rows split eight ways, then
//                dwpe in the workgroups after those, WG elements each
// The backward is a gather, not a scatter: `offsets`/`positions` (built on the host by
// `token_index`) list each token's rows, so every output element has one writer and
// sums its terms in a fixed order (deterministic, nothing lost when a token repeats).
// Entry points share bindings; each uses exactly those its launcher passes.

struct Params { b: u32, t: u32, c: u32, v: u32, seed: u32, threshold: u32, scale: f32, extra_splits: u32 }

@group(0) @binding(0) var<uniform> p: Params;

// forward
@group(0) @binding(1) var<storage, read> tokens: array<u32>;
@group(0) @binding(2) var<storage, read> wte: array<f32>;
@group(0) @binding(3) var<storage, read> wpe: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

// backward
@group(0) @binding(1) var<storage, read> dout: array<f32>;
@group(0) @binding(2) var<storage, read> offsets: array<u32>;
@group(0) @binding(3) var<storage, read> positions: array<u32>;
@group(0) @binding(4) var<storage, read_write> dwte: array<f32>;
@group(0) @binding(5) var<storage, read> extra: array<f32>;
// dwpe_sum: dout, dwpe
@group(0) @binding(2) var<storage, read_write> dwpe: array<f32>;
// dwte_dwpe: dout, offsets, positions, dwte, extra (dout without it), dwpe
@group(0) @binding(6) var<storage, read_write> dwpe_6: array<f32>;

const WG: u32 = 256u;

@compute @workgroup_size(WG)
fn forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = linear(gid, nwg);
    if (idx >= p.b * p.t * p.c) {
        return;
    }
    let row = idx / p.c;
    let i = idx % p.c;
    let pos = row % p.t;
    let x = wte[tokens[row] * p.c + i] + wpe[pos * p.c + i];
    out[idx] = select(0.0, x * p.scale, kept(p.seed, idx, p.threshold));
}

// dwte on CPU adapters: a thread a (token, channel), summing the token's rows alone
// (a workgroup's barrier costs a CPU more than the parallel sums save).
fn token_sum_rows(idx: u32) -> f32 {
    let k = idx / p.c;
    let i = idx % p.c;
    var s = 0.0;
    for (var j = offsets[k]; j < offsets[k + 1u]; j++) {
        s += dout[positions[j] * p.c + i];
    }
    return s;
}

@compute @workgroup_size(WG)
fn dwte_rows_only(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = linear(gid, nwg);
    if (idx >= p.v * p.c) {
        return;
    }
    dwte[idx] = token_sum_rows(idx);
}

@compute @workgroup_size(WG)
fn dwte_rows_extra(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = linear(gid, nwg);
    if (idx >= p.v * p.c) {
        return;
    }
    dwte[idx] = token_sum_rows(idx) + extra_at(idx);
}

// extra[idx], or with p.extra_splits > 1 the sum over s of extra[s * v * c + idx] in
// multi_tensor.wgsl's `grad_at_N` order: the same bits as adding the head's
// split partials first.
fn extra_at(idx: u32) -> f32 {
    let splits = p.extra_splits;
    if (splits <= 1u) {
        return extra[idx];
    }
    let len = p.v * p.c;
    var acc = vec4<f32>(0.0);
    var s = 0u;
    for (; s + 3u < splits; s += 4u) {
        let at = s * len + idx;
        acc += vec4<f32>(extra[at], extra[at + len], extra[at + 2u * len], extra[at + 3u * len]);
    }
    for (; s < splits; s++) {
        acc.x += extra[s * len + idx];
    }
    return (acc.x + acc.y) + (acc.z + acc.w);
}

// dwte on GPUs: a workgroup a (token, block of CB channels); its ROWS row groups each sum
// every ROWS-th row of the token's list, then the first group adds the groups' sums
// in order. Frequent tokens (a space holds thousands of rows) are split eight ways
// instead of summed by one thread, and the order stays fixed.
const CB: u32 = 32u;
const ROWS: u32 = WG / CB;
var<workgroup> part: array<f32, WG>;

// The workgroup's token k and this thread's channel i. The workgroups of a 1-D launch
// of `v * ceil(c / CB)` groups are spread over x and y (grid_1d).
struct Slot { k: u32, i: u32, live: bool }

fn slot(wg: vec3<u32>, nwg: vec3<u32>, lid: u32) -> Slot {
    let blocks = (p.c + CB - 1u) / CB;
    let group = wg.x + wg.y * nwg.x;
    let k = group / blocks;
    let i = (group % blocks) * CB + lid % CB;
    return Slot(k, i, k < p.v && i < p.c);
}

// Sum of dout over the rows holding token `at.k`, channel `at.i` (0 for a thread past
// the last channel, which still takes part in the barrier).
fn token_sum(at: Slot, lid: u32) -> f32 {
    var s = 0.0;
    if (at.live) {
        for (var j = offsets[at.k] + lid / CB; j < offsets[at.k + 1u]; j += ROWS) {
            s += dout[positions[j] * p.c + at.i];
        }
    }
    part[lid] = s;
    workgroupBarrier();
    var total = 0.0;
    for (var r = 0u; r < ROWS; r++) {
        total += part[r * CB + lid % CB];
    }
    return total;
}

// The sum over the batch of dout[bi * t * c + idx] (position idx / c, channel idx % c).
fn position_sum(idx: u32) -> f32 {
    var s = 0.0;
    for (var bi = 0u; bi < p.b; bi++) {
        s += dout[bi * p.t * p.c + idx];
    }
    return s;
}

// In the dwte workgroups row group 0 writes; the others only helped.
@compute @workgroup_size(WG)
fn dwte_dwpe(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let dwte_groups = p.v * ((p.c + CB - 1u) / CB);
    let group = wg.x + wg.y * nwg.x;
    if (group < dwte_groups) {
        let at = slot(wg, nwg, lid);
        let total = token_sum(at, lid);
        if (at.live && lid < CB) {
            let idx = at.k * p.c + at.i;
            if (p.extra_splits != 0u) {
                dwte[idx] = total + extra_at(idx);
            } else {
                dwte[idx] = total;
            }
        }
        return;
    }
    let idx = (group - dwte_groups) * WG + lid;
    if (idx < p.t * p.c) {
        dwpe_6[idx] = position_sum(idx);
    }
}

@compute @workgroup_size(WG)
fn dwpe_sum(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = linear(gid, nwg);
    if (idx >= p.t * p.c) {
        return;
    }
    dwpe[idx] = position_sum(idx);
}

// Token + position embedding, forward and backward. Entry points:
//   forward      out[r, i] = wte[tokens[r], i] + wpe[r % t, i]      (one thread an element),
//                through the embedding's dropout mask (threshold 0, scale 1: none)
//   dwte         dwte[k, i] = sum of dout[r, i] over the rows r holding token k
//   dwte_extra   the same plus extra[k, i] (the tied output head's gradient)
//   dwpe         dwpe[s, i] = sum over the batch of dout[b*t + s, i]
// The backward is a gather, not a scatter: `offsets`/`positions` (built on the host by
// `token_index`) list each token's rows, so every output element has one writer and
// sums its terms in a fixed order (deterministic, nothing lost when a token repeats).
// Entry points share bindings; each uses exactly those its launcher passes.

struct Params { b: u32, t: u32, c: u32, v: u32, seed: u32, threshold: u32, scale: f32, _pad: u32 }

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
@group(0) @binding(2) var<storage, read_write> dwpe: array<f32>;

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

// Sum of dout over the rows holding token idx / c, channel idx % c.
fn token_sum(idx: u32) -> f32 {
    let k = idx / p.c;
    let i = idx % p.c;
    var s = 0.0;
    for (var j = offsets[k]; j < offsets[k + 1u]; j++) {
        s += dout[positions[j] * p.c + i];
    }
    return s;
}

@compute @workgroup_size(WG)
fn dwte_only(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = linear(gid, nwg);
    if (idx >= p.v * p.c) {
        return;
    }
    dwte[idx] = token_sum(idx);
}

@compute @workgroup_size(WG)
fn dwte_extra(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = linear(gid, nwg);
    if (idx >= p.v * p.c) {
        return;
    }
    dwte[idx] = token_sum(idx) + extra[idx];
}

@compute @workgroup_size(WG)
fn dwpe_sum(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = linear(gid, nwg);
    if (idx >= p.t * p.c) {
        return;
    }
    var s = 0.0;
    for (var bi = 0u; bi < p.b; bi++) {
        s += dout[bi * p.t * p.c + idx];
    }
    dwpe[idx] = s;
}

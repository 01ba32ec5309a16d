// Softmax + cross-entropy and its gradient for a vocabulary wider than one chunk
// (CHUNK columns), in two passes so that no invocation loops over the whole row:
// some drivers cut a long loop short (lavapipe's did, past about 65,000 iterations
// an invocation, and the loss came out wrong with no error). The sums are a row's
// chunks combined: each chunk's max m and sum of exp(logit - m), then the row's
// max M = max(m) and sum S = sum(s * exp(m - M)). Entry points:
//   chunk_stats       one workgroup a (row, chunk): the chunk's m and s
//   chunk_stats_rows  the same with one thread a (row, chunk) (CPU adapters)
//   finish            one workgroup a (row, chunk): the row's M and S from its
//                     chunks, then dlogits of the chunk's columns; chunk 0 writes
//                     the loss log(S) + M - logit[target]
//   finish_rows       the same with one thread a (row, chunk)
// Every loop is bounded by CHUNK or by the chunks a row has (v / CHUNK, at most
// 1,089 for the 1,114,112 code points a character vocabulary can hold).

struct Params { rows: u32, v: u32, scale: f32, chunks: u32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
// (m, s) of each (row, chunk), row-major.
@group(0) @binding(2) var<storage, read_write> partials: array<vec2<f32>>;
@group(0) @binding(3) var<storage, read> targets: array<u32>;
@group(0) @binding(4) var<storage, read_write> losses: array<f32>;
@group(0) @binding(5) var<storage, read_write> dlogits: array<f32>;

const WG: u32 = 128u;
// Columns a (row, chunk) covers: crossentropy.rs's CHUNK.
const CHUNK: u32 = 1024u;

// The first column of `chunk` and the one past its last.
fn columns(chunk: u32) -> vec2<u32> {
    let start = chunk * CHUNK;
    return vec2<u32>(start, min(start + CHUNK, p.v));
}

// The row's max and sum of exp(logit - max) over its chunks first, first + step,
// ... (a thread's share when step is the workgroup size: the shares still to merge).
fn combine(row: u32, first: u32, step: u32) -> vec2<f32> {
    let base = row * p.chunks;
    var mx = partials[base].x;
    for (var c = first; c < p.chunks; c += step) {
        mx = max(mx, partials[base + c].x);
    }
    var s = 0.0;
    for (var c = first; c < p.chunks; c += step) {
        let part = partials[base + c];
        s += part.y * exp(part.x - mx);
    }
    return vec2<f32>(mx, s);
}

fn grad(logit: f32, mx: f32, s: f32, is_target: bool) -> f32 {
    return (exp(logit - mx) / s - select(0.0, 1.0, is_target)) * p.scale;
}

@compute @workgroup_size(WG)
fn chunk_stats(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = wid.x + wid.y * nwg.x;
    if (g >= p.rows * p.chunks) {
        return;
    }
    let row = g / p.chunks;
    let cols = columns(g % p.chunks);
    let base = row * p.v;
    // Threads with no column hold the chunk's first logit, not an identity.
    var mx = logits[base + cols.x];
    for (var i = cols.x + lid; i < cols.y; i += WG) {
        mx = max(mx, logits[base + i]);
    }
    mx = block_max(mx, lid);
    var s = 0.0;
    for (var i = cols.x + lid; i < cols.y; i += WG) {
        s += exp(logits[base + i] - mx);
    }
    s = block_sum(s, lid);
    if (lid == 0u) {
        partials[g] = vec2<f32>(mx, s);
    }
}

@compute @workgroup_size(WG)
fn chunk_stats_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = linear(gid, nwg);
    if (g >= p.rows * p.chunks) {
        return;
    }
    let row = g / p.chunks;
    let cols = columns(g % p.chunks);
    let base = row * p.v;
    var mx = logits[base + cols.x];
    for (var i = cols.x + 1u; i < cols.y; i++) {
        mx = max(mx, logits[base + i]);
    }
    var s = 0.0;
    for (var i = cols.x; i < cols.y; i++) {
        s += exp(logits[base + i] - mx);
    }
    partials[g] = vec2<f32>(mx, s);
}

@compute @workgroup_size(WG)
fn finish(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = wid.x + wid.y * nwg.x;
    if (g >= p.rows * p.chunks) {
        return;
    }
    let row = g / p.chunks;
    let chunk = g % p.chunks;
    let share = combine(row, lid, WG);
    let mx = block_max(share.x, lid);
    // Each share's sum rescaled to the row's max.
    let s = block_sum(share.y * exp(share.x - mx), lid);
    let cols = columns(chunk);
    let base = row * p.v;
    let tgt = targets[row];
    for (var i = cols.x + lid; i < cols.y; i += WG) {
        dlogits[base + i] = grad(logits[base + i], mx, s, i == tgt);
    }
    if (chunk == 0u && lid == 0u) {
        losses[row] = log(s) + mx - logits[base + tgt];
    }
}

@compute @workgroup_size(WG)
fn finish_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = linear(gid, nwg);
    if (g >= p.rows * p.chunks) {
        return;
    }
    let row = g / p.chunks;
    let chunk = g % p.chunks;
    let total = combine(row, 0u, 1u);
    let cols = columns(chunk);
    let base = row * p.v;
    let tgt = targets[row];
    for (var i = cols.x; i < cols.y; i++) {
        dlogits[base + i] = grad(logits[base + i], total.x, total.y, i == tgt);
    }
    if (chunk == 0u) {
        losses[row] = log(total.y) + total.x - logits[base + tgt];
    }
}

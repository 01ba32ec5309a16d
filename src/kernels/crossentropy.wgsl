// Softmax + cross-entropy and its gradient, fused (llm.c's fused classifier). Entry
// points:
//   forward   one workgroup a row of v logits: max, sum of exp, then the loss =
//             log(sum) + max - logit[target] (finite even when the target's
//             probability underflows to 0) and dlogits = (probs - onehot(target)) *
//             scale, the gradient of scale * (sum of the losses)
//   forward_rows  the same with one thread a row (CPU adapters: no barriers)
// (The mean of the losses is the optimizer's sum reduction; see reduce.wgsl.)

struct Params { rows: u32, v: u32, scale: f32, _pad0: u32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read> targets: array<u32>;
@group(0) @binding(3) var<storage, read_write> losses: array<f32>;
@group(0) @binding(4) var<storage, read_write> dlogits: array<f32>;

const WG: u32 = 128u;

// dlogits of one logit: (its probability - onehot) * scale, the probability as the
// reference computes it (exp(logit - max) / sum).
fn grad(logit: f32, mx: f32, s: f32, is_target: bool) -> f32 {
    return (exp(logit - mx) / s - select(0.0, 1.0, is_target)) * p.scale;
}

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
    let base = row * p.v;
    // Every thread starts from the row's first logit, so threads with no columns
    // (v < WG) hold a real value, not an identity.
    var mx = logits[base];
    for (var i = lid; i < p.v; i += WG) {
        mx = max(mx, logits[base + i]);
    }
    mx = block_max(mx, lid);
    var s = 0.0;
    for (var i = lid; i < p.v; i += WG) {
        s += exp(logits[base + i] - mx);
    }
    s = block_sum(s, lid);
    let tgt = targets[row];
    for (var i = lid; i < p.v; i += WG) {
        dlogits[base + i] = grad(logits[base + i], mx, s, i == tgt);
    }
    if (lid == 0u) {
        losses[row] = log(s) + mx - logits[base + tgt];
    }
}

@compute @workgroup_size(WG)
fn forward_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = linear(gid, nwg);
    if (row >= p.rows) {
        return;
    }
    let base = row * p.v;
    var mx = logits[base];
    for (var i = 1u; i < p.v; i++) {
        mx = max(mx, logits[base + i]);
    }
    var s = 0.0;
    for (var i = 0u; i < p.v; i++) {
        s += exp(logits[base + i] - mx);
    }
    let tgt = targets[row];
    for (var i = 0u; i < p.v; i++) {
        dlogits[base + i] = grad(logits[base + i], mx, s, i == tgt);
    }
    losses[row] = log(s) + mx - logits[base + tgt];
}

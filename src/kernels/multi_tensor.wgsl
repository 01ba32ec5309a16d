// Kernels over many tensors a dispatch: the optimizer's two, over a chunk of the
// arenas (the gradients', the parameters', the moments'), and the sums of weight
// gradients' split partials (the matmuls defer them to the end of the backward pass).
// A template: `multi_tensor.rs` stamps it for k tensors (1 <= k <= MAX_K) when a
// kernel is first needed. It prepends the prelude, the bindings, `const K` (= k) and
// `const MAX_K`, keeps the shared part and the sections `//#if NAME ...` that name
// the entry point, and copies each block between `//#each` and `//#end` k times
// with `#` replaced by the tensor's index 0..k-1. WGSL cannot index an array of
// buffers, so each sum's buffers get their own copy of the loop, and a switch on
// the workgroup's tensor picks it. The optimizer's two read one buffer of gradients
// and are stamped once, for MAX_K.
//
// Entry points:
//   sumsq  workgroup w sums the squares of elements [j * span, (j + 1) * span) of
//          its tensor's gradient (j: w's index among the tensor's workgroups) and
//          writes partials[offset + j]
//   adamw  workgroup w updates elements [j * span, (j + 1) * span) of its tensor:
//          AdamW on its parameters and moments, at the tensor's offset in the
//          chunk's `param` and `mv` (m, then v from `vbase`), with the gradient
//          times the clipping scale, which the norm kernel (reduce.wgsl
//          `global_norm`) left in mv[1]
//   sum_splits  thread i of its tensor's workgroups: out[i] = grad_at_N (the sum of
//          the split partials bound as gradN), for one sum or many; the table's
//          (offset, span) are (splits, 0)
// sumsq and adamw read a gradient left as split partials (`p.splits`) in the order
// of sum_splits, so a sum made first and one made as the optimizer reads give the
// same bits. Fixed summation orders: the same input always gives the same bits.

// Per tensor of the dispatch: (first workgroup, length, offset, span): the offset
// into the partials (sumsq) or the chunk of the arenas (adamw), the span the elements
// one workgroup takes; a slot past the dispatch's tensors starts at workgroup
// 0xffffffff. Loop bounds come from this table only, read at a dynamic index:
// lavapipe re-specializes a shader for every dispatch whose loops are bounded by
// uniform values at fixed offsets (it inlines them), which costs milliseconds a
// dispatch for kernels this size.
struct TensorsParams {
    decay: u32,  // adamw: bit i set: tensor i decays
    groups: u32, // workgroups in this dispatch
    vbase: u32,  // adamw: where v starts in `mv`
    _pad0: u32,
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    weight_decay: f32,
    bc1: f32, // 1 - beta1^step
    bc2: f32, // 1 - beta2^step
    _pad2: f32,
    tensors: array<vec4<u32>, MAX_K>,
    // sumsq, adamw: how many split partials tensor t's gradient is, at
    // splits[t / 4][t % 4] (1: the gradient itself).
    splits: array<vec4<u32>, MAX_K / 4>,
    // sumsq, adamw: where tensor t's gradient starts in `grads`, at
    // grad_offsets[t / 4][t % 4].
    grad_offsets: array<vec4<u32>, MAX_K / 4>,
}

@group(0) @binding(0) var<uniform> p: TensorsParams;

fn splits_of(t: u32) -> u32 {
    return p.splits[t / 4u][t % 4u];
}

const WG: u32 = 256u;

// The dispatch's index of the tensor that workgroup `group` works on: the last
// whose first workgroup is at most `group`.
fn tensor_of(group: u32) -> u32 {
    var t = 0u;
    for (var i = 1u; i < K; i++) {
        if (p.tensors[i].x <= group) {
            t = i;
        }
    }
    return t;
}

// Workgroups past 65535 go to y, as `grid_1d` does with threads.
fn group_index(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.x + wid.y * nwg.x;
}

//#if sumsq adamw
// Element i of tensor t's gradient: the sum over s of grads[at + s * len + i]
// (`splits` partials of `len` floats from `at`), in the order of `grad_at_#` below.
fn grad_at(t: u32, i: u32, len: u32) -> f32 {
    let splits = splits_of(t);
    let base = p.grad_offsets[t / 4u][t % 4u] + i;
    if (splits == 1u) {
        return grads[base];
    }
    var acc = vec4<f32>(0.0);
    var s = 0u;
    for (; s + 3u < splits; s += 4u) {
        let at = base + s * len;
        acc += vec4<f32>(grads[at], grads[at + len], grads[at + 2u * len], grads[at + 3u * len]);
    }
    for (; s < splits; s++) {
        acc.x += grads[base + s * len];
    }
    return (acc.x + acc.y) + (acc.z + acc.w);
}
//#endif

//#if sumsq
@compute @workgroup_size(WG)
fn sumsq(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let group = group_index(wid, nwg);
    if (group >= p.groups) {
        return;
    }
    let t = tensor_of(group);
    let e = p.tensors[t];
    let j = group - e.x;
    let end = min((j + 1u) * e.w, e.y);
    var s = 0.0;
    for (var i = j * e.w + lid; i < end; i += WG) {
        let x = grad_at(t, i, e.y);
        s += x * x;
    }
    let total = block_sum(s, lid);
    if (lid == 0u) {
        partials[e.z + j] = total;
    }
}
//#endif

//#if adamw
@compute @workgroup_size(WG)
fn adamw(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let group = group_index(wid, nwg);
    if (group >= p.groups) {
        return;
    }
    let t = tensor_of(group);
    let e = p.tensors[t];
    let j = group - e.x;
    let decay = select(0.0, p.weight_decay, ((p.decay >> t) & 1u) != 0u);
    let scale = mv[1];
    let end = min((j + 1u) * e.w, e.y);
    for (var i = j * e.w + lid; i < end; i += WG) {
        let g = grad_at(t, i, e.y) * scale;
        let a = e.z + i;
        let mi = p.beta1 * mv[a] + (1.0 - p.beta1) * g;
        let vi = p.beta2 * mv[p.vbase + a] + (1.0 - p.beta2) * g * g;
        mv[a] = mi;
        mv[p.vbase + a] = vi;
        let m_hat = mi / p.bc1;
        let v_hat = vi / p.bc2;
        let w = param[a];
        param[a] = w - p.lr * (m_hat / (sqrt(v_hat) + p.eps) + decay * w);
    }
}
//#endif

//#if sum_splits
//#each
// Element i of sum #: the sum over s of grad#[s * len + i] (`splits` partials of
// `len` floats), in matmul_reduce.wgsl's `split_sum` order (the fused sum's); with
// one split, grad#[i].
fn grad_at_#(i: u32, len: u32, splits: u32) -> f32 {
    if (splits == 1u) {
        return grad#[i];
    }
    var acc = vec4<f32>(0.0);
    var s = 0u;
    for (; s + 3u < splits; s += 4u) {
        let at = s * len + i;
        acc += vec4<f32>(grad#[at], grad#[at + len], grad#[at + 2u * len], grad#[at + 3u * len]);
    }
    for (; s < splits; s++) {
        acc.x += grad#[s * len + i];
    }
    return (acc.x + acc.y) + (acc.z + acc.w);
}
//#end

@compute @workgroup_size(WG)
fn sum_splits(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let group = group_index(wid, nwg);
    if (group >= p.groups) {
        return;
    }
    let t = tensor_of(group);
    let e = p.tensors[t];
    let i = (group - e.x) * WG + lid;
    if (i >= e.y) {
        return;
    }
    switch t {
        //#each
        case #u: { out#[i] = grad_at_#(i, e.y, e.z); }
        //#end
        default: {}
    }
}
//#endif

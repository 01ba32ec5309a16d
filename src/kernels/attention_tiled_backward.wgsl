// Causal self-attention backward, tiled (see attention_backward.wgsl for the
// formulas and attention_tiled.wgsl for the template markers and the thread layout).
// With p_ij = exp(s_ij - lse_i) (s scaled), dp_ij = m_ij dout_i · v_j (m the dropout
// mask, its scale included) and D_i = dout_i · out_i, precomputed once a row by
// attention_dsum.wgsl: ds_ij = p_ij (dp_ij - D_i); dq_i = scale sum_j ds_ij k_j,
// dk_j = scale sum_i ds_ij q_i, dv_j = sum_i p_ij m_ij dout_i.
//
// One dispatch, no atomics: the first ceil(t / 32) workgroups of each (batch, head)
// are `dq_block`s, 32 queries each, streaming keys 16 at a time; the rest are
// `dkdv_block`s, 32 keys each, streaming queries 16 at a time from their first key
// on. Both have the same shape: 32 resident rows of two tensors (`ra`, `rb`), 16
// streamed rows of two (`sa`, `sb`); thread (ty, tx) of 8 x 8 works out s = ra · sa
// and dp = rb · sb for resident rows ty + 8i (`#I`, i < 4) and streamed rows tx + 8j
// (`#J`, j < 2), writes the weights to `wa` / `wb` [resident][streamed], then adds
// them times streamed rows into its resident rows' channel vec4s tx + 8c (`#C`),
// 4 streamed rows a step (`#K`).
struct Params { t: u32, c: u32, nh: u32, hs: u32, scale: f32, seed: u32, threshold: u32, keep_scale: f32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> dout: array<f32>;
@group(0) @binding(2) var<storage, read> qkv: array<f32>;
@group(0) @binding(3) var<storage, read> lse: array<f32>;
@group(0) @binding(4) var<storage, read> dsum: array<f32>;
@group(0) @binding(5) var<storage, read_write> dqkv: array<f32>;

const BR: u32 = 32u;
const BS: u32 = 16u;
const NX: u32 = 8u;
const NY: u32 = 8u;
const WG: u32 = 64u;
// Row stride of `wa` / `wb` in vec4s (24 floats): a warp's 4 row groups write and
// read in different banks.
const W4: u32 = 6u;

// dq: q (scaled), dout of the block's queries; dkdv: k (scaled), v of its keys.
var<workgroup> ra: array<vec4<f32>, BR * STRIDE>;
var<workgroup> rb: array<vec4<f32>, BR * STRIDE>;
// dq: k, v of the streamed keys; dkdv: q, dout of the streamed queries.
var<workgroup> sa: array<vec4<f32>, BS * STRIDE>;
var<workgroup> sb: array<vec4<f32>, BS * STRIDE>;
// dq: ds in `wa`; dkdv: p m in `wa`, ds in `wb`.
var<workgroup> wa: array<vec4<f32>, BR * W4>;
var<workgroup> wb: array<vec4<f32>, BR * W4>;
// dkdv: lse and D of the streamed queries.
var<workgroup> lse_s: array<f32, BS>;
var<workgroup> dsum_s: array<f32, BS>;

// 4 channels d.. of tensor `which` (0 q, 1 k, 2 v of qkv; 3 dout) at (batch bi,
// position ti, head h), zero past hs and past t.
fn load4(bi: u32, ti: u32, which: u32, h: u32, d: u32) -> vec4<f32> {
    var v = vec4<f32>(0.0);
    if (ti >= p.t) {
        return v;
    }
    if (which == 3u) {
        let base = (bi * p.t + ti) * p.c + h * p.hs + d;
        if (d < p.hs) { v.x = dout[base]; }
        if (d + 1u < p.hs) { v.y = dout[base + 1u]; }
        if (d + 2u < p.hs) { v.z = dout[base + 2u]; }
        if (d + 3u < p.hs) { v.w = dout[base + 3u]; }
    } else {
        let base = (bi * p.t + ti) * 3u * p.c + which * p.c + h * p.hs + d;
        if (d < p.hs) { v.x = qkv[base]; }
        if (d + 1u < p.hs) { v.y = qkv[base + 1u]; }
        if (d + 2u < p.hs) { v.z = qkv[base + 2u]; }
        if (d + 3u < p.hs) { v.w = qkv[base + 3u]; }
    }
    return v;
}

fn store4(ti: u32, bi: u32, which: u32, h: u32, d: u32, v: vec4<f32>) {
    let base = (bi * p.t + ti) * 3u * p.c + which * p.c + h * p.hs + d;
    if (d < p.hs) { dqkv[base] = v.x; }
    if (d + 1u < p.hs) { dqkv[base + 1u] = v.y; }
    if (d + 2u < p.hs) { dqkv[base + 2u] = v.z; }
    if (d + 3u < p.hs) { dqkv[base + 3u] = v.w; }
}

// The resident rows r0 .. r0 + BR of tensors `which_a` (times `scale_a`) and
// `which_b`.
// Bounded by the block: BR * HS4 / WG iterations.
fn stage_resident(bi: u32, h: u32, r0: u32, which_a: u32, scale_a: f32, which_b: u32, t: u32) {
    for (var e = t; e < BR * HS4; e += WG) {
        let r = e / HS4;
        let d = e % HS4;
        ra[r * STRIDE + d] = load4(bi, r0 + r, which_a, h, d * 4u) * scale_a;
        rb[r * STRIDE + d] = load4(bi, r0 + r, which_b, h, d * 4u);
    }
}

// The streamed rows r0 .. r0 + BS of tensors `which_a` and `which_b`. Bounded by
// the block: BS * HS4 / WG iterations.
fn stage_streamed(bi: u32, h: u32, r0: u32, which_a: u32, which_b: u32, t: u32) {
    for (var e = t; e < BS * HS4; e += WG) {
        let r = e / HS4;
        let d = e % HS4;
        sa[r * STRIDE + d] = load4(bi, r0 + r, which_a, h, d * 4u);
        sb[r * STRIDE + d] = load4(bi, r0 + r, which_b, h, d * 4u);
    }
}

// Block x: queries x*32 .. of (batch, head) bh.
fn dq_block(x: u32, bh: u32, t: u32) {
    let bi = bh / p.nh;
    let h = bh % p.nh;
    let row0 = x * BR;
    let tx = t % NX;
    let ty = t / NX;
    let lr#I = ty + NY * #Iu;
    let r#I = row0 + lr#I;
    let ir#I = min(r#I, p.t - 1u);
    let cv#C = min(tx + NX * #Cu, HS4 - 1u);
    let lse#I = lse[bh * p.t + ir#I];
    let dd#I = dsum[bh * p.t + ir#I];

    stage_resident(bi, h, row0, 0u, p.scale, 3u, t);
    var acc#I_#C = vec4<f32>(0.0);

    // Key blocks up to the diagonal: at most ceil(t / BS), t capped by the context.
    let kv_end = min(row0 + BR, p.t);
    for (var kb = 0u; kb < kv_end; kb += BS) {
        stage_streamed(bi, h, kb, 1u, 2u, t);
        workgroupBarrier();

        var s#I = vec2<f32>(0.0);
        var dp#I = vec2<f32>(0.0);
        // Bounded by the head size (HS4 <= 16 vec4s).
        for (var d = 0u; d < HS4; d++) {
            let q#I = ra[lr#I * STRIDE + d];
            let g#I = rb[lr#I * STRIDE + d];
            let k#J = sa[(tx + NX * #Ju) * STRIDE + d];
            let v#J = sb[(tx + NX * #Ju) * STRIDE + d];
            s#I += vec2<f32>(dot(q#I, k0), dot(q#I, k1));
            dp#I += vec2<f32>(dot(g#I, v0), dot(g#I, v1));
        }
        // Key kb + tx + 8j is visible to a row at or before it (and so < t).
        let key = vec2<u32>(kb + tx) + vec2<u32>(0u, NX);
        // select, not a product: exp of a masked score may be inf.
        let pr#I = select(vec2<f32>(0.0), exp(s#I - vec2<f32>(lse#I)), key <= vec2<u32>(ir#I));
        let ds#I = pr#I * (vec2<f32>(keep(bh, ir#I, key.x), keep(bh, ir#I, key.y)) * dp#I - vec2<f32>(dd#I));
        wa[lr#I * W4 + tx / 4u + 2u * #Ju][tx % 4u] = ds#I[#Ju];
        workgroupBarrier();

        // Bounded by the block: BS / 4 steps of 4 keys.
        for (var kk = 0u; kk < BS; kk += 4u) {
            let w#I = wa[lr#I * W4 + kk / 4u];
            let k#K_#C = sa[(kk + #Ku) * STRIDE + cv#C];
            acc#I_#C = fma(vec4<f32>(w#I.x), k0_#C, fma(vec4<f32>(w#I.y), k1_#C, fma(vec4<f32>(w#I.z), k2_#C, fma(vec4<f32>(w#I.w), k3_#C, acc#I_#C))));
        }
        workgroupBarrier();
    }

    if (r#I < p.t && tx + NX * #Cu < HS4) { store4(r#I, bi, 0u, h, cv#C * 4u, acc#I_#C * p.scale); }
}

// Block x: keys x*32 .. of (batch, head) bh.
fn dkdv_block(x: u32, bh: u32, t: u32) {
    let bi = bh / p.nh;
    let h = bh % p.nh;
    let col0 = x * BR;
    let tx = t % NX;
    let ty = t / NX;
    let lr#I = ty + NY * #Iu;
    let j#I = col0 + lr#I;
    let ij#I = min(j#I, p.t - 1u);
    let cv#C = min(tx + NX * #Cu, HS4 - 1u);

    stage_resident(bi, h, col0, 1u, p.scale, 2u, t);
    var acck#I_#C = vec4<f32>(0.0);
    var accv#I_#C = vec4<f32>(0.0);

    // Query blocks from the first key on: at most ceil(t / BS), t capped by the
    // context.
    for (var qb = col0; qb < p.t; qb += BS) {
        stage_streamed(bi, h, qb, 0u, 3u, t);
        if (t < BS) {
            let i = min(qb + t, p.t - 1u);
            lse_s[t] = lse[bh * p.t + i];
            dsum_s[t] = dsum[bh * p.t + i];
        }
        workgroupBarrier();

        var s#I = vec2<f32>(0.0);
        var dp#I = vec2<f32>(0.0);
        // Bounded by the head size (HS4 <= 16 vec4s).
        for (var d = 0u; d < HS4; d++) {
            let k#I = ra[lr#I * STRIDE + d];
            let v#I = rb[lr#I * STRIDE + d];
            let q#J = sa[(tx + NX * #Ju) * STRIDE + d];
            let g#J = sb[(tx + NX * #Ju) * STRIDE + d];
            s#I += vec2<f32>(dot(k#I, q0), dot(k#I, q1));
            dp#I += vec2<f32>(dot(v#I, g0), dot(v#I, g1));
        }
        // Query qb + tx + 8j sees key j at or before it.
        let qi = vec2<u32>(qb + tx) + vec2<u32>(0u, NX);
        let ls = vec2<f32>(lse_s[tx], lse_s[tx + NX]);
        let dd = vec2<f32>(dsum_s[tx], dsum_s[tx + NX]);
        let vis#I = (qi >= vec2<u32>(j#I)) & (qi < vec2<u32>(p.t));
        let pr#I = select(vec2<f32>(0.0), exp(s#I - ls), vis#I);
        let m#I = vec2<f32>(keep(bh, qi.x, ij#I), keep(bh, qi.y, ij#I));
        let pm#I = pr#I * m#I;
        let ds#I = pr#I * (m#I * dp#I - dd);
        wa[lr#I * W4 + tx / 4u + 2u * #Ju][tx % 4u] = pm#I[#Ju];
        wb[lr#I * W4 + tx / 4u + 2u * #Ju][tx % 4u] = ds#I[#Ju];
        workgroupBarrier();

        // Bounded by the block: BS / 4 steps of 4 queries.
        for (var qq = 0u; qq < BS; qq += 4u) {
            let w#I = wa[lr#I * W4 + qq / 4u];
            let z#I = wb[lr#I * W4 + qq / 4u];
            let g#K_#C = sb[(qq + #Ku) * STRIDE + cv#C];
            accv#I_#C = fma(vec4<f32>(w#I.x), g0_#C, fma(vec4<f32>(w#I.y), g1_#C, fma(vec4<f32>(w#I.z), g2_#C, fma(vec4<f32>(w#I.w), g3_#C, accv#I_#C))));
            let q#K_#C = sa[(qq + #Ku) * STRIDE + cv#C];
            acck#I_#C = fma(vec4<f32>(z#I.x), q0_#C, fma(vec4<f32>(z#I.y), q1_#C, fma(vec4<f32>(z#I.z), q2_#C, fma(vec4<f32>(z#I.w), q3_#C, acck#I_#C))));
        }
        workgroupBarrier();
    }

    if (j#I < p.t && tx + NX * #Cu < HS4) { store4(j#I, bi, 1u, h, cv#C * 4u, acck#I_#C * p.scale); }
    if (j#I < p.t && tx + NX * #Cu < HS4) { store4(j#I, bi, 2u, h, cv#C * 4u, accv#I_#C); }
}

// Workgroup (x, y) of (2 ceil(t / 32), b * nh): a dq block for x below ceil(t / 32)
// (the last queries, which see the most keys, first), else a dk/dv block (the first
// keys, which the most queries see, first).
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let blocks = (p.t + BR - 1u) / BR;
    if (wg.x < blocks) {
        dq_block(blocks - 1u - wg.x, wg.y, t);
    } else {
        dkdv_block(wg.x - blocks, wg.y, t);
    }
}

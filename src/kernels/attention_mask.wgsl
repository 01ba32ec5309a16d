// Attention-probability dropout (nanoGPT's attn_dropout), joined in front of the four
// attention kernels after hash.wgsl: probability [b, h, i, j] is element
// (bh * t + i) * t + j (wrapping u32) of the mask seeded `p.seed`, by the rule of
// hash.wgsl's `kept` and reference::attention_forward. Returns the factor the probability is
// multiplied by: 0 if dropped, else keep_scale (1 without dropout). Each kernel's
// uniform `p` has `t`, `seed`, `threshold` and `keep_scale`.
fn keep(bh: u32, i: u32, j: u32) -> f32 {
    if (p.threshold == 0u) {
        return p.keep_scale;
    }
    let idx = (bh * p.t + i) * p.t + j;
    return select(0.0, p.keep_scale, (mix(p.seed ^ mix(idx)) >> 8u) >= p.threshold);
}

// Whether probability [bh, i, j] survives the mask (with dropout on): `keep`'s test.
// `keep` spells it out: calling this from there made the H200's backward kernel 10%
// slower.
fn kept_at(bh: u32, i: u32, j: u32) -> bool {
    return kept(p.seed, (bh * p.t + i) * p.t + j, p.threshold);
}


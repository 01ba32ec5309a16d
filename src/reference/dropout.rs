//! Dropout masks: the one keep rule of every dropout site, the GPU kernels'
//! included, and the seeds of each site and step.

/// murmur3's 32-bit finaliser (the same integer arithmetic as `hash.wgsl`).
fn mix(v: u32) -> u32 {
    let mut h = v;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

/// `(threshold, scale)` for drop probability `p`: an element is kept when 24 bits of
/// its hash are at least `threshold`; kept elements are scaled by `1 / (1 - p)`.
pub fn dropout_mask_params(p: f32) -> (u32, f32) {
    let threshold = (p.clamp(0.0, 1.0) as f64 * (1u64 << 24) as f64).round() as u32;
    (threshold, 1.0 / (1.0 - p))
}

/// Inverted dropout: element `i` is kept when `mix(seed ^ mix(i)) >> 8 >= threshold`,
/// and scaled by `1 / (1 - p)`. The mask depends only on `(seed, i)`, so the backward
/// is the same function applied to the gradient.
pub fn dropout(x: &[f32], p: f32, seed: u32) -> Vec<f32> {
    let (threshold, scale) = dropout_mask_params(p);
    x.iter()
        .enumerate()
        .map(|(i, &v)| {
            if kept(seed, i as u32, threshold) {
                v * scale
            } else {
                0.0
            }
        })
        .collect()
}

/// The mask of one dropout site: drop probability `p` and the site's mask seed
/// ([`dropout_seed`]), as [`dropout`] takes them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DropoutMask {
    pub p: f32,
    pub seed: u32,
}

/// Whether element `i` survives dropout with mask seed `seed`: the one keep rule of
/// every dropout site, the GPU kernels' included.
fn kept(seed: u32, i: u32, threshold: u32) -> bool {
    (mix(seed ^ mix(i)) >> 8) >= threshold
}

/// Dropout on attention probabilities (nanoGPT's `attn_dropout`): drop probability
/// `p`, mask seed `seed` (`dropout_seed(run seed, step, 0x10000 + layer)`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttnDropout {
    pub p: f32,
    pub seed: u32,
}

/// The mask element of probability `[bi, h, i, j]` of `nh` heads over `t`
/// positions: `((bi * nh + h) * t + i) * t + j`, wrapping in u32 as the kernels and
/// the PyTorch fixtures compute it.
pub fn attn_dropout_index(t: usize, nh: usize, bi: usize, h: usize, i: usize, j: usize) -> u32 {
    let (t, nh) = (t as u32, nh as u32);
    let row = (bi as u32).wrapping_mul(nh).wrapping_add(h as u32);
    let row = row.wrapping_mul(t).wrapping_add(i as u32);
    row.wrapping_mul(t).wrapping_add(j as u32)
}

/// The factor probability `[bi, h, i, j]` is multiplied by: 0 if dropped, else
/// `1 / (1 - p)`; 1 without dropout.
pub(super) fn attn_keep(
    dropout: Option<AttnDropout>,
    t: usize,
    nh: usize,
    bi: usize,
    h: usize,
    i: usize,
    j: usize,
) -> f64 {
    let Some(d) = dropout else { return 1.0 };
    let (threshold, scale) = dropout_mask_params(d.p);
    let idx = attn_dropout_index(t, nh, bi, h, i, j);
    if kept(d.seed, idx, threshold) {
        scale as f64
    } else {
        0.0
    }
}

/// A mask seed for dropout site `site` at training step `step` of a run seeded `seed`.
pub fn dropout_seed(seed: u64, step: u32, site: u32) -> u32 {
    mix(mix(seed as u32 ^ mix((seed >> 32) as u32)) ^ mix(step) ^ site.wrapping_mul(0x9e37_79b9))
}

/// `x` through `mask`, or `x` itself.
pub(super) fn dropped(x: &[f32], mask: Option<DropoutMask>) -> Vec<f32> {
    match mask {
        Some(m) => dropout(x, m.p, m.seed),
        None => x.to_vec(),
    }
}

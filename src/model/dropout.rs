//! Dropout during training: each site's mask, where the run's
//! [`DropoutPlacement`] applies it.

use crate::config::DropoutPlacement;
use crate::reference::{dropout_seed, AttnDropout, DropoutMask};

/// Dropout during training. Masks are a function of (run seed, step, site), so
/// forward and backward, and the GPU and CPU, draw the same ones.
#[derive(Clone, Copy, Debug)]
pub struct Dropout {
    pub p: f32,
    pub seed: u64,
    pub step: u32,
    pub placement: DropoutPlacement,
}

impl Dropout {
    /// `Some` only when it drops anything.
    pub fn new(p: f32, seed: u64, step: u32, placement: DropoutPlacement) -> Option<Self> {
        (p > 0.0).then_some(Dropout {
            p,
            seed,
            step,
            placement,
        })
    }

    /// The mask of `site`: site 0 is the embedding; a block's attention and MLP
    /// outputs follow.
    pub(super) fn mask(&self, site: u32) -> DropoutMask {
        DropoutMask {
            p: self.p,
            seed: dropout_seed(self.seed, self.step, site),
        }
    }

    /// The attention-probability mask of layer `l`, with nanoGPT's placement.
    pub(super) fn attention(&self, l: usize) -> Option<AttnDropout> {
        (self.placement == DropoutPlacement::Nanogpt).then(|| AttnDropout {
            p: self.p,
            seed: dropout_seed(self.seed, self.step, attn_probs_site(l)),
        })
    }
}

/// The mask of `site`, when there is dropout.
pub(super) fn site_mask(dropout: Option<&Dropout>, site: u32) -> Option<DropoutMask> {
    dropout.map(|d| d.mask(site))
}

pub(super) fn attn_site(l: usize) -> u32 {
    1 + 2 * l as u32
}

pub(super) fn mlp_site(l: usize) -> u32 {
    2 + 2 * l as u32
}

/// Attention probabilities of layer `l`: apart from the residual sites at any depth.
pub(super) fn attn_probs_site(l: usize) -> u32 {
    0x10000 + l as u32
}

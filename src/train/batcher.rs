//! [`Batcher`]: the random windows of a token stream a run trains on.

use crate::rng::Rng;

/// Random windows of a token stream, seeded: the GPU and CPU trainers draw the
/// same batches from the same seed.
#[derive(Clone, Debug)]
pub struct Batcher {
    rng: Rng,
}

impl Batcher {
    /// Also restores a [`Batcher::state`].
    pub fn new(seed: u64) -> Self {
        Batcher {
            rng: Rng::new(seed),
        }
    }

    /// The training windows of a run seeded `seed`: where the GPU and the CPU
    /// trainers start.
    pub fn training(seed: u64) -> Self {
        Batcher::new(seed ^ 0xBA7C4)
    }

    /// Where the stream of windows stands: `Batcher::new(state)` continues it.
    pub fn state(&self) -> u64 {
        self.rng.state()
    }

    /// `batch` windows of `t` inputs and their next-token targets.
    pub fn next(&mut self, tokens: &[u32], batch: usize, t: usize) -> (Vec<u32>, Vec<u32>) {
        let mut inputs = Vec::with_capacity(batch * t);
        let mut targets = Vec::with_capacity(batch * t);
        for _ in 0..batch {
            let start = self.rng.below(tokens.len() - t);
            inputs.extend_from_slice(&tokens[start..start + t]);
            targets.extend_from_slice(&tokens[start + 1..start + t + 1]);
        }
        (inputs, targets)
    }
}

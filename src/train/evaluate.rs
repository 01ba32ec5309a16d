//! Held-out evaluation: the mean loss over fixed windows of the validation split.

use super::batcher::Batcher;
use super::trainer::Trainer;
use crate::error::Result;
use crate::gpu::Path;
use crate::kernels::Mean;
use crate::model::{self, GpuBatch, GpuOps};

/// Seed of the held-out windows [`Trainer::evaluate`] averages: fixed, not derived
/// from the run's seed, so every evaluation of every run on one corpus sees the same
/// batches and their losses compare.
pub const EVAL_SEED: u64 = 0xE7A1_5EED;

/// Held-out batches the CLI averages by default: nanoGPT's `eval_iters`.
pub const CLI_EVAL_BATCHES: usize = 200;

/// Evaluation batches recorded before their losses are read (see
/// [`Trainer::evaluate`]).
const EVAL_BATCHES_AT_ONCE: usize = 16;

impl Trainer {
    /// Mean loss over `eval_batches` held-out batches of `batch` x `context` tokens,
    /// without dropout: the same windows every time ([`EVAL_SEED`]), so evaluations
    /// compare across steps and runs.
    pub async fn evaluate(&mut self) -> Result<f32> {
        // A trainer loaded without its corpus has a vocabulary and no text.
        self.corpus.check_context(self.cfg.context)?;
        let mut batcher = Batcher::new(EVAL_SEED);
        let (b, c) = (self.cfg.batch, self.cfg.context);
        let _evaluate = self.ctx.on_path(Path::Evaluate);
        // The losses of up to EVAL_BATCHES_AT_ONCE batches go to one readback, read
        // once: the GPU goes from batch to batch without waiting for the host, and a
        // long evaluation still hands control back (and bounds the queued work). The
        // buffer they gather in has room for EVAL_BATCHES_AT_ONCE whatever the count
        // (the last run may be short), so every run binds the same one.
        let mut total = 0.0f64;
        let mut left = self.cfg.eval_batches;
        while left > 0 {
            let n = left.min(EVAL_BATCHES_AT_ONCE);
            left -= n;
            let bytes = 4 * EVAL_BATCHES_AT_ONCE;
            let losses = self.ctx.pending_read(bytes as u64);
            // Each batch's mean goes straight into `gathered`, copied out once.
            let gathered = self.ctx.create_pooled(bytes);
            for i in 0..n {
                let (inputs, targets) = batcher.next(&self.corpus.val, b, c);
                // The training steps' batch buffer: the same shape, written ahead of
                // this batch's commands.
                let vocab = self.model.vocab;
                let uploaded = if self.cfg.belt {
                    self.held_batch.write(&self.ctx, &inputs, &targets, vocab);
                    None
                } else {
                    Some(GpuBatch::upload(&self.ctx, &inputs, &targets, vocab, false))
                };
                let batch = uploaded
                    .as_ref()
                    .or(self.held_batch.get())
                    .expect("written above");
                self.ctx.scope(|| {
                    let ops = GpuOps::new(&self.ctx, &self.params);
                    let weights = self.weights();
                    let acts = model::forward(&ops, &self.model, &weights, batch, b, c, None);
                    Mean::default().write(&self.ctx, &acts.losses, b * c, &gathered, i);
                });
            }
            self.ctx
                .copy_to_read(&gathered, 0, &losses, 0, bytes as u64);
            drop(gathered);
            let losses = self.ctx.read::<f32>(losses, n).await?;
            total += losses.iter().map(|&l| f64::from(l)).sum::<f64>();
        }
        let loss = (total / self.cfg.eval_batches as f64) as f32;
        self.val_loss = Some(loss);
        self.last.val_loss = Some(loss);
        Ok(loss)
    }
}

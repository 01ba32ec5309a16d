//! Sampling text from the model: [`Trainer::sample`], and the draw of one token.

use super::trainer::Trainer;
use crate::error::{Error, Result};
use crate::gpu::Path;
use crate::model::{self, GpuBatch, GpuOps};
use crate::rng::Rng;

/// Most characters one [`Trainer::sample`] call generates (each is a forward pass).
pub const MAX_SAMPLE_CHARS: usize = 10_000;

impl Trainer {
    /// `length` characters from the model after `prompt`, with `temperature`
    /// (0: greedy) and `top_k` (0: all). Each token is one forward pass over a full
    /// context window (right-padded; causal attention ignores the padding), so the
    /// shapes never change and sampling reuses the same pooled buffers every time.
    pub async fn sample(
        &mut self,
        prompt: &str,
        length: usize,
        temperature: f32,
        top_k: usize,
    ) -> Result<String> {
        check_sample_settings(length, temperature, ["sample length", "sample temperature"])?;
        let (c, v) = (self.cfg.context, self.model.vocab);
        let mut ids = self.corpus.tokenizer.encode(prompt);
        if ids.len() != prompt.chars().count() {
            let tokenizer = &self.corpus.tokenizer;
            let (at, unknown) = prompt
                .chars()
                .enumerate()
                .find(|(_, ch)| tokenizer.encode(&ch.to_string()).is_empty())
                .expect("a character was skipped");
            return Err(Error::Config(format!(
                "the prompt's character {unknown:?} (character {at}) is not in the model's \
                 vocabulary of {v} characters"
            )));
        }
        if ids.is_empty() {
            ids.push(self.sample_rng.below(v) as u32);
        }
        let first_new = ids.len();
        let _sample = self.ctx.on_path(Path::Sample);
        for _ in 0..length {
            let window = &ids[ids.len().saturating_sub(c)..];
            let last = window.len() - 1;
            let mut inputs = window.to_vec();
            inputs.resize(c, 0);
            // A batch buffer of its own, rewritten for each character.
            let uploaded = if self.cfg.belt {
                self.sample_batch.write(&self.ctx, &inputs, &inputs, v);
                None
            } else {
                Some(GpuBatch::upload(&self.ctx, &inputs, &inputs, v, false))
            };
            let batch = uploaded
                .as_ref()
                .or(self.sample_batch.get())
                .expect("written above");
            let logits = self.ctx.scope(|| {
                let ops = GpuOps::new(&self.ctx, &self.params);
                model::forward(&ops, &self.model, &self.weights(), batch, 1, c, None).logits
            });
            let row = self.ctx.download_at::<f32>(&logits, last * v, v).await?;
            ids.push(pick(&row, temperature, top_k, &mut self.sample_rng) as u32);
        }
        Ok(self.corpus.tokenizer.decode(&ids[first_new..]))
    }
}

/// What [`Trainer::sample`] refuses before any work: a `length` past
/// [`MAX_SAMPLE_CHARS`], a `temperature` below 0 or not finite. `names`: what the
/// caller calls the two (the CLI's flags, the wasm API's arguments).
pub fn check_sample_settings(length: usize, temperature: f32, names: [&str; 2]) -> Result<()> {
    let [length_name, temperature_name] = names;
    if length > MAX_SAMPLE_CHARS {
        return Err(Error::Config(format!(
            "{length_name} must be at most {MAX_SAMPLE_CHARS} characters, got {length}"
        )));
    }
    if !(temperature.is_finite() && temperature >= 0.0) {
        return Err(Error::Config(format!(
            "{temperature_name} must be 0 (greedy) or positive, got {temperature}"
        )));
    }
    Ok(())
}

/// Draws a token from `logits` with temperature and top-k.
fn pick(logits: &[f32], temperature: f32, top_k: usize, rng: &mut Rng) -> usize {
    let best = || {
        (0..logits.len())
            .max_by(|&a, &b| logits[a].total_cmp(&logits[b]))
            .unwrap_or(0)
    };
    if temperature <= 0.0 {
        return best();
    }
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    if top_k > 0 {
        order.truncate(top_k);
    }
    let top = logits[order[0]];
    let weights: Vec<f64> = order
        .iter()
        .map(|&i| (((logits[i] - top) / temperature) as f64).exp())
        .collect();
    let mut r = rng.uniform() as f64 * weights.iter().sum::<f64>();
    for (&i, w) in order.iter().zip(&weights) {
        r -= w;
        if r <= 0.0 {
            return i;
        }
    }
    *order.last().unwrap_or(&best())
}

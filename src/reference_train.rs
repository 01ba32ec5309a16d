//! The CPU reference trainer: the same model, init, batches and optimizer as
//! [`crate::train::Trainer`], computed by [`crate::reference`]. Slow and plain; the
//! step-parity test holds the GPU trainer to it.

use crate::config::TrainConfig;
use crate::data::Corpus;
use crate::error::Result;
use crate::model::{self, CpuBatch, CpuOps, Dropout, GptConfig, GptParams, ParamSpec};
use crate::reference;
use crate::train::Batcher;

pub struct ReferenceTrainer {
    cfg: TrainConfig,
    model: GptConfig,
    specs: Vec<ParamSpec>,
    corpus: Corpus,
    pub params: Vec<Vec<f32>>,
    m: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    batcher: Batcher,
    step: u32,
}

impl ReferenceTrainer {
    pub fn new(cfg: TrainConfig, corpus: Corpus) -> Result<Self> {
        cfg.validate()?;
        let model = cfg.model(corpus.vocab_size());
        model.validate()?;
        corpus.check_context(cfg.context)?;
        let specs = model.params();
        let params = model.init(cfg.seed);
        let zeros: Vec<Vec<f32>> = specs.iter().map(|s| vec![0.0; s.len]).collect();
        Ok(ReferenceTrainer {
            // The GPU trainer's batches.
            batcher: Batcher::training(cfg.seed),
            m: zeros.clone(),
            v: zeros,
            cfg,
            model,
            specs,
            corpus,
            params,
            step: 0,
        })
    }

    /// The next training batch (what the GPU trainer's next step will see).
    pub fn next_batch(&mut self) -> (Vec<u32>, Vec<u32>) {
        self.batcher
            .next(&self.corpus.train, self.cfg.batch, self.cfg.context)
    }

    /// The batch the next [`ReferenceTrainer::step`] will draw, without drawing it.
    pub fn peek_batch(&self) -> (Vec<u32>, Vec<u32>) {
        self.batcher
            .clone()
            .next(&self.corpus.train, self.cfg.batch, self.cfg.context)
    }

    /// Loss and gradients on one batch, with the next step's dropout masks.
    pub fn gradients(&self, inputs: &[u32], targets: &[u32]) -> (f32, Vec<Vec<f32>>) {
        let batch = CpuBatch {
            tokens: inputs.to_vec(),
            targets: targets.to_vec(),
        };
        let (b, t) = (self.cfg.batch, inputs.len() / self.cfg.batch);
        let cfg = &self.cfg;
        let dropout = Dropout::new(cfg.dropout, cfg.seed, self.step + 1, cfg.dropout_placement);
        // The flat parameters stay public (the tests read them); the model takes them
        // by name, for one batch.
        let params = GptParams::from_flat(self.params.clone()).expect("from GptConfig::params");
        let m = &self.model;
        let acts = model::forward(&CpuOps, m, &params, &batch, b, t, dropout.as_ref());
        let loss = model::mean_loss(&CpuOps, &acts)[0];
        let grads = model::backward(&CpuOps, m, &params, &batch, acts, dropout.as_ref());
        (loss, grads.into_flat())
    }

    /// One step: batch, gradients, clip, AdamW. Returns the loss and the grad norm.
    pub fn step(&mut self) -> (f32, f32) {
        let (inputs, targets) = self.next_batch();
        let (loss, grads) = self.gradients(&inputs, &targets);
        self.step += 1; // after `gradients`, which uses the masks of step + 1
        let total: f64 = grads.iter().map(|g| reference::grad_sumsq(g)).sum();
        let (norm, scale) = reference::clip_scale(total, self.cfg.grad_clip);
        for (i, spec) in self.specs.iter().enumerate() {
            let hp = self.cfg.adamw(self.step, spec);
            reference::adamw_update(
                &mut self.params[i],
                &grads[i],
                &mut self.m[i],
                &mut self.v[i],
                &hp,
                scale,
            );
        }
        (loss, norm)
    }
}

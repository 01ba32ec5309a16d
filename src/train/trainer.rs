//! The GPU [`Trainer`]: its state, how it is built, and one step's work (forward,
//! backward, clipping and AdamW) as recorded commands. Running steps is steps.rs,
//! evaluating evaluate.rs, sampling sample.rs.

use super::batcher::Batcher;
use super::stats::{CreatedSoFar, StepStats};
use crate::arena::GradLayout;
use crate::config::TrainConfig;
use crate::data::Corpus;
use crate::error::{Error, Result};
use crate::gpu::{ContextOptions, PooledBuffer, Slice, WgpuContext};
use crate::kernels::{Arenas, GradArena, Mean, Moments, OptimizerStep, ParamArena};
use crate::model::{self, Dropout, GptConfig, GptParams, GpuBatch, GpuOps, HeldBatch, ParamSpec};
use crate::plan::DeviceLimits;
use crate::pool::BufferPoolConfig;
use crate::rng::Rng;

/// Trains a GPT on the GPU, every buffer from the pool.
pub struct Trainer {
    pub(crate) cfg: TrainConfig,
    pub(crate) model: GptConfig,
    pub(crate) specs: Vec<ParamSpec>,
    pub(crate) corpus: Corpus,
    /// The parameters, in the arena whose layout the moments share.
    pub(crate) params: ParamArena,
    /// AdamW's moments of every parameter tensor.
    pub(crate) moments: Moments,
    pub(crate) batcher: Batcher,
    pub(crate) sample_rng: Rng,
    pub(crate) step: u32,
    pub(crate) last: StepStats,
    pub(crate) val_loss: Option<f32>,
    /// When the latest [`Trainer::finish_steps`] call's figures came back (ms).
    pub(crate) last_figures_at: f64,
    /// The batch buffer every training step and evaluation batch binds, rewritten
    /// for each ([`HeldBatch`]); sampling's one-sequence batch has its own.
    pub(crate) held_batch: HeldBatch,
    pub(crate) sample_batch: HeldBatch,
    /// What the context had created when the latest step's stats were counted.
    pub(crate) counted: Option<CreatedSoFar>,
    /// Last, so it drops after the buffers above: its drop destroys what they
    /// returned to the pool.
    pub(crate) ctx: WgpuContext,
}

impl Trainer {
    /// Checks the config against the corpus and the device, then uploads the
    /// initial parameters.
    pub async fn new(cfg: TrainConfig, corpus: Corpus) -> Result<Self> {
        Trainer::with_options(cfg, corpus, ContextOptions::default()).await
    }

    /// [`Trainer::new`] on a context built from `options` (subgroups, dispatch
    /// timing, ...), whose pool, pooling, precision and `submit_every` are the
    /// config's.
    pub async fn with_options(
        cfg: TrainConfig,
        corpus: Corpus,
        options: ContextOptions,
    ) -> Result<Self> {
        cfg.validate()?;
        let model = cfg.model(corpus.vocab_size());
        model.validate()?;
        corpus.check_context(cfg.context)?;
        let ctx = Trainer::open_context(&cfg, corpus.vocab_size() as u64, options).await?;
        let specs = model.params();
        let params = with_f16_copy(&ctx, ParamArena::upload(&ctx, &model.init(cfg.seed))?);
        let moments = Moments::zeroed_in(&ctx, params.layout().clone())?;
        ctx.flush();
        ctx.take_error()?;
        Ok(Trainer {
            batcher: Batcher::training(cfg.seed),
            sample_rng: Rng::new(cfg.seed ^ 0x5A3B1E),
            ctx,
            cfg,
            model,
            specs,
            corpus,
            params,
            moments,
            step: 0,
            last: StepStats::default(),
            val_loss: None,
            last_figures_at: f64::NEG_INFINITY,
            held_batch: HeldBatch::default(),
            sample_batch: HeldBatch::default(),
            counted: None,
        })
    }

    /// The device and pool `cfg` asks for, on `options` otherwise, with `cfg`
    /// checked to fit it ([`crate::plan::check`]; shared with [`Trainer::resume`]).
    pub(crate) async fn open_context(
        cfg: &TrainConfig,
        vocab: u64,
        options: ContextOptions,
    ) -> Result<WgpuContext> {
        let ctx = WgpuContext::with_options(ContextOptions {
            pool: BufferPoolConfig {
                policy: cfg.policy,
                ..options.pool
            },
            pooling: cfg.pool,
            precision: cfg.precision,
            submit_every: cfg.submit_every,
            ..options
        })
        .await?;
        crate::plan::check(cfg, vocab, &DeviceLimits::of(&ctx))?;
        Ok(ctx)
    }

    pub fn context(&self) -> &WgpuContext {
        &self.ctx
    }
    pub fn config(&self) -> &TrainConfig {
        &self.cfg
    }
    pub fn model(&self) -> &GptConfig {
        &self.model
    }
    pub fn corpus(&self) -> &Corpus {
        &self.corpus
    }
    pub fn steps_done(&self) -> u32 {
        self.step
    }
    pub fn stats(&self) -> &StepStats {
        &self.last
    }

    /// Records forward and backward for one batch of training step `step` (whose
    /// dropout masks it uses), the mean loss into float `slot` of `loss_to`; returns
    /// the gradients in an arena from the pool: with `for_optimizer` those the
    /// backward split are left as partials where their slots have room
    /// ([`crate::model::grad_rooms`], planned for the kernels this step runs), which
    /// the optimizer adds as it reads them (dispatches fewer); else every slot
    /// holds a value.
    pub(super) fn gradients(
        &self,
        batch: &GpuBatch,
        step: u32,
        (loss_to, slot): (&PooledBuffer, usize),
        for_optimizer: bool,
    ) -> GradArena {
        let (b, t) = (self.cfg.batch, self.cfg.context);
        let layout = if for_optimizer {
            let rooms = crate::model::grad_rooms(&self.ctx, &self.model, b * t);
            GradLayout::new(self.params.layout(), &rooms, self.ctx.max_binding_size())
        } else {
            GradLayout::values_only(self.params.layout())
        };
        let dropout = Dropout::new(
            self.cfg.dropout,
            self.cfg.seed,
            step,
            self.cfg.dropout_placement,
        );
        let weights = self.weights();
        let forward = GpuOps::new(&self.ctx, &self.params);
        let masks = dropout.as_ref();
        let recompute = self.cfg.recompute;
        let acts = model::forward_with(
            &forward,
            &self.model,
            &weights,
            batch,
            (b, t),
            masks,
            recompute,
        );
        let rows = b * t;
        Mean::default().write(&self.ctx, &acts.losses, rows, loss_to, slot);
        // Drawn for the backward, which writes every gradient into it.
        let grads = self.ctx.allocating_as("gradients", || {
            GradArena::new(&self.ctx, &layout, &self.params)
        });
        let ops = GpuOps::with_grads(&self.ctx, &self.params, &grads);
        model::backward(&ops, &self.model, &weights, batch, acts, masks);
        drop(ops);
        grads
    }

    /// Clips by global norm and applies AdamW; leaves `[norm, scale]` in
    /// [`Moments::norm_scale`] and at floats `slot`, `slot + 1` of `report`.
    pub(super) fn update(&self, grads: &GradArena, step: u32, report: (&PooledBuffer, usize)) {
        // `decay` says which tensors the weight decay applies to.
        let decay: Vec<bool> = self.specs.iter().map(|s| s.decay).collect();
        let hp = self.cfg.adamw_decayed(step);
        let clip = self.cfg.grad_clip;
        let (params, moments) = (&self.params, &self.moments);
        let step = OptimizerStep {
            hp,
            max_norm: clip,
            decay: &decay,
            report: Some(report),
            target: None,
            per_dispatch: None,
        };
        let arenas = Arenas {
            params,
            grads,
            moments,
        };
        step.run(&self.ctx, arenas);
    }

    /// `inputs` and `targets` must be `batch` full windows of `context` tokens (the
    /// gradient of `wpe` covers the positions a batch uses), every id inside the
    /// vocabulary.
    pub(super) fn check_batch(&self, inputs: &[u32], targets: &[u32]) -> Result<()> {
        let (b, c, v) = (self.cfg.batch, self.cfg.context, self.model.vocab);
        if inputs.len() != b * c || targets.len() != b * c {
            return Err(Error::Config(format!(
                "a training batch is {b} sequences of {c} tokens (the batch and context \
                 settings) and as many targets; got {} inputs and {} targets",
                inputs.len(),
                targets.len()
            )));
        }
        if let Some(&id) = inputs.iter().chain(targets).find(|&&id| id as usize >= v) {
            return Err(Error::Config(format!(
                "token id {id} is outside the vocabulary of {v}"
            )));
        }
        Ok(())
    }

    /// Replaces every parameter tensor, in [`GptConfig::params`] order (the order of
    /// [`Trainer::parameters`]); the optimizer's moments stay as they are (zero before
    /// the first step). The PyTorch fixture tests load their weights with it.
    pub fn set_parameters(&mut self, values: &[Vec<f32>]) -> Result<()> {
        if values.len() != self.specs.len() {
            return Err(Error::Config(format!(
                "the model has {} parameter tensors, got {}",
                self.specs.len(),
                values.len()
            )));
        }
        for (spec, v) in self.specs.iter().zip(values) {
            if v.len() != spec.len {
                return Err(Error::Config(format!(
                    "parameter {} has {} elements, got {}",
                    spec.name,
                    spec.len,
                    v.len()
                )));
            }
        }
        let layout = self.params.layout().clone();
        self.params = with_f16_copy(&self.ctx, ParamArena::upload_in(&self.ctx, layout, values)?);
        self.ctx.flush();
        self.ctx.take_error()
    }

    /// Gradients of the loss on one batch, with the next step's dropout masks,
    /// downloaded (for the parity tests).
    #[doc(hidden)]
    pub async fn compute_gradients(
        &mut self,
        inputs: &[u32],
        targets: &[u32],
    ) -> Result<(f32, Vec<Vec<f32>>)> {
        self.check_batch(inputs, targets)?;
        let step = self.step + 1;
        let report = self.ctx.pending_read(4);
        let grads = self.ctx.scope(|| {
            let batch =
                GpuBatch::upload(&self.ctx, inputs, targets, self.model.vocab, self.cfg.belt);
            let loss = self.ctx.create_pooled(4);
            let grads = self.gradients(&batch, step, (&loss, 0), false);
            self.ctx.copy_to_read(&loss, 0, &report, 0, 4);
            grads
        });
        let loss = self.ctx.read::<f32>(report, 1).await?[0];
        let out = grads.download(&self.ctx).await?;
        Ok((loss, out))
    }

    /// The current parameters, downloaded.
    pub async fn parameters(&self) -> Result<Vec<Vec<f32>>> {
        self.params.download(&self.ctx).await
    }

    /// The parameters as the forward and backward passes read them: ranges of
    /// their arena.
    pub(crate) fn weights(&self) -> GptParams<Slice<'_>> {
        GptParams::from_flat(self.params.tensors()).expect("the arena holds the model's tensors")
    }
}

/// `params` with the f16 copy of the weights where the context's f16 matmuls read one
/// ([`crate::kernels::matmul::reads_f16_weights`]).
pub(crate) fn with_f16_copy(ctx: &WgpuContext, params: ParamArena) -> ParamArena {
    if crate::kernels::matmul::reads_f16_weights(ctx) {
        params.with_f16_copy(ctx)
    } else {
        params
    }
}

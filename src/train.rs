//! Training: configuration and presets, batches, the learning-rate schedule, and the
//! GPU [`Trainer`]: one submit a step, the loss read back asynchronously, held-out
//! evaluation and text sampling. [`crate::reference_train`] is its CPU twin.

use crate::arena::GradLayout;
use crate::config::Precision;
use crate::data::Corpus;
use crate::error::{Error, Result};
use crate::gpu::{
    ContextCounters, ContextOptions, PendingRead, PooledBuffer, Reading, Slice, WgpuContext,
};
use crate::kernels::{Arenas, GradArena, Mean, Moments, OptimizerStep, ParamArena};
use crate::model::{
    self, Dropout, DropoutPlacement, GptConfig, GptParams, GpuBatch, GpuOps, ParamSpec,
};
use crate::plan::DeviceLimits;
use crate::pool::{BucketStats, BufferPoolConfig, BufferPoolStats, SizePolicy};
use crate::reference::AdamW;
use crate::rng::Rng;
use crate::tuning::Target;

/// Everything a training run is configured by. Unset fields take the `tiny` preset's
/// values; [`TrainConfig::preset`] gives the others.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct TrainConfig {
    pub layers: usize,
    pub heads: usize,
    pub width: usize,
    /// Tokens a sequence (the model's context).
    pub context: usize,
    /// Sequences a step.
    pub batch: usize,
    /// Peak learning rate (after warmup; cosine decay to `lr / 10` over `steps`).
    pub lr: f32,
    pub warmup: u32,
    /// Length of the schedule.
    pub steps: u32,
    pub weight_decay: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    /// Clip gradients to this global norm (0: no clipping).
    pub grad_clip: f32,
    /// Dropout probability during training, at the sites `dropout_placement`
    /// names (0: none).
    pub dropout: f32,
    /// Where `dropout` applies: `"residual"` (the embeddings and both residual
    /// branches) or `"nanogpt"` (those and the attention probabilities).
    pub dropout_placement: DropoutPlacement,
    pub seed: u64,
    /// Held-out batches (`batch` windows of `context` tokens each) averaged by one
    /// evaluation; the same windows at every evaluation of every run on a corpus
    /// ([`EVAL_SEED`]). The CLI evaluates [`CLI_EVAL_BATCHES`]; the presets keep
    /// fewer for the page.
    pub eval_batches: usize,
    /// [`Trainer::step`] evaluates the held-out loss after every `eval_every`-th
    /// step (0: only when asked).
    pub eval_every: u32,
    /// `false`: every buffer created fresh and destroyed after the step.
    pub pool: bool,
    pub policy: SizePolicy,
    /// Upload each batch through the staging belt (ordered, pooled). `false`: the
    /// seed's `upload`, a fresh never-recycled buffer per tensor per step.
    pub belt: bool,
    /// Operands of the matmuls (`f16`: rounded to f16, f32 accumulation).
    pub precision: Precision,
    /// A step's work goes to the GPU in parts of up to this many dispatches (the
    /// first 4, each next twice the last), so the GPU starts on the first part while
    /// the host records the rest (0: one submit a step). See
    /// [`ContextOptions::submit_every`].
    pub submit_every: u32,
    /// Time every dispatch on the GPU (`tidepool bench kernels`; see
    /// [`ContextOptions::time_dispatches`]). Not a setting of the config surface,
    /// nor saved in checkpoints.
    #[serde(skip)]
    pub time_dispatches: bool,
    /// The kernels' tuning (`None`: by adapter; see [`ContextOptions::kernels`]):
    /// `tidepool bench step` compares both on one adapter. Not a setting of the
    /// config surface, nor saved in checkpoints.
    #[serde(skip)]
    pub kernels: Option<Target>,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig::preset("tiny").expect("tiny exists")
    }
}

/// Upper bounds of the integer settings: far past what any device fits (the plan
/// refuses long before), low enough that no shape product overflows u64.
pub const MAX_LAYERS: usize = 1024;
pub const MAX_WIDTH: usize = 1 << 20;
pub const MAX_TOKENS: usize = 1 << 24;
pub const MAX_EVAL_BATCHES: usize = 100_000;

/// Evaluation batches recorded before their losses are read (see
/// [`Trainer::evaluate`]).
const EVAL_BATCHES_AT_ONCE: usize = 16;

/// Most characters one [`Trainer::sample`] call generates (each is a forward pass).
pub const MAX_SAMPLE_CHARS: usize = 10_000;

/// Most steps [`Trainer::steps`] records before reading their losses.
pub const MAX_STEPS_AT_ONCE: u32 = 1024;

/// Bytes of a call's batches that go up together, at most (one batch if it is
/// larger): their staging chunk, and their buffers waiting for their steps.
const UPLOAD_GROUP_BYTES: usize = 8 << 20;

/// Which of a call's `n` batches, of about `batch_bytes` each, go up together, in
/// order: the first alone, so that the GPU can start on it at once; then as many as
/// fit in [`UPLOAD_GROUP_BYTES`], at least one, each group in the scope of its first
/// step while the GPU runs the steps before. One staging chunk, one map cycle and one
/// run of copies a group; no copy ends a step's compute pass midway.
fn upload_groups(n: usize, batch_bytes: usize) -> Vec<std::ops::Range<usize>> {
    let per = (UPLOAD_GROUP_BYTES / batch_bytes.max(1)).max(1);
    let mut groups = Vec::with_capacity(n.div_ceil(per) + 1);
    groups.push(0..n.min(1));
    let mut at = n.min(1);
    while at < n {
        let end = at.saturating_add(per).min(n);
        groups.push(at..end);
        at = end;
    }
    groups
}

/// What a recorded step's stats need besides its figures: the counters before it.
struct RecordedStep {
    step: u32,
    record_ms: f64,
    before: (ContextCounters, BufferPoolStats),
}

/// Calls of [`Trainer::start_steps`] a caller keeps in flight, at most (the wasm
/// API refuses more): a second hides the wait between calls; more would only queue
/// work a pause must wait for.
pub const MAX_STEPS_IN_FLIGHT: u32 = 2;

/// Steps recorded and submitted ([`Trainer::start_steps`]), their figures on their
/// way back.
pub struct StepsInFlight {
    reading: Reading<f32>,
    recorded: Vec<(RecordedStep, (ContextCounters, BufferPoolStats))>,
    start: f64,
    evaluates: bool,
}

impl StepsInFlight {
    /// An evaluation is due within these steps ([`TrainConfig::eval_every`]): it
    /// runs when they finish, so no steps may be started after these before then.
    pub fn evaluates(&self) -> bool {
        self.evaluates
    }

    /// Waits for the steps' figures, with no trainer borrowed.
    pub async fn figures(self) -> Result<StepFigures> {
        let values = self.reading.values().await?;
        Ok(StepFigures {
            values,
            recorded: self.recorded,
            start: self.start,
            evaluates: self.evaluates,
            at: now_ms(),
        })
    }
}

/// The figures of steps in flight, back on the host, for [`Trainer::finish_steps`].
pub struct StepFigures {
    values: Vec<f32>,
    recorded: Vec<(RecordedStep, (ContextCounters, BufferPoolStats))>,
    start: f64,
    evaluates: bool,
    /// When they came back (ms).
    at: f64,
}

/// Dispatches a part of a step's work (`submit_every`), chosen on the H200 natively
/// and through Dawn (BENCHMARKS.md, "Submitting a step in parts").
pub const DEFAULT_SUBMIT_EVERY: u32 = 32;

/// Names of the presets, smallest first.
pub const PRESETS: [&str; 3] = ["tiny", "small", "shakespeare"];

impl TrainConfig {
    /// `tiny`: trains in seconds on a CPU adapter. `small`: the page's bigger model.
    /// `shakespeare`: nanoGPT's shakespeare_char (6 layers, 6 heads, 384 wide,
    /// context 256, batch 64).
    pub fn preset(name: &str) -> Result<Self> {
        let base = TrainConfig {
            layers: 2,
            heads: 4,
            width: 64,
            context: 64,
            batch: 8,
            lr: 3e-3,
            warmup: 20,
            steps: 1000,
            weight_decay: 0.1,
            beta1: 0.9,
            beta2: 0.99,
            eps: 1e-8,
            grad_clip: 1.0,
            dropout: 0.0,
            dropout_placement: DropoutPlacement::Nanogpt,
            seed: 1337,
            eval_batches: 4,
            eval_every: 0,
            pool: true,
            // Measured (BENCHMARKS.md, policies): on the shakespeare preset pow2/8
            // reserves 1.12x the bytes requested against 1.51x for plain powers of
            // two, with the same hit rate and no buffers created after warm-up.
            // The pool's own default stays the seed's powers of two.
            policy: SizePolicy::Subdivided { subdivisions: 8 },
            belt: true,
            precision: Precision::F32,
            submit_every: DEFAULT_SUBMIT_EVERY,
            time_dispatches: false,
            kernels: None,
        };
        Ok(match name {
            "tiny" => base,
            "small" => TrainConfig {
                layers: 4,
                heads: 4,
                width: 128,
                context: 128,
                batch: 16,
                lr: 1e-3,
                warmup: 50,
                steps: 2000,
                ..base
            },
            "shakespeare" => TrainConfig {
                layers: 6,
                heads: 6,
                width: 384,
                context: 256,
                batch: 64,
                lr: 1e-3,
                warmup: 100,
                steps: 5000,
                eval_batches: 20,
                // nanoGPT's shakespeare_char setting: without it the model memorises
                // the training split after about 750 steps.
                dropout: 0.2,
                dropout_placement: DropoutPlacement::Nanogpt,
                ..base
            },
            other => {
                return Err(Error::Config(format!(
                    "unknown preset {other:?}; choose one of {PRESETS:?}"
                )))
            }
        })
    }

    /// Checks every setting on its own (shapes, ranges, hyperparameters); whether
    /// the whole fits a device is [`crate::plan::check`]'s job. Errors name the
    /// setting, its value and what is allowed.
    // The negated comparisons also reject NaN, which a plain `x <= 0.0` would let in.
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Config(m));
        for (name, value, max) in [
            ("layers", self.layers, MAX_LAYERS),
            ("heads", self.heads, MAX_WIDTH),
            ("width", self.width, MAX_WIDTH),
            ("context", self.context, MAX_TOKENS),
            ("batch", self.batch, MAX_TOKENS),
            ("eval_batches", self.eval_batches, MAX_EVAL_BATCHES),
        ] {
            if !(1..=max).contains(&value) {
                return bad(format!("{name} must be from 1 to {max}, got {value}"));
            }
        }
        if !self.width.is_multiple_of(self.heads) {
            return bad(format!(
                "width {} must be a multiple of heads {}",
                self.width, self.heads
            ));
        }
        if !self.width.is_multiple_of(4) {
            return bad(format!("width {} must be a multiple of 4", self.width));
        }
        let head = self.width / self.heads;
        if head as u64 > crate::plan::MAX_HEAD_SIZE {
            return bad(format!(
                "head size width / heads = {} / {} = {head} is over the {} the attention \
                 kernels support; use more heads (at least {})",
                self.width,
                self.heads,
                crate::plan::MAX_HEAD_SIZE,
                self.width.div_ceil(crate::plan::MAX_HEAD_SIZE as usize)
            ));
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return bad(format!("learning rate must be positive, got {}", self.lr));
        }
        if !(0.0..1.0).contains(&self.beta1) || !(0.0..1.0).contains(&self.beta2) {
            return bad(format!(
                "beta1 and beta2 must be in [0, 1), got {} and {}",
                self.beta1, self.beta2
            ));
        }
        if !(self.eps > 0.0 && self.eps.is_finite()) {
            return bad(format!("eps must be positive, got {}", self.eps));
        }
        if !(self.weight_decay >= 0.0 && self.weight_decay.is_finite()) {
            return bad(format!(
                "weight_decay must not be negative, got {}",
                self.weight_decay
            ));
        }
        if !(self.grad_clip >= 0.0 && self.grad_clip.is_finite()) {
            return bad(format!(
                "grad_clip must not be negative (0: off), got {}",
                self.grad_clip
            ));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return bad(format!("dropout must be in [0, 1), got {}", self.dropout));
        }
        if self.steps == 0 {
            return bad("steps must be at least 1".into());
        }
        Ok(())
    }

    /// The model this config trains on a corpus of `vocab` characters.
    pub fn model(&self, vocab: usize) -> GptConfig {
        GptConfig {
            vocab,
            context: self.context,
            layers: self.layers,
            heads: self.heads,
            width: self.width,
        }
    }

    /// A note for runs whose warm-up is not shorter than the run: their learning rate
    /// rises to the end and never decays (`None` for every other run).
    pub fn schedule_note(&self) -> Option<String> {
        (self.warmup >= self.steps).then(|| {
            format!(
                "the learning rate warms up over {} steps and the run has {}: it rises for \
                 the whole run (to {:.2e}, its peak being {:.2e}) and never decays; \
                 --warmup sets it",
                self.warmup,
                self.steps,
                self.lr_at(self.steps),
                self.lr,
            )
        })
    }

    /// Learning rate at 1-based `step`: linear warmup, then cosine decay to lr/10.
    pub fn lr_at(&self, step: u32) -> f32 {
        let min_lr = self.lr / 10.0;
        if step <= self.warmup {
            return self.lr * step as f32 / self.warmup.max(1) as f32;
        }
        if step >= self.steps {
            return min_lr;
        }
        let progress = (step - self.warmup) as f32 / (self.steps - self.warmup).max(1) as f32;
        min_lr + 0.5 * (self.lr - min_lr) * (1.0 + (std::f32::consts::PI * progress).cos())
    }

    /// AdamW's hyperparameters at 1-based `step` for the tensor `spec`.
    pub fn adamw(&self, step: u32, spec: &ParamSpec) -> AdamW {
        AdamW {
            weight_decay: if spec.decay { self.weight_decay } else { 0.0 },
            ..self.adamw_decayed(step)
        }
    }

    /// The same for a tensor that decays (matrices and embeddings).
    pub fn adamw_decayed(&self, step: u32) -> AdamW {
        AdamW {
            lr: self.lr_at(step),
            beta1: self.beta1,
            beta2: self.beta2,
            eps: self.eps,
            weight_decay: self.weight_decay,
            step,
        }
    }
}

/// Seed of the held-out windows [`Trainer::evaluate`] averages: fixed, not derived
/// from the run's seed, so every evaluation of every run on one corpus sees the same
/// batches and their losses compare.
pub const EVAL_SEED: u64 = 0xE7A1_5EED;

/// Held-out batches the CLI averages by default: nanoGPT's `eval_iters`.
pub const CLI_EVAL_BATCHES: usize = 200;

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

/// Figures of one step (or the latest, from [`Trainer::stats`]).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct StepStats {
    pub step: u32,
    pub loss: f32,
    /// Wall time of the step, from the batch's upload to the loss on the host; for
    /// steps recorded together ([`Trainer::steps`]), the call's time over its steps.
    pub ms: f64,
    /// The host's part of it: recording and submitting the step's work (the GPU
    /// runs the parts submitted so far meanwhile, see `submit_every`).
    pub record_ms: f64,
    pub tokens_per_s: f64,
    pub lr: f32,
    pub grad_norm: f32,
    /// Pool hits / acquires since the start.
    pub hit_rate: f64,
    /// The same, this step only.
    pub step_hit_rate: f64,
    /// GPU buffers the context has created since the start.
    pub buffers_created: u64,
    /// Created during this step: 0 in steady state with the pool.
    pub buffers_created_step: u64,
    /// Bind groups created during this step: 0 in steady state (they are cached).
    pub bind_groups_created_step: u64,
    /// Compute dispatches recorded during this step (forward, backward, optimizer).
    pub dispatches_step: u64,
    /// Command encoders created during this step (one a submit).
    pub encoders_created_step: u64,
    /// Pipelines created during this step: 0 after the first.
    pub pipelines_created_step: u64,
    pub bytes_held: u64,
    pub peak_bytes_held: u64,
    pub bytes_in_use: u64,
    pub peak_bytes_in_use: u64,
    pub peak_bytes_requested: u64,
    pub total_pooled: usize,
    pub buckets: Vec<BucketStats>,
    pub dispatches: u64,
    pub submits: u64,
    /// The latest held-out loss, if evaluated.
    pub val_loss: Option<f32>,
    pub pool: BufferPoolStats,
    pub context: ContextCounters,
}

/// Milliseconds from an arbitrary origin: `performance.now()` on the web.
pub fn now_ms() -> f64 {
    #[cfg(target_arch = "wasm32")]
    {
        use wasm_bindgen::{JsCast, JsValue};
        // Looked up once: a step reads the clock a few times, and each lookup
        // crosses into JavaScript twice more than the call itself.
        thread_local! {
            static NOW: Option<(JsValue, js_sys::Function)> = {
                let perf = js_sys::Reflect::get(&js_sys::global(), &"performance".into()).ok();
                perf.and_then(|p| {
                    let now = js_sys::Reflect::get(&p, &"now".into()).ok()?;
                    Some((p, now.dyn_into::<js_sys::Function>().ok()?))
                })
            };
        }
        NOW.with(|now| {
            now.as_ref()
                .and_then(|(perf, now)| now.call0(perf).ok()?.as_f64())
        })
        .unwrap_or_else(js_sys::Date::now)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        use std::sync::OnceLock;
        static START: OnceLock<std::time::Instant> = OnceLock::new();
        START
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_secs_f64()
            * 1e3
    }
}

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
    /// Last, so it drops after the buffers above: its drop destroys what they
    /// returned to the pool.
    pub(crate) ctx: WgpuContext,
}

impl Trainer {
    /// Checks the config against the corpus and the device, then uploads the
    /// initial parameters.
    pub async fn new(cfg: TrainConfig, corpus: Corpus) -> Result<Self> {
        cfg.validate()?;
        let model = cfg.model(corpus.vocab_size());
        model.validate()?;
        corpus.check_context(cfg.context)?;
        let ctx = Trainer::open_context(&cfg, corpus.vocab_size() as u64).await?;
        let specs = model.params();
        let params = ParamArena::upload(&ctx, &model.init(cfg.seed))?;
        let moments = Moments::zeroed_in(&ctx, params.layout().clone())?;
        ctx.flush();
        ctx.take_error()?;
        Ok(Trainer {
            batcher: Batcher::new(cfg.seed ^ 0xBA7C4),
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
        })
    }

    /// The device and pool `cfg` asks for, with `cfg` checked to fit it
    /// ([`crate::plan::check`]; shared with [`Trainer::resume`]).
    pub(crate) async fn open_context(cfg: &TrainConfig, vocab: u64) -> Result<WgpuContext> {
        let ctx = WgpuContext::with_options(ContextOptions {
            pool: BufferPoolConfig {
                policy: cfg.policy,
                ..Default::default()
            },
            pooling: cfg.pool,
            precision: cfg.precision,
            submit_every: cfg.submit_every,
            time_dispatches: cfg.time_dispatches,
            kernels: cfg.kernels,
            ..Default::default()
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

    /// One training step: upload a batch, forward, backward, clip, AdamW, all in one
    /// submit; then await the loss.
    pub async fn step(&mut self) -> Result<StepStats> {
        // A trainer resumed without its corpus has a vocabulary and no text.
        self.corpus.check_context(self.cfg.context)?;
        let (c, b) = (self.cfg.context, self.cfg.batch);
        let (inputs, targets) = self.batcher.next(&self.corpus.train, b, c);
        self.step_on(&inputs, &targets).await
    }

    /// One training step on a given batch instead of the next training windows
    /// (`batch` x `context` tokens), with this step's dropout masks and learning rate.
    /// The PyTorch fixture tests use it.
    pub async fn step_on(&mut self, inputs: &[u32], targets: &[u32]) -> Result<StepStats> {
        self.check_batch(inputs, targets)?;
        let start = now_ms();
        // Counted from before the readback is taken: a first step that creates it
        // has the creation among its own.
        let before = self.counters_now();
        let report = self.ctx.pending_read(16);
        let gathered = self.ctx.create_pooled(16);
        let (vocab, belt) = (self.model.vocab, self.cfg.belt);
        let batch = |ctx: &WgpuContext| GpuBatch::upload(ctx, inputs, targets, vocab, belt);
        let figures = ((&gathered, 0), Some(&report));
        let recorded = self.record_step(batch, (start, before), figures, false);
        drop(gathered);
        let figures = self.ctx.read::<f32>(report, 3).await?;
        self.step = recorded.step;
        let after = (self.ctx.counters(), self.ctx.pool_stats());
        self.last = self.stats_of(&recorded, &figures, now_ms() - start, after)?;
        if self.cfg.eval_every > 0 && recorded.step.is_multiple_of(self.cfg.eval_every) {
            self.evaluate().await?;
        }
        Ok(self.last.clone())
    }

    /// `n` training steps (1 to [`MAX_STEPS_AT_ONCE`]) recorded back to back, their
    /// losses read once at the end: the GPU never waits for the host to read a loss,
    /// so it goes from one step to the next while the host records. Each step's `ms`
    /// is the whole call's time over `n`. A loss that is not finite fails the call
    /// naming its step; the steps after it have run. An evaluation due within the
    /// `n` steps (`eval_every`) runs once, after them.
    pub async fn steps(&mut self, n: u32) -> Result<Vec<StepStats>> {
        let in_flight = self.start_steps(n)?;
        let figures = in_flight.figures().await?;
        self.finish_steps(figures).await
    }

    /// [`Trainer::steps`] in two halves, so that the next steps can be recorded and
    /// submitted while these ones' figures come back (the GPU then never waits for
    /// the host between calls; in a browser that wait is a millisecond or more, see
    /// BENCHMARKS.md): this one records and submits `n` steps; their figures come
    /// with [`StepsInFlight::figures`], which needs no trainer, and their stats from
    /// [`Trainer::finish_steps`], in the order the calls were started.
    pub fn start_steps(&mut self, n: u32) -> Result<StepsInFlight> {
        if !(1..=MAX_STEPS_AT_ONCE).contains(&n) {
            return Err(Error::Config(format!(
                "steps at once must be 1 to {MAX_STEPS_AT_ONCE}, got {n}"
            )));
        }
        self.corpus.check_context(self.cfg.context)?;
        let (c, b) = (self.cfg.context, self.cfg.batch);
        let start = now_ms();
        // Each step's [loss, norm, scale] at 4 floats a step, gathered on the GPU by
        // the kernels that make them and copied out once, at the last step's end.
        let figures = self.ctx.pending_read(16 * u64::from(n));
        let gathered = self.ctx.create_pooled(16 * n as usize);
        let (vocab, belt) = (self.model.vocab, self.cfg.belt);
        // A batch packed: tokens, targets, positions (u32 each), the token offsets,
        // and up to an alignment's padding before each of the last three (in u64:
        // wasm32's usize is 32 bits; a batch past it goes up alone anyway).
        let tokens = b as u64 * c as u64;
        let batch_bytes = 4 * (3 * tokens + vocab as u64 + 1) + 3 * 256;
        let batch_bytes = usize::try_from(batch_bytes).unwrap_or(usize::MAX);
        let mut groups = upload_groups(n as usize, batch_bytes).into_iter();
        let mut uploaded: Vec<GpuBatch> = Vec::new();
        let mut recorded = Vec::new();
        let mut evaluates = false;
        for i in 0..n as usize {
            let at = (now_ms(), self.counters_now());
            // The next group's windows, when the last group's batches are used up.
            let host: Vec<(Vec<u32>, Vec<u32>)> = if uploaded.is_empty() {
                let group = groups.next().expect("the groups cover every step");
                group
                    .map(|_| self.batcher.next(&self.corpus.train, b, c))
                    .collect()
            } else {
                Vec::new()
            };
            let batch = |ctx: &WgpuContext| {
                if !host.is_empty() {
                    let pairs: Vec<(&[u32], &[u32])> =
                        host.iter().map(|(x, y)| (&x[..], &y[..])).collect();
                    uploaded = GpuBatch::upload_all(ctx, &pairs, vocab, belt);
                    uploaded.reverse();
                }
                uploaded.pop().expect("one batch a step")
            };
            // Steps after the first go out in one submit each: the GPU is still busy
            // with the one before, so parts would only add host work.
            let last = (i + 1 == n as usize).then_some(&figures);
            let step = self.record_step(batch, at, ((&gathered, 4 * i), last), i > 0);
            self.step = step.step;
            evaluates |= self.cfg.eval_every > 0 && step.step.is_multiple_of(self.cfg.eval_every);
            let after = (self.ctx.counters(), self.ctx.pool_stats());
            recorded.push((step, after));
        }
        drop(gathered);
        Ok(StepsInFlight {
            reading: self.ctx.start_read(figures, 4 * n as usize)?,
            recorded,
            start,
            evaluates,
        })
    }

    /// The stats of steps started by [`Trainer::start_steps`], once their figures
    /// are back; calls started one after another finish in the same order. An
    /// evaluation due within them runs now, so their caller starts no steps after
    /// them before it (see [`StepsInFlight::evaluates`]).
    pub async fn finish_steps(&mut self, figures: StepFigures) -> Result<Vec<StepStats>> {
        let StepFigures {
            values,
            recorded,
            start,
            evaluates,
            at,
        } = figures;
        // A call started while the one before was in flight counts from the end of
        // that one: its ms is what it added to the run, not how long it waited. (Two
        // calls' figures can come back in one task, the second adding no time a
        // timer can see: a microsecond, so tokens/s stays finite.)
        let n = recorded.len() as f64;
        let ms = ((at - start.max(self.last_figures_at)) / n).max(1e-3);
        self.last_figures_at = at;
        let mut stats = Vec::new();
        for (i, (step, after)) in recorded.into_iter().enumerate() {
            stats.push(self.stats_of(&step, &values[4 * i..4 * i + 3], ms, after)?);
        }
        self.last = stats.last().cloned().expect("n >= 1");
        if evaluates {
            self.evaluate().await?;
            stats.last_mut().expect("n >= 1").val_loss = self.val_loss;
        }
        Ok(stats)
    }

    /// The context's and the pool's counters now.
    fn counters_now(&self) -> (ContextCounters, BufferPoolStats) {
        (self.ctx.counters(), self.ctx.pool_stats())
    }

    /// Records training step `self.step + 1` on the batch that `batch` uploads or
    /// hands over, in the step's scope (one scope: forward, backward, clip, AdamW),
    /// and returns what its stats need (`start`: its start time and counters). Its
    /// [loss, norm, scale] go to floats `at..at + 3` of `gathered`, written by the
    /// kernels that make them (a copy would end the compute pass); `report`: the
    /// readback all of `gathered` is copied into at the step's end. `whole`: in one
    /// submit ([`WgpuContext::scope_in_one_submit`]), else in the context's parts.
    fn record_step(
        &mut self,
        batch: impl FnOnce(&WgpuContext) -> GpuBatch,
        (start, before): (f64, (ContextCounters, BufferPoolStats)),
        ((gathered, at), report): ((&PooledBuffer, usize), Option<&PendingRead>),
        whole: bool,
    ) -> RecordedStep {
        let step = self.step + 1;
        let record = || {
            let batch = batch(&self.ctx);
            let grads = self.gradients(&batch, step, (gathered, at), true);
            self.update(&grads, step, (gathered, at + 1));
            if let Some(report) = report {
                self.ctx
                    .copy_to_read(gathered, 0, report, 0, gathered.len() as u64);
            }
        };
        if whole {
            self.ctx.scope_in_one_submit(record);
        } else {
            self.ctx.scope(record);
        }
        RecordedStep {
            step,
            record_ms: now_ms() - start,
            before,
        }
    }

    /// A recorded step's stats from its [loss, norm, scale], its wall time and the
    /// counters after it; an error if the loss is not finite.
    fn stats_of(
        &self,
        recorded: &RecordedStep,
        figures: &[f32],
        ms: f64,
        (counters, pool): (ContextCounters, BufferPoolStats),
    ) -> Result<StepStats> {
        let (b, c) = (self.cfg.batch, self.cfg.context);
        let (step, (before_counters, before_pool)) = (recorded.step, &recorded.before);
        let acquires = |p: &BufferPoolStats| p.hits + p.misses + p.oversize_requests;
        let step_acquires = acquires(&pool) - acquires(before_pool);
        let loss = figures[0];
        if !loss.is_finite() {
            return Err(Error::Gpu(format!(
                "the loss became {loss} at step {step}; lower the learning rate"
            )));
        }
        Ok(StepStats {
            step,
            loss,
            ms,
            record_ms: recorded.record_ms,
            tokens_per_s: (b * c) as f64 / (ms / 1e3),
            lr: self.cfg.lr_at(step),
            grad_norm: figures[1],
            hit_rate: pool.hit_rate(),
            step_hit_rate: if step_acquires == 0 {
                0.0
            } else {
                (pool.hits - before_pool.hits) as f64 / step_acquires as f64
            },
            buffers_created: counters.buffers_created,
            buffers_created_step: counters.buffers_created - before_counters.buffers_created,
            bind_groups_created_step: counters.bind_groups_created
                - before_counters.bind_groups_created,
            dispatches_step: counters.dispatches - before_counters.dispatches,
            encoders_created_step: counters.encoders_created - before_counters.encoders_created,
            pipelines_created_step: counters.pipelines_created - before_counters.pipelines_created,
            bytes_held: pool.bytes_held,
            peak_bytes_held: pool.peak_bytes_held,
            bytes_in_use: counters.bytes_in_use,
            peak_bytes_in_use: counters.peak_bytes_in_use,
            peak_bytes_requested: counters.peak_bytes_requested_in_use,
            total_pooled: pool.total_pooled,
            buckets: pool.buckets.clone(),
            dispatches: counters.dispatches,
            submits: counters.submits,
            val_loss: self.val_loss,
            pool,
            context: counters,
        })
    }

    /// Records forward and backward for one batch of training step `step` (whose
    /// dropout masks it uses), the mean loss into float `slot` of `loss_to`; returns
    /// the gradients in an arena from the pool: with `for_optimizer` those the
    /// backward split are left as partials where their slots have room
    /// ([`crate::model::grad_rooms`], planned for the kernels this step runs), which
    /// the optimizer adds as it reads them (dispatches fewer); else every slot
    /// holds a value.
    fn gradients(
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
        let forward = GpuOps::new(&self.ctx);
        let masks = dropout.as_ref();
        let acts = model::forward(&forward, &self.model, &weights, batch, b, t, masks);
        let rows = b * t;
        Mean::default().write(&self.ctx, &acts.losses, rows, loss_to, slot);
        // Drawn for the backward, which writes every gradient into it.
        let grads = self.ctx.allocating_as("gradients", || {
            GradArena::new(&self.ctx, &layout, &self.params)
        });
        let ops = GpuOps::with_grads(&self.ctx, &grads);
        model::backward(&ops, &self.model, &weights, batch, acts, masks);
        drop(ops);
        grads
    }

    /// Clips by global norm and applies AdamW; leaves `[norm, scale]` in
    /// [`Moments::norm_scale`] and at floats `slot`, `slot + 1` of `report`.
    fn update(&self, grads: &GradArena, step: u32, report: (&PooledBuffer, usize)) {
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
    fn check_batch(&self, inputs: &[u32], targets: &[u32]) -> Result<()> {
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
        self.params = ParamArena::upload_in(&self.ctx, self.params.layout().clone(), values)?;
        self.ctx.flush();
        self.ctx.take_error()
    }

    /// Gradients of the loss on one batch, with the next step's dropout masks,
    /// downloaded (for the parity tests).
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

    /// Mean loss over `eval_batches` held-out batches of `batch` x `context` tokens,
    /// without dropout: the same windows every time ([`EVAL_SEED`]), so evaluations
    /// compare across steps and runs.
    pub async fn evaluate(&mut self) -> Result<f32> {
        let mut batcher = Batcher::new(EVAL_SEED);
        let (b, c) = (self.cfg.batch, self.cfg.context);
        // The losses of up to EVAL_BATCHES_AT_ONCE batches go to one readback, read
        // once: the GPU goes from batch to batch without waiting for the host, and a
        // long evaluation still hands control back (and bounds the queued work).
        let mut total = 0.0f64;
        let mut left = self.cfg.eval_batches;
        while left > 0 {
            let n = left.min(EVAL_BATCHES_AT_ONCE);
            left -= n;
            let losses = self.ctx.pending_read(4 * n as u64);
            // Each batch's mean goes straight into `gathered`, copied out once.
            let gathered = self.ctx.create_pooled(4 * n);
            for i in 0..n {
                let (inputs, targets) = batcher.next(&self.corpus.val, b, c);
                self.ctx.scope(|| {
                    let batch = GpuBatch::upload(
                        &self.ctx,
                        &inputs,
                        &targets,
                        self.model.vocab,
                        self.cfg.belt,
                    );
                    let ops = GpuOps::new(&self.ctx);
                    let weights = self.weights();
                    let acts = model::forward(&ops, &self.model, &weights, &batch, b, c, None);
                    Mean::default().write(&self.ctx, &acts.losses, b * c, &gathered, i);
                });
            }
            self.ctx
                .copy_to_read(&gathered, 0, &losses, 0, 4 * n as u64);
            drop(gathered);
            let losses = self.ctx.read::<f32>(losses, n).await?;
            total += losses.iter().map(|&l| f64::from(l)).sum::<f64>();
        }
        let loss = (total / self.cfg.eval_batches as f64) as f32;
        self.val_loss = Some(loss);
        self.last.val_loss = Some(loss);
        Ok(loss)
    }

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
        for _ in 0..length {
            let window = &ids[ids.len().saturating_sub(c)..];
            let last = window.len() - 1;
            let mut inputs = window.to_vec();
            inputs.resize(c, 0);
            let logits = self.ctx.scope(|| {
                let batch = GpuBatch::upload(&self.ctx, &inputs, &inputs, v, self.cfg.belt);
                let ops = GpuOps::new(&self.ctx);
                model::forward(&ops, &self.model, &self.weights(), &batch, 1, c, None).logits
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
pub fn pick(logits: &[f32], temperature: f32, top_k: usize, rng: &mut Rng) -> usize {
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

#[cfg(test)]
mod tests {
    use super::{upload_groups, TrainConfig, UPLOAD_GROUP_BYTES};

    /// Only a run no longer than its warm-up gets the note, which gives the rate it
    /// ends at and names the flag.
    #[test]
    fn a_run_inside_its_warm_up_is_noted() {
        let cfg = |steps| TrainConfig {
            steps,
            warmup: 20,
            lr: 3e-3,
            ..TrainConfig::default()
        };
        assert_eq!(cfg(21).schedule_note(), None);
        assert_eq!(cfg(1000).schedule_note(), None);
        let note = cfg(10)
            .schedule_note()
            .expect("10 steps of a 20-step warm-up");
        assert!(note.contains("over 20 steps and the run has 10"), "{note}");
        assert!(
            note.contains("to 1.50e-3, its peak being 3.00e-3"),
            "{note}"
        );
        assert!(note.contains("--warmup"), "{note}");
        let note = cfg(20)
            .schedule_note()
            .expect("a warm-up as long as the run");
        assert!(note.contains("to 3.00e-3"), "{note}");
    }

    /// The groups cover a call's steps in order, the first alone, and hold at most
    /// the cap's worth of batches unless one batch is larger.
    #[test]
    fn upload_groups_cover_the_steps_within_the_cap() {
        for n in [1usize, 2, 3, 16, 1024] {
            for bytes in [
                1,
                7_000,
                200_000,
                UPLOAD_GROUP_BYTES,
                3 * UPLOAD_GROUP_BYTES,
            ] {
                let groups = upload_groups(n, bytes);
                assert_eq!(groups[0], 0..1, "n {n}, {bytes} bytes");
                let mut at = 0;
                for g in &groups {
                    assert_eq!(g.start, at, "n {n}, {bytes} bytes: {groups:?}");
                    assert!(!g.is_empty(), "n {n}, {bytes} bytes: {groups:?}");
                    assert!(
                        g.len() == 1 || g.len() * bytes <= UPLOAD_GROUP_BYTES,
                        "n {n}, {bytes} bytes: {groups:?}"
                    );
                    at = g.end;
                }
                assert_eq!(at, n, "n {n}, {bytes} bytes: {groups:?}");
            }
        }
        // The page's tiny preset, 16 a call: the first, then the other 15 together.
        assert_eq!(upload_groups(16, 7_000), vec![0..1, 1..16]);
    }
}

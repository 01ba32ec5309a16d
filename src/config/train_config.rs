//! [`TrainConfig`]: every setting of a training run, its presets and the bounds each
//! setting is checked against, and the learning-rate schedule it defines.

use crate::error::{Error, Result};
use crate::pool::SizePolicy;

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
    /// ([`EVAL_SEED`](crate::train::EVAL_SEED)). The CLI evaluates [`CLI_EVAL_BATCHES`](crate::train::CLI_EVAL_BATCHES); the presets keep
    /// fewer for the page.
    pub eval_batches: usize,
    /// [`Trainer::step`](crate::train::Trainer::step) evaluates the held-out loss after every `eval_every`-th
    /// step (0: only when asked).
    pub eval_every: u32,
    /// `false`: every buffer created fresh and destroyed after the step.
    pub pool: bool,
    pub policy: SizePolicy,
    /// Write each batch into the trainer's batch buffer, kept for the run (see
    /// [`crate::model::HeldBatch`]). `false`:
    /// [`WgpuContext::upload`](crate::gpu::WgpuContext::upload), a fresh
    /// never-recycled buffer per tensor per step.
    pub belt: bool,
    /// Operands of the matmuls (`f16`: rounded to f16, f32 accumulation).
    pub precision: Precision,
    /// A step's work goes to the GPU in parts of up to this many dispatches (the
    /// first 4, each next twice the last), so the GPU starts on the first part while
    /// the host records the rest (0: one submit a step). See
    /// [`ContextOptions::submit_every`](crate::gpu::ContextOptions::submit_every).
    pub submit_every: u32,
    /// Drop each block's layernorm outputs after the forward uses them and make them
    /// again in the backward, from the layernorm's input that the backward keeps
    /// anyway: less memory live across the step for one more layernorm pass each
    /// (see [`crate::model::backward`]). A setting of the run, not of the model.
    pub recompute: bool,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig::preset("tiny").expect("tiny exists")
    }
}

/// What the matmuls multiply: f32 operands, or operands rounded to f16 (to nearest
/// even) with f32 accumulation. Everything else (activations, gradients, master
/// weights, optimizer state) stays f32 either way.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    #[default]
    F32,
    F16,
}

impl Precision {
    pub const ALL: [Precision; 2] = [Precision::F32, Precision::F16];

    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
        }
    }

    pub fn parse(s: &str) -> Option<Precision> {
        Precision::ALL.into_iter().find(|p| p.name() == s)
    }
}

/// Where dropout applies during training.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DropoutPlacement {
    /// The embeddings and the output of each block's two residual branches.
    Residual,
    /// Those plus the attention probabilities: nanoGPT's placement.
    #[default]
    Nanogpt,
}

impl DropoutPlacement {
    pub const ALL: [DropoutPlacement; 2] = [DropoutPlacement::Residual, DropoutPlacement::Nanogpt];

    /// As the settings spell it (`residual`, `nanogpt`).
    pub fn name(self) -> &'static str {
        match self {
            DropoutPlacement::Residual => "residual",
            DropoutPlacement::Nanogpt => "nanogpt",
        }
    }

    pub fn parse(s: &str) -> Option<DropoutPlacement> {
        DropoutPlacement::ALL.into_iter().find(|p| p.name() == s)
    }
}

/// Upper bounds of the integer settings: far past what any device fits (the plan
/// refuses long before), low enough that no shape product overflows u64.
pub const MAX_LAYERS: usize = 1024;
pub const MAX_WIDTH: usize = 1 << 20;
pub const MAX_TOKENS: usize = 1 << 24;
pub const MAX_EVAL_BATCHES: usize = 100_000;

/// Largest head (`width / heads`) the attention kernels are compiled for.
pub const MAX_HEAD_SIZE: u64 = 128;

/// Largest `submit_every`: past any step's dispatch count, so larger values would
/// mean the same as 0.
pub const MAX_SUBMIT_EVERY: u32 = 1 << 20;

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
            // The pool's own default stays plain powers of two.
            policy: SizePolicy::Subdivided { subdivisions: 8 },
            belt: true,
            precision: Precision::F32,
            submit_every: DEFAULT_SUBMIT_EVERY,
            recompute: false,
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
                    "unknown preset {other:?}; choose one of {}",
                    PRESETS.join(", ")
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
        if head as u64 > MAX_HEAD_SIZE {
            return bad(format!(
                "head size width / heads = {} / {} = {head} is over the {} the attention \
                 kernels support; use more heads (at least {})",
                self.width,
                self.heads,
                MAX_HEAD_SIZE,
                self.width.div_ceil(MAX_HEAD_SIZE as usize)
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
}

/// Every preset's name and its settings, smallest first.
pub fn presets() -> Vec<(&'static str, TrainConfig)> {
    PRESETS
        .iter()
        .map(|&name| {
            (
                name,
                TrainConfig::preset(name).expect("listed presets exist"),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::TrainConfig;

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
}

//! [`Overrides`]: the settings a user gives, each optional, resolved against a preset.

use super::train_config::{DropoutPlacement, Precision, TrainConfig, MAX_SUBMIT_EVERY};
use crate::error::{Error, Result};
use crate::pool::{SizePolicy, MAX_SUBDIVISIONS};

/// The preset used when none is named.
pub const DEFAULT_PRESET: &str = "tiny";

/// Overrides of a preset's settings; every field is optional.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(all(feature = "cli", not(target_arch = "wasm32")), derive(clap::Args))]
#[serde(default, deny_unknown_fields)]
pub struct Overrides {
    /// Model and training preset: tiny, small or shakespeare (default tiny).
    #[cfg_attr(all(feature = "cli", not(target_arch = "wasm32")), arg(long, value_parser = crate::config::PRESETS, help_heading = "Model"))]
    pub preset: Option<String>,
    /// Transformer blocks.
    #[cfg_attr(
        all(feature = "cli", not(target_arch = "wasm32")),
        arg(long, allow_negative_numbers = true, help_heading = "Model")
    )]
    pub layers: Option<f64>,
    /// Attention heads (width / heads is the head size, at most 128).
    #[cfg_attr(
        all(feature = "cli", not(target_arch = "wasm32")),
        arg(long, allow_negative_numbers = true, help_heading = "Model")
    )]
    pub heads: Option<f64>,
    /// Embedding width (a multiple of 4 and of heads).
    #[cfg_attr(
        all(feature = "cli", not(target_arch = "wasm32")),
        arg(long, allow_negative_numbers = true, help_heading = "Model")
    )]
    pub width: Option<f64>,
    /// Tokens a sequence.
    #[cfg_attr(
        all(feature = "cli", not(target_arch = "wasm32")),
        arg(long, allow_negative_numbers = true, help_heading = "Model")
    )]
    pub context: Option<f64>,
    /// Sequences a step.
    #[cfg_attr(
        all(feature = "cli", not(target_arch = "wasm32")),
        arg(long, allow_negative_numbers = true, help_heading = "Training")
    )]
    pub batch: Option<f64>,
    /// Peak learning rate.
    #[cfg_attr(
        all(feature = "cli", not(target_arch = "wasm32")),
        arg(long, allow_negative_numbers = true, help_heading = "Training")
    )]
    pub lr: Option<f64>,
    /// Training steps (the schedule's length).
    #[cfg_attr(
        all(feature = "cli", not(target_arch = "wasm32")),
        arg(long, allow_negative_numbers = true, help_heading = "Training")
    )]
    pub steps: Option<f64>,
    /// Warm-up steps of the learning rate.
    #[cfg_attr(
        all(feature = "cli", not(target_arch = "wasm32")),
        arg(long, allow_negative_numbers = true, help_heading = "Training")
    )]
    pub warmup: Option<f64>,
    /// Dropout probability during training (shakespeare preset: 0.2).
    #[cfg_attr(
        all(feature = "cli", not(target_arch = "wasm32")),
        arg(long, allow_negative_numbers = true, help_heading = "Training")
    )]
    pub dropout: Option<f64>,
    /// Where dropout applies: residual or nanogpt (also the attention probabilities).
    #[cfg_attr(all(feature = "cli", not(target_arch = "wasm32")), arg(long, value_parser = DropoutPlacement::ALL.map(DropoutPlacement::name), help_heading = "Training"))]
    pub dropout_placement: Option<String>,
    /// AdamW weight decay of the matrices and embeddings.
    #[cfg_attr(
        all(feature = "cli", not(target_arch = "wasm32")),
        arg(long, allow_negative_numbers = true, help_heading = "Training")
    )]
    pub weight_decay: Option<f64>,
    /// Clip gradients to this global norm (0: off).
    #[cfg_attr(
        all(feature = "cli", not(target_arch = "wasm32")),
        arg(long, allow_negative_numbers = true, help_heading = "Training")
    )]
    pub grad_clip: Option<f64>,
    /// Seed of the initial weights, batches and dropout masks.
    #[cfg_attr(
        all(feature = "cli", not(target_arch = "wasm32")),
        arg(long, allow_negative_numbers = true, help_heading = "Training")
    )]
    pub seed: Option<f64>,
    /// Evaluate the held-out loss every N steps (0: only when asked / at the end).
    #[cfg_attr(
        all(feature = "cli", not(target_arch = "wasm32")),
        arg(long, allow_negative_numbers = true, help_heading = "Training")
    )]
    pub eval_every: Option<f64>,
    /// Held-out batches an evaluation averages.
    #[cfg_attr(
        all(feature = "cli", not(target_arch = "wasm32")),
        arg(long, allow_negative_numbers = true, help_heading = "Training")
    )]
    pub eval_batches: Option<f64>,
    /// Reuse buffers through the pool (false: create and destroy every buffer).
    #[cfg_attr(
        all(feature = "cli", not(target_arch = "wasm32")),
        arg(long, help_heading = "Pool")
    )]
    pub pool: Option<bool>,
    /// Size policy: pow2, pow2/N (N a power of two up to 1024), exact, or planned
    /// (after one traced step, each tensor at a planned range of a few arenas).
    #[cfg_attr(
        all(feature = "cli", not(target_arch = "wasm32")),
        arg(long, help_heading = "Pool")
    )]
    pub policy: Option<String>,
    /// Matmul operands: f32 (default) or f16 (rounded to f16, f32 accumulation;
    /// needs shader-f16, and uses tensor cores where cooperative matrices exist).
    #[cfg_attr(all(feature = "cli", not(target_arch = "wasm32")), arg(long, value_parser = Precision::ALL.map(Precision::name), help_heading = "Training"))]
    pub precision: Option<String>,
    /// Most dispatches a step sends to the GPU at a time (the first part 4, each next
    /// twice the last), so the GPU starts while the rest is recorded (0: the whole
    /// step in one submit).
    #[cfg_attr(
        all(feature = "cli", not(target_arch = "wasm32")),
        arg(long, allow_negative_numbers = true, help_heading = "Training")
    )]
    pub submit_every: Option<f64>,
    /// Recompute each block's layernorm outputs in the backward instead of keeping
    /// them from the forward: less memory at peak, one more layernorm pass each
    /// (`--recompute` alone: on).
    #[cfg_attr(
        all(feature = "cli", not(target_arch = "wasm32")),
        arg(long, num_args = 0..=1, default_missing_value = "true", help_heading = "Training")
    )]
    pub recompute: Option<bool>,
}

/// A whole number in `[0, max]` from a JS/CLI number, or an error naming `name`.
fn whole(name: &str, value: f64, max: u64) -> Result<u64> {
    if !(value.is_finite() && value.fract() == 0.0 && value >= 0.0) {
        return Err(Error::Config(format!(
            "{name} must be a whole number, not negative, got {value}"
        )));
    }
    // 2^64 is exact in f64; below it the cast of a whole number is exact.
    if value < 18_446_744_073_709_551_616.0 && value as u64 <= max {
        return Ok(value as u64);
    }
    Err(Error::Config(format!(
        "{name} must be at most {max}, got {value}"
    )))
}

fn set_usize(slot: &mut usize, name: &str, value: Option<f64>) -> Result<()> {
    if let Some(v) = value {
        let v = whole(name, v, usize::MAX as u64)?;
        *slot = usize::try_from(v)
            .map_err(|_| Error::Config(format!("{name} = {v} does not fit this platform")))?;
    }
    Ok(())
}

fn set_u32(slot: &mut u32, name: &str, value: Option<f64>) -> Result<()> {
    if let Some(v) = value {
        *slot = whole(name, v, u32::MAX.into())? as u32;
    }
    Ok(())
}

/// A finite f32 from `value`, or an error naming `name`.
fn set_f32(slot: &mut f32, name: &str, value: Option<f64>) -> Result<()> {
    if let Some(v) = value {
        let x = v as f32;
        if !x.is_finite() {
            return Err(Error::Config(format!(
                "{name} must be a finite number, got {v}"
            )));
        }
        *slot = x;
    }
    Ok(())
}

impl Overrides {
    /// Every setting's name, as the wasm API's config object spells it.
    pub const FIELDS: [&'static str; 21] = [
        "preset",
        "layers",
        "heads",
        "width",
        "context",
        "batch",
        "lr",
        "steps",
        "warmup",
        "dropout",
        "dropout_placement",
        "weight_decay",
        "grad_clip",
        "seed",
        "eval_every",
        "eval_batches",
        "pool",
        "policy",
        "precision",
        "submit_every",
        "recompute",
    ];

    /// An error naming the first of `keys` that is not a setting. serde's
    /// `deny_unknown_fields` does this for JSON; serde-wasm-bindgen reads only the
    /// fields it knows from a JS object, so the wasm API checks its keys here.
    pub fn check_keys<S: AsRef<str>>(keys: impl IntoIterator<Item = S>) -> Result<()> {
        for key in keys {
            let key = key.as_ref();
            if !Self::FIELDS.contains(&key) {
                return Err(Error::Config(format!(
                    "unknown setting {key:?}; the settings are {}",
                    Self::FIELDS.join(", ")
                )));
            }
        }
        Ok(())
    }

    /// Parses the overrides from JSON (what a config file or a test gives).
    pub fn from_json(text: &str) -> Result<Self> {
        serde_json::from_str(text).map_err(|e| Error::Config(e.to_string()))
    }

    /// The preset named (or [`DEFAULT_PRESET`]) with every given field applied,
    /// checked by [`TrainConfig::validate`].
    pub fn resolve(&self) -> Result<TrainConfig> {
        let mut cfg = TrainConfig::preset(self.preset.as_deref().unwrap_or(DEFAULT_PRESET))?;
        set_usize(&mut cfg.layers, "layers", self.layers)?;
        set_usize(&mut cfg.heads, "heads", self.heads)?;
        set_usize(&mut cfg.width, "width", self.width)?;
        set_usize(&mut cfg.context, "context", self.context)?;
        set_usize(&mut cfg.batch, "batch", self.batch)?;
        set_usize(&mut cfg.eval_batches, "eval_batches", self.eval_batches)?;
        set_u32(&mut cfg.steps, "steps", self.steps)?;
        set_u32(&mut cfg.warmup, "warmup", self.warmup)?;
        set_u32(&mut cfg.eval_every, "eval_every", self.eval_every)?;
        if let Some(v) = self.submit_every {
            cfg.submit_every = whole("submit_every", v, MAX_SUBMIT_EVERY.into())? as u32;
        }
        set_f32(&mut cfg.lr, "lr", self.lr)?;
        set_f32(&mut cfg.dropout, "dropout", self.dropout)?;
        set_f32(&mut cfg.weight_decay, "weight_decay", self.weight_decay)?;
        set_f32(&mut cfg.grad_clip, "grad_clip", self.grad_clip)?;
        if let Some(seed) = self.seed {
            // Seeds pass through JavaScript numbers: only whole numbers below 2^53
            // are exact there.
            cfg.seed = whole("seed", seed, (1 << 53) - 1)?;
        }
        if let Some(pool) = self.pool {
            cfg.pool = pool;
        }
        if let Some(recompute) = self.recompute {
            cfg.recompute = recompute;
        }
        if let Some(policy) = &self.policy {
            cfg.policy = SizePolicy::parse(policy).map_err(Error::Config)?;
        }
        if let Some(precision) = &self.precision {
            cfg.precision = Precision::parse(precision).ok_or_else(|| {
                Error::Config(format!(
                    "precision must be one of {}, got {precision:?}",
                    Precision::ALL.map(Precision::name).join(", ")
                ))
            })?;
        }
        if let Some(placement) = &self.dropout_placement {
            cfg.dropout_placement = DropoutPlacement::parse(placement).ok_or_else(|| {
                Error::Config(format!(
                    "dropout_placement must be one of {}, got {placement:?}",
                    DropoutPlacement::ALL.map(DropoutPlacement::name).join(", ")
                ))
            })?;
        }
        cfg.validate()?;
        Ok(cfg)
    }
}

/// Size policies offered to users, coarsest first (any `pow2/N` with N a power of
/// two up to [`MAX_SUBDIVISIONS`] is accepted).
pub fn policy_names() -> Vec<String> {
    let mut names = vec!["pow2".to_string()];
    names.extend([2, 4, 8, 16].iter().map(|n: &u32| {
        debug_assert!(*n <= MAX_SUBDIVISIONS);
        format!("pow2/{n}")
    }));
    names.push("exact".into());
    names.push("planned".into());
    names
}

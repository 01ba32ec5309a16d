//! The configuration of a training run, in one surface: the settings a user gives on
//! the command line (clap) or an embedding page gives to the wasm API (serde) are
//! [`Overrides`], resolved against a preset into a checked [`TrainConfig`]. Both
//! front ends take these types as they are, so a setting is parsed, bounded and
//! explained in one place.
//!
//! - [`TrainConfig`] (train_config.rs): every setting of a run, the presets, the
//!   bounds, the learning-rate schedule.
//! - [`Overrides`] (overrides.rs): what a user changes of a preset, checked.
//!
//! Numbers of the overrides are `f64` because that is what JavaScript sends: a
//! negative, fractional, NaN or huge value arrives intact and is refused with a
//! message naming the setting, instead of failing inside serde or wrapping.
//!
//! Imports run one way: `config` <- [`crate::plan`] (does a config fit a device?)
//! <- [`crate::train`] (run it). This module imports neither, nor anything that
//! imports them.

mod overrides;
mod train_config;

pub use overrides::{policy_names, Overrides, DEFAULT_PRESET};
pub use train_config::{
    presets, DropoutPlacement, Precision, TrainConfig, DEFAULT_SUBMIT_EVERY, MAX_EVAL_BATCHES,
    MAX_HEAD_SIZE, MAX_LAYERS, MAX_SUBMIT_EVERY, MAX_TOKENS, MAX_WIDTH, PRESETS,
};

//! Training: the GPU [`Trainer`] (one scope a step, figures read back
//! asynchronously), held-out evaluation, text sampling, and the [`Schedule`] that
//! cuts a run into calls. `reference_train` is its CPU twin; its settings
//! are a [`TrainConfig`] ([`crate::config`]).
//!
//! - trainer.rs: the [`Trainer`]'s state, how it is built, one step's work
//! - steps.rs: running steps, one at a time or many a call, calls in flight
//! - stats.rs: [`StepStats`], the figures of a step
//! - evaluate.rs, sample.rs: held-out loss, text
//! - traced.rs: a step with the allocation trace on
//! - batcher.rs: the random windows a run trains on; clock.rs: [`now_ms`]
//! - schedule.rs: how many steps a call takes, when calls overlap
//! - settings.rs: what a [`TrainConfig`] means to the model and AdamW
//!
//! Imports run one way: `config` <- `plan` <- `train`.

mod batcher;
mod clock;
mod evaluate;
mod sample;
mod schedule;
mod settings;
mod stats;
mod steps;
mod traced;
mod trainer;

pub use crate::config::TrainConfig;
pub use batcher::Batcher;
pub use clock::now_ms;
pub use evaluate::{CLI_EVAL_BATCHES, EVAL_SEED};
pub use sample::{check_sample_settings, MAX_SAMPLE_CHARS};
pub use schedule::{Schedule, CLI_OVERLAP_MS};
pub use stats::StepStats;
pub use steps::{
    StepFigures, StepsInFlight, DEFAULT_MAX_AT_ONCE, MAX_STEP, MAX_STEPS_AT_ONCE,
    MAX_STEPS_IN_FLIGHT,
};
pub(crate) use trainer::with_f16_copy;
pub use trainer::Trainer;

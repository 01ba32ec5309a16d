//! [`StepStats`]: the figures of a training step, from its readback and the
//! context's counters around it.

use crate::config::TrainConfig;
use crate::error::{Error, Result};
use crate::gpu::ContextCounters;
use crate::pool::{BucketStats, BufferPoolStats};

/// Figures of one step (or the latest, from [`Trainer::stats`](super::Trainer::stats)).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct StepStats {
    pub step: u32,
    pub loss: f32,
    /// Wall time of the step, from the batch's upload to the loss on the host; for
    /// steps recorded together ([`Trainer::steps`](super::Trainer::steps)), the
    /// call's time over its steps.
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

/// What a recorded step's stats need besides its figures: the counters before it.
pub(super) struct RecordedStep {
    pub step: u32,
    pub record_ms: f64,
    pub before: (ContextCounters, BufferPoolStats),
}

impl StepStats {
    /// The stats of a step of a run configured by `cfg`, recorded as `recorded`, from
    /// its [loss, norm, scale], its wall time, the counters after it and the latest
    /// held-out loss; an error if the loss is not finite.
    pub(super) fn of(
        cfg: &TrainConfig,
        recorded: &RecordedStep,
        figures: &[f32],
        ms: f64,
        (counters, pool): (ContextCounters, BufferPoolStats),
        val_loss: Option<f32>,
    ) -> Result<StepStats> {
        let (b, c) = (cfg.batch, cfg.context);
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
            lr: cfg.lr_at(step),
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
            val_loss,
            pool,
            context: counters,
        })
    }
}

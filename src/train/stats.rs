//! [`StepStats`]: the figures of a training step, from its readback and the
//! context's counters around it.

use crate::config::TrainConfig;
use crate::error::{Error, Result};
use crate::gpu::{BuffersByPurpose, ContextCounters, CreatedByPath};
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
    /// Created during this step, and since the step before (by an evaluation, a
    /// sample or a save): 0 after warm-up with the pool, but where a path first
    /// runs (see `created_step_by_path`).
    pub buffers_created_step: u64,
    /// Bind groups created during this step (and since the step before): 0 after
    /// warm-up (they are cached).
    pub bind_groups_created_step: u64,
    /// Compute dispatches recorded during this step (forward, backward, optimizer).
    pub dispatches_step: u64,
    /// Command encoders created during this step (one a submit).
    pub encoders_created_step: u64,
    /// Pipelines created during this step (and since the step before): 0 after the
    /// first, but where a path first runs.
    pub pipelines_created_step: u64,
    /// Buffers, bind groups and pipelines created during this step and since the
    /// step before, by the path that asked: training, evaluation (counted in the
    /// step that evaluates), sampling, checkpoints.
    pub created_step_by_path: CreatedByPath,
    /// This step's buffers (as `buffers_created_step`) by what they are for.
    pub buffers_created_step_by_purpose: BuffersByPurpose,
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
    /// What had been created when the step before was counted.
    pub created_before: CreatedSoFar,
}

/// The counts of what a context has created, by path and by purpose.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CreatedSoFar {
    by_path: CreatedByPath,
    by_purpose: BuffersByPurpose,
}

impl CreatedSoFar {
    pub fn of(counters: &ContextCounters) -> Self {
        CreatedSoFar {
            by_path: counters.created_by_path,
            by_purpose: counters.buffers_by_purpose,
        }
    }
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
        let mut stats = StepStats {
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
            dispatches_step: counters.dispatches - before_counters.dispatches,
            encoders_created_step: counters.encoders_created - before_counters.encoders_created,
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
            ..StepStats::default()
        };
        let counters = stats.context.clone();
        stats.count_created(recorded, &counters);
        Ok(stats)
    }

    /// Sets what the step created (from before `recorded` to `counters`).
    pub(super) fn count_created(&mut self, recorded: &RecordedStep, counters: &ContextCounters) {
        let before = &recorded.created_before;
        self.created_step_by_path = counters.created_by_path.since(&before.by_path);
        self.buffers_created_step_by_purpose =
            counters.buffers_by_purpose.since(&before.by_purpose);
        let total = self.created_step_by_path.total();
        self.buffers_created_step = total.buffers;
        self.bind_groups_created_step = total.bind_groups;
        self.pipelines_created_step = total.pipelines;
        self.buffers_created = counters.buffers_created;
    }
}

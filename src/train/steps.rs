//! Running training steps: one at a time ([`Trainer::step`]), or many recorded back
//! to back with their figures read once ([`Trainer::steps`]), in two halves so that
//! a caller can keep calls in flight ([`Trainer::start_steps`],
//! [`Trainer::finish_steps`]).

use super::clock::now_ms;
use super::stats::{CreatedSoFar, RecordedStep, StepStats};
use super::trainer::Trainer;
use crate::error::{Error, Result};
use crate::gpu::{ContextCounters, Path, PendingRead, PooledBuffer, Reading};
use crate::model::GpuBatch;
use crate::pool::BufferPoolStats;

/// Most steps [`Trainer::steps`] records before reading their losses.
pub const MAX_STEPS_AT_ONCE: u32 = 1024;

/// Steps a call, at most, unless a [`super::Schedule`] says otherwise: on the page's
/// presets a call of 16 takes a few ms on a large GPU.
pub const DEFAULT_MAX_AT_ONCE: u32 = 16;

/// The last step a run can reach: the step counter is a u32, and a step past it
/// would wrap to step 0 (learning rate 0, dropout masks of step 0).
pub const MAX_STEP: u32 = u32::MAX;

/// An error unless `n` more steps after step `done` stay within [`MAX_STEP`].
fn check_steps_left(done: u32, n: u32) -> Result<()> {
    if done.checked_add(n).is_none() {
        return Err(Error::Config(format!(
            "the run is at step {done} and the step counter stops at {MAX_STEP} \
             (train::MAX_STEP): {n} more steps do not fit; start a new run"
        )));
    }
    Ok(())
}

/// Floats of the buffer a call's figures gather in (4 a step: loss, norm, scale and
/// a pad): sized for [`DEFAULT_MAX_AT_ONCE`] steps, or for a longer call's steps
/// rounded up to a power of two, so that calls of 1 to 16 steps (a run's short last
/// one too) all gather into a buffer of one size and bind it in the same bind
/// groups, and read it back through a readback of one size.
fn gathered_floats(n: u32) -> usize {
    4 * n.max(DEFAULT_MAX_AT_ONCE).next_power_of_two() as usize
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
    /// An evaluation is due within these steps ([`crate::config::TrainConfig::eval_every`]): it
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

impl Trainer {
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
        check_steps_left(self.step, 1)?;
        let start = now_ms();
        // Counted from before the readback is taken: a first step that creates it
        // has the creation among its own.
        let before = self.counters_now();
        let created = self.created_before();
        let train = self.ctx.on_path(Path::Train);
        let bytes = 4 * gathered_floats(1) as u64;
        // What a call of steps will need too (see `start_steps`): a first step made
        // one at a time makes it, not the first call after it.
        self.ctx
            .reserve_readbacks(bytes, MAX_STEPS_IN_FLIGHT as usize);
        let report = self.ctx.pending_read(bytes);
        let gathered = self.ctx.create_pooled(4 * gathered_floats(1));
        let figures = ((&gathered, 0), Some(&report));
        let recorded = self.record_step(inputs, targets, (start, before, created), figures, false);
        drop(gathered);
        let figures = self.ctx.read::<f32>(report, 3).await?;
        drop(train);
        self.step = recorded.step;
        let after = (self.ctx.counters(), self.ctx.pool_stats());
        self.counted = Some(CreatedSoFar::of(&after.0));
        let ms = now_ms() - start;
        self.last = StepStats::of(&self.cfg, &recorded, &figures, ms, after, self.val_loss)?;
        if self.cfg.eval_every > 0 && recorded.step.is_multiple_of(self.cfg.eval_every) {
            self.evaluate_within(&recorded).await?;
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
        check_steps_left(self.step, n)?;
        let (c, b) = (self.cfg.context, self.cfg.batch);
        let start = now_ms();
        let mut created = self.created_before();
        let _train = self.ctx.on_path(Path::Train);
        // Each step's [loss, norm, scale] at 4 floats a step, gathered on the GPU by
        // the kernels that make them and copied out once, at the last step's end.
        let floats = gathered_floats(n);
        let bytes = 4 * floats as u64;
        // A second call may be started while this one's figures come back: both
        // readbacks are made by the first call, not by the first call in flight.
        self.ctx
            .reserve_readbacks(bytes, MAX_STEPS_IN_FLIGHT as usize);
        let figures = self.ctx.pending_read(bytes);
        let gathered = self.ctx.create_pooled(4 * floats);
        let mut recorded = Vec::new();
        let mut evaluates = false;
        for i in 0..n as usize {
            let at = (now_ms(), self.counters_now(), created);
            let (inputs, targets) = self.batcher.next(&self.corpus.train, b, c);
            // Steps after the first go out in one submit each: the GPU is still busy
            // with the one before, so parts would only add host work.
            let last = (i + 1 == n as usize).then_some(&figures);
            let step = self.record_step(&inputs, &targets, at, ((&gathered, 4 * i), last), i > 0);
            self.step = step.step;
            evaluates |= self.cfg.eval_every > 0 && step.step.is_multiple_of(self.cfg.eval_every);
            let after = (self.ctx.counters(), self.ctx.pool_stats());
            created = CreatedSoFar::of(&after.0);
            recorded.push((step, after));
        }
        drop(gathered);
        self.counted = Some(created);
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
        let mut recorded_last = None;
        for (i, (step, after)) in recorded.into_iter().enumerate() {
            let figures = &values[4 * i..4 * i + 3];
            stats.push(StepStats::of(
                &self.cfg,
                &step,
                figures,
                ms,
                after,
                self.val_loss,
            )?);
            recorded_last = Some(step);
        }
        self.last = stats.last().cloned().expect("n >= 1");
        if evaluates {
            let last = recorded_last.expect("n >= 1");
            self.evaluate_within(&last).await?;
            *stats.last_mut().expect("n >= 1") = self.last.clone();
        }
        Ok(stats)
    }

    /// Evaluates after step `recorded`, whose stats (the latest) then count what the
    /// evaluation created too, under its path: the step that evaluates shows it.
    async fn evaluate_within(&mut self, recorded: &RecordedStep) -> Result<()> {
        self.evaluate().await?;
        let counters = self.ctx.counters();
        self.last.count_created(recorded, &counters);
        self.counted = Some(CreatedSoFar::of(&counters));
        Ok(())
    }

    /// What the next step counts its creations from: the counts after the last
    /// step (what was made between steps, by a sample or a save, counts in the
    /// next one, under its path), or now.
    fn created_before(&self) -> CreatedSoFar {
        self.counted
            .unwrap_or_else(|| CreatedSoFar::of(&self.ctx.counters()))
    }

    /// The context's and the pool's counters now.
    fn counters_now(&self) -> (ContextCounters, BufferPoolStats) {
        (self.ctx.counters(), self.ctx.pool_stats())
    }

    /// Records training step `self.step + 1` on the batch `(inputs, targets)`, in
    /// the step's scope (one scope: forward, backward, clip, AdamW), and returns what
    /// its stats need (`start`: its start time and counters). The batch is written
    /// into the trainer's held batch buffer ahead of the step's commands (or, without
    /// the belt, uploaded into buffers of its own). Its [loss, norm, scale] go to
    /// floats `at..at + 3` of `gathered`, written by the kernels that make them (a
    /// copy would end the compute pass); `report`: the readback all of `gathered` is
    /// copied into at the step's end. `whole`: in one submit
    /// ([`crate::gpu::WgpuContext::scope_in_one_submit`]), else in the context's parts.
    fn record_step(
        &mut self,
        inputs: &[u32],
        targets: &[u32],
        (start, before, created_before): (f64, (ContextCounters, BufferPoolStats), CreatedSoFar),
        ((gathered, at), report): ((&PooledBuffer, usize), Option<&PendingRead>),
        whole: bool,
    ) -> RecordedStep {
        let step = self.step + 1;
        let vocab = self.model.vocab;
        let uploaded = if self.cfg.belt {
            self.held_batch.write(&self.ctx, inputs, targets, vocab);
            None
        } else {
            Some(GpuBatch::upload(&self.ctx, inputs, targets, vocab, false))
        };
        // The step's tensors drop when `step_tensors` returns, before `end_step`:
        // the planned policy plans (or follows) what lived and died inside.
        let step_tensors = || {
            let batch = uploaded
                .as_ref()
                .or(self.held_batch.get())
                .expect("written above");
            let grads = self.gradients(batch, step, (gathered, at), true);
            self.update(&grads, step, (gathered, at + 1));
            if let Some(report) = report {
                self.ctx
                    .copy_to_read(gathered, 0, report, 0, gathered.len() as u64);
            }
        };
        let record = || {
            self.ctx.begin_step();
            step_tensors();
            self.ctx.end_step();
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
            created_before,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::gathered_floats;

    /// Calls of 1 to 16 steps share one size; longer ones take a power of two.
    #[test]
    fn calls_up_to_sixteen_steps_gather_into_one_size() {
        for n in 1..=16 {
            assert_eq!(gathered_floats(n), 64, "{n} steps");
        }
        assert_eq!(gathered_floats(17), 128);
        assert_eq!(gathered_floats(1024), 4096);
    }
}

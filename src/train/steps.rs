//! Running training steps: one at a time ([`Trainer::step`]), or many recorded back
//! to back with their figures read once ([`Trainer::steps`]), in two halves so that
//! a caller can keep calls in flight ([`Trainer::start_steps`],
//! [`Trainer::finish_steps`]).

use super::clock::now_ms;
use super::stats::{RecordedStep, StepStats};
use super::trainer::Trainer;
use crate::error::{Error, Result};
use crate::gpu::{ContextCounters, PendingRead, PooledBuffer, Reading, WgpuContext};
use crate::model::GpuBatch;
use crate::pool::BufferPoolStats;

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
        let ms = now_ms() - start;
        self.last = StepStats::of(&self.cfg, &recorded, &figures, ms, after, self.val_loss)?;
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
            let figures = &values[4 * i..4 * i + 3];
            stats.push(StepStats::of(
                &self.cfg,
                &step,
                figures,
                ms,
                after,
                self.val_loss,
            )?);
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
        // The step's tensors drop when `step` returns, before `end_step`: the
        // planned policy plans (or follows) what lived and died inside.
        let step_tensors = || {
            let batch = batch(&self.ctx);
            let grads = self.gradients(&batch, step, (gathered, at), true);
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{upload_groups, UPLOAD_GROUP_BYTES};

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

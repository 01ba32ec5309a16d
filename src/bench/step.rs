//! ms a training step under variants: pooled or not, how batches go up, kernel
//! tunings forced, parts of a submit, steps a call and calls in flight.

use super::median_p99;
use crate::config::TrainConfig;
use crate::data::Corpus;
use crate::error::Result;
use crate::gpu::ContextOptions;
use crate::kernels::Target;
use crate::train::{StepStats, StepsInFlight, Trainer};

#[derive(Clone, Debug, serde::Serialize)]
pub struct StepRow {
    pub preset: String,
    pub variant: String,
    pub steps: u32,
    pub median_ms: f64,
    /// Median of the host's part of a step (recording and submitting).
    pub median_record_ms: f64,
    pub tokens_per_s: f64,
    /// Buffers created per measured step (after warm-up).
    pub buffers_created_per_step: f64,
    /// Compute dispatches per measured step.
    pub dispatches_per_step: f64,
    pub final_loss: f32,
}

/// The three ways to feed a step, side by side in one run (plus, in [`step_variants`],
/// the first with each kernel tuning forced).
pub const STEP_VARIANTS: [(&str, bool, bool); 3] = [
    ("pool + belt uploads", true, true),
    ("pool + seed uploads", true, false),
    ("no pool", false, false),
];

/// ms a step for each variant of [`STEP_VARIANTS`], then for the first variant with
/// each kernel tuning forced ([`Target`]: the adapter's own choice is one of them).
/// `warmup` steps each, then `steps` timed, taken in turns (one step of each variant,
/// then the next) so that a machine busy with other work slows them alike. Each
/// trainer's context is built from `options` (subgroups, ...).
pub async fn step_variants(
    cfg: &TrainConfig,
    options: &ContextOptions,
    preset: &str,
    corpus: &Corpus,
    warmup: u32,
    steps: u32,
) -> Result<Vec<StepRow>> {
    let forced = Target::ALL.map(|t| {
        let name = format!("{}, {} kernels", STEP_VARIANTS[0].0, t.name());
        (name, true, true, Some(t))
    });
    let runs: Vec<_> = STEP_VARIANTS
        .iter()
        .map(|&(name, pool, belt)| (name.to_string(), pool, belt, None))
        .chain(forced)
        .collect();
    let mut trainers = Vec::new();
    for (_, pool, belt, _) in &runs {
        let cfg = TrainConfig {
            pool: *pool,
            belt: *belt,
            ..cfg.clone()
        };
        trainers.push(Trainer::with_options(cfg, corpus.clone(), options.clone()).await?);
    }
    let mut created = Vec::new();
    let mut dispatched = Vec::new();
    for (trainer, run) in trainers.iter_mut().zip(&runs) {
        for _ in 0..warmup {
            forced_step(trainer, run.3).await?;
        }
        let counters = trainer.context().counters();
        created.push(counters.buffers_created);
        dispatched.push(counters.dispatches);
    }
    let mut ms = vec![Vec::new(); runs.len()];
    let mut record_ms = vec![Vec::new(); runs.len()];
    let mut loss = vec![0.0; runs.len()];
    for _ in 0..steps {
        for (i, trainer) in trainers.iter_mut().enumerate() {
            let s = forced_step(trainer, runs[i].3).await?;
            ms[i].push(s.ms);
            record_ms[i].push(s.record_ms);
            loss[i] = s.loss;
        }
    }
    let mut rows = Vec::new();
    for (i, (variant, ..)) in runs.into_iter().enumerate() {
        let median_ms = median_p99(&mut ms[i]).0;
        let counters = trainers[i].context().counters();
        let made = counters.buffers_created - created[i];
        let dispatches = counters.dispatches - dispatched[i];
        rows.push(StepRow {
            preset: preset.into(),
            variant,
            steps,
            median_ms,
            median_record_ms: median_p99(&mut record_ms[i]).0,
            tokens_per_s: (cfg.batch * cfg.context) as f64 / (median_ms / 1e3),
            buffers_created_per_step: made as f64 / steps as f64,
            dispatches_per_step: dispatches as f64 / steps as f64,
            final_loss: loss[i],
        });
    }
    Ok(rows)
}

/// ms a step with each `submit_every` of `values` (the step's work sent to the GPU
/// in parts of that many dispatches; 0: one submit), taken in turns like
/// [`step_variants`]. Rows are labelled `submit_every N`.
pub async fn submit_variants(
    cfg: &TrainConfig,
    options: &ContextOptions,
    preset: &str,
    corpus: &Corpus,
    warmup: u32,
    steps: u32,
    values: &[u32],
) -> Result<Vec<StepRow>> {
    let runs = values.iter().map(|&submit_every| {
        let cfg = TrainConfig {
            submit_every,
            ..cfg.clone()
        };
        (format!("submit_every {submit_every}"), cfg, 1, 1)
    });
    step_runs(runs.collect(), options, preset, corpus, (warmup, steps)).await
}

/// ms a step when `n` steps are recorded before their losses are read
/// ([`Trainer::steps`]; 1: [`Trainer::step`]), for each `n` of `values` and each
/// number of calls kept in flight of `in_flight` (1: each call waits for the one
/// before; 2: the next is recorded while the last one's figures come back), taken
/// in turns. Rows are labelled `at once N` (`, K in flight` past 1); `steps` counts
/// calls.
pub async fn at_once_variants(
    cfg: &TrainConfig,
    options: &ContextOptions,
    preset: &str,
    corpus: &Corpus,
    (warmup, steps): (u32, u32),
    values: &[u32],
    in_flight: &[u32],
) -> Result<Vec<StepRow>> {
    let mut runs = Vec::new();
    for &n in values {
        for &k in in_flight {
            let label = match k {
                1 => format!("at once {n}"),
                k => format!("at once {n}, {k} in flight"),
            };
            runs.push((label, cfg.clone(), n, k));
        }
    }
    step_runs(runs, options, preset, corpus, (warmup, steps)).await
}

/// Calls of `n` steps in a row, `calls` of them, keeping up to `in_flight` started
/// before the first of them has finished ([`Trainer::start_steps`]); with 1 and
/// `n == 1`, [`Trainer::step`].
async fn run_calls(
    trainer: &mut Trainer,
    n: u32,
    in_flight: u32,
    calls: u32,
) -> Result<Vec<StepStats>> {
    if n == 1 && in_flight == 1 {
        let mut out = Vec::new();
        for _ in 0..calls {
            out.push(trainer.step().await?);
        }
        return Ok(out);
    }
    let mut pending = std::collections::VecDeque::new();
    let mut out = Vec::new();
    for call in 0..calls + in_flight {
        if pending.len() as u32 == in_flight || call >= calls {
            let Some(oldest) = pending.pop_front() else {
                break;
            };
            let figures = StepsInFlight::figures(oldest).await?;
            out.extend(trainer.finish_steps(figures).await?);
        }
        if call < calls {
            pending.push_back(trainer.start_steps(n)?);
        }
    }
    Ok(out)
}

/// Calls a turn with more than one in flight: each turn starts with none in flight,
/// so its first call waits as an unpipelined one does, and the median is of the rest.
const PIPELINED_CALLS_A_TURN: u32 = 8;

/// One trainer a run (label, config, steps a call, calls in flight), `warmup` calls
/// each, then `calls` timed calls taken in turns (of [`PIPELINED_CALLS_A_TURN`]
/// where more than one is in flight, so that two trainers' calls never share the
/// GPU); the median of the steps' ms.
async fn step_runs(
    runs: Vec<(String, TrainConfig, u32, u32)>,
    options: &ContextOptions,
    preset: &str,
    corpus: &Corpus,
    (warmup, calls): (u32, u32),
) -> Result<Vec<StepRow>> {
    let mut trainers = Vec::new();
    for (_, cfg, n, k) in &runs {
        let mut trainer =
            Trainer::with_options(cfg.clone(), corpus.clone(), options.clone()).await?;
        run_calls(&mut trainer, *n, *k, warmup).await?;
        trainers.push(trainer);
    }
    let start: Vec<_> = trainers.iter().map(|t| t.context().counters()).collect();
    let mut ms = vec![Vec::new(); runs.len()];
    let mut record_ms = vec![Vec::new(); runs.len()];
    let mut loss = vec![0.0; runs.len()];
    let mut done = vec![0; runs.len()];
    while done.iter().any(|&d| d < calls) {
        for (i, trainer) in trainers.iter_mut().enumerate() {
            let (n, k) = (runs[i].2, runs[i].3);
            let turn = if k > 1 { PIPELINED_CALLS_A_TURN } else { 1 };
            let turn = turn.min(calls - done[i]);
            for s in run_calls(trainer, n, k, turn).await? {
                ms[i].push(s.ms);
                record_ms[i].push(s.record_ms);
                loss[i] = s.loss;
            }
            done[i] += turn;
        }
    }
    let mut rows = Vec::new();
    for (i, trainer) in trainers.iter().enumerate() {
        let (cfg, steps) = (&runs[i].1, calls * runs[i].2);
        let median_ms = median_p99(&mut ms[i]).0;
        let now = trainer.context().counters();
        rows.push(StepRow {
            preset: preset.into(),
            variant: runs[i].0.clone(),
            steps,
            median_ms,
            median_record_ms: median_p99(&mut record_ms[i]).0,
            tokens_per_s: (cfg.batch * cfg.context) as f64 / (median_ms / 1e3),
            buffers_created_per_step: (now.buffers_created - start[i].buffers_created) as f64
                / f64::from(steps.max(1)),
            dispatches_per_step: (now.dispatches - start[i].dispatches) as f64
                / f64::from(steps.max(1)),
            final_loss: loss[i],
        });
    }
    Ok(rows)
}

/// One training step with the kernel tuning `kernels` forced (`None`: by adapter).
async fn forced_step(trainer: &mut Trainer, kernels: Option<Target>) -> Result<StepStats> {
    let before = crate::kernels::force(kernels);
    let result = trainer.step().await;
    crate::kernels::force(before);
    result
}

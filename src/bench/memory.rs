//! Memory over a run: what each size policy reserves ([`policies`]) and what a long
//! run holds, row by row ([`soak`]).

use crate::config::TrainConfig;
use crate::data::Corpus;
use crate::error::Result;
use crate::gpu::ContextOptions;
use crate::pool::SizePolicy;
use crate::train::{now_ms, Trainer};

#[derive(Clone, Debug, serde::Serialize)]
pub struct PolicyRow {
    pub preset: String,
    pub policy: String,
    /// How storage operands were bound ([`super::bindings`]).
    pub bindings: &'static str,
    /// Layernorm outputs made again in the backward ([`TrainConfig::recompute`]).
    pub recompute: bool,
    /// Most memory the pooled buffers took at once (in use + held free).
    pub peak_bytes_reserved: u64,
    /// Most bytes live tensors asked for at once.
    pub peak_bytes_requested: u64,
    pub ratio: f64,
    pub hit_rate: f64,
    pub buffers_created_after_warmup: u64,
    /// Mean wall-clock ms of a measured step (each step awaits its loss).
    pub ms_per_step: f64,
}

/// The policies compared by [`policies`].
pub fn policy_set() -> Vec<SizePolicy> {
    vec![
        SizePolicy::PowerOfTwo,
        SizePolicy::Subdivided { subdivisions: 2 },
        SizePolicy::Subdivided { subdivisions: 4 },
        SizePolicy::Subdivided { subdivisions: 8 },
        SizePolicy::Exact,
        SizePolicy::Planned,
    ]
}

/// Trains `warmup + steps` steps under each of `policies` and reports the memory of
/// the steps after warm-up.
pub async fn policies(
    cfg: &TrainConfig,
    options: &ContextOptions,
    (preset, corpus): (&str, &Corpus),
    warmup: u32,
    steps: u32,
    policies: &[SizePolicy],
) -> Result<Vec<PolicyRow>> {
    let mut rows = Vec::new();
    for &policy in policies {
        let cfg = TrainConfig {
            policy,
            ..cfg.clone()
        };
        let bindings = super::bindings(options);
        let mut trainer = Trainer::with_options(cfg, corpus.clone(), options.clone()).await?;
        for _ in 0..warmup {
            trainer.step().await?;
        }
        let created = trainer.context().counters().buffers_created;
        // The steady step's peaks, not the warm-up's (the planned policy's first
        // step runs on the pool).
        trainer.context().reset_peaks();
        let start = now_ms();
        for _ in 0..steps {
            trainer.step().await?;
        }
        let ms_per_step = (now_ms() - start) / f64::from(steps.max(1));
        // Sampling-free, eval-free: training steps only.
        let counters = trainer.context().counters();
        let pool = trainer.context().pool_stats();
        rows.push(PolicyRow {
            preset: preset.into(),
            policy: policy.label(),
            bindings,
            recompute: trainer.config().recompute,
            peak_bytes_reserved: counters.peak_bytes_reserved,
            peak_bytes_requested: counters.peak_bytes_requested_in_use,
            ratio: counters.peak_bytes_reserved as f64
                / counters.peak_bytes_requested_in_use.max(1) as f64,
            hit_rate: pool.hit_rate(),
            buffers_created_after_warmup: counters.buffers_created - created,
            ms_per_step,
        });
    }
    Ok(rows)
}

/// One row of [`soak`]: the state after `step` training steps.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SoakRow {
    pub step: u32,
    pub loss: f32,
    pub val_loss: Option<f32>,
    /// Bytes of free buffers the pool holds.
    pub bytes_held: u64,
    /// Bytes of buffers in use by live tensors (between steps: parameters and
    /// optimizer state).
    pub bytes_in_use: u64,
    /// GPU buffers created since the start (cumulative).
    pub buffers_created: u64,
    pub buffers_destroyed: u64,
    /// The process's resident memory (`VmRSS`), where the platform says (Linux).
    pub host_rss_bytes: Option<u64>,
    /// Mean ms a step since the previous row.
    pub ms_per_step: f64,
}

/// Resident memory of this process, from `/proc/self/status` (Linux only).
pub fn host_rss_bytes() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        kib.checked_mul(1024)
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// Trains `steps` steps of `cfg` (its schedule stretched to `steps`) and reports a
/// row after creating the trainer, every `every` steps (with a held-out
/// evaluation, so evaluation's buffers are part of the steady state) and at the
/// end, each passed to `row` as it is taken. A leak shows as a column that keeps
/// growing after the first rows.
pub async fn soak(
    cfg: &TrainConfig,
    options: &ContextOptions,
    corpus: &Corpus,
    steps: u32,
    every: u32,
    mut row: impl FnMut(&SoakRow),
) -> Result<Vec<SoakRow>> {
    let cfg = TrainConfig {
        steps: steps.max(1),
        eval_every: 0,
        ..cfg.clone()
    };
    let every = every.max(1);
    let mut trainer = Trainer::with_options(cfg, corpus.clone(), options.clone()).await?;
    let mut rows = Vec::new();
    let mut last_ms = now_ms();
    let mut last_step = 0;
    let mut take =
        |trainer: &Trainer, loss: f32, val_loss: Option<f32>, rows: &mut Vec<SoakRow>| {
            let counters = trainer.context().counters();
            let now = now_ms();
            let step = trainer.steps_done();
            let r = SoakRow {
                step,
                loss,
                val_loss,
                bytes_held: trainer.context().pool_stats().bytes_held,
                bytes_in_use: counters.bytes_in_use,
                buffers_created: counters.buffers_created,
                buffers_destroyed: counters.buffers_destroyed,
                host_rss_bytes: host_rss_bytes(),
                ms_per_step: if step > last_step {
                    (now - last_ms) / (step - last_step) as f64
                } else {
                    0.0
                },
            };
            (last_ms, last_step) = (now, step);
            row(&r);
            rows.push(r);
        };
    take(&trainer, f32::NAN, None, &mut rows);
    for step in 1..=steps {
        let loss = trainer.step().await?.loss;
        if step % every == 0 || step == steps {
            let val = trainer.evaluate().await?;
            take(&trainer, loss, Some(val), &mut rows);
        }
    }
    Ok(rows)
}

//! Where a step's GPU time goes: every dispatch timed, summed per kernel
//! ([`kernel_times`]).

use super::median_p99;
use crate::config::TrainConfig;
use crate::data::Corpus;
use crate::error::Result;
use crate::gpu::ContextOptions;
use crate::train::Trainer;

#[derive(Clone, Debug, serde::Serialize)]
pub struct KernelRow {
    pub preset: String,
    /// The size policy the steps ran under.
    pub policy: String,
    /// How storage operands were bound ([`super::bindings`]).
    pub bindings: &'static str,
    /// The kernel (a launcher's pipeline), or `all` for the step's dispatches together.
    pub kernel: String,
    pub launches_per_step: f64,
    /// GPU milliseconds a step, each dispatch timed in a pass of its own.
    pub ms_per_step: f64,
    /// Share of the step's summed dispatch time.
    pub share: f64,
    /// Median wall time of the timed steps (the timing itself slows them a little).
    pub step_ms: f64,
}

/// Where a step's GPU time goes: every dispatch of `steps` steps (after `warmup`)
/// timed on the GPU ([`crate::gpu::WgpuContext::dispatch_times`]), summed per kernel.
/// Needs the adapter's timestamp-query.
pub async fn kernel_times(
    cfg: &TrainConfig,
    options: &ContextOptions,
    preset: &str,
    corpus: &Corpus,
    warmup: u32,
    steps: u32,
) -> Result<Vec<KernelRow>> {
    let options = ContextOptions {
        time_dispatches: true,
        ..options.clone()
    };
    let bindings = super::bindings(&options);
    let mut trainer = Trainer::with_options(cfg.clone(), corpus.clone(), options).await?;
    for _ in 0..warmup {
        trainer.step().await?;
    }
    trainer.context().dispatch_times().await?;
    let mut all = crate::gpu::DispatchTimes::default();
    let mut wall = Vec::new();
    for _ in 0..steps {
        wall.push(trainer.step().await?.ms);
        let times = trainer.context().dispatch_times().await?;
        all.dispatches.extend(times.dispatches);
        all.untimed += times.untimed;
    }
    if all.untimed > 0 {
        return Err(crate::Error::Config(format!(
            "{} dispatches a step ran untimed: a step has more than the {} a read can time",
            all.untimed / u64::from(steps.max(1)),
            crate::gpu::TIMED_DISPATCHES
        )));
    }
    let per = f64::from(steps.max(1));
    let total = all.total_ms();
    let step_ms = median_p99(&mut wall).0;
    let row = |kernel: &str, launches: u64, ms: f64| KernelRow {
        preset: preset.into(),
        policy: cfg.policy.label(),
        bindings,
        kernel: kernel.into(),
        launches_per_step: launches as f64 / per,
        ms_per_step: ms / per,
        share: if total > 0.0 { ms / total } else { 0.0 },
        step_ms,
    };
    let mut rows = vec![row("all", all.dispatches.len() as u64, total)];
    rows.extend(all.by_kernel().into_iter().map(|(k, n, ms)| row(k, n, ms)));
    Ok(rows)
}

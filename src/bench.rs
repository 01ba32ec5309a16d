//! Measurements behind BENCHMARKS.md, shared by the native CLI (`tidepool bench`)
//! and the wasm build (the browser and Dawn runners in `scripts/`), so every target
//! runs the same code.
//!
//! - [`pool_latency`]: what a pooled buffer costs against a fresh one.
//! - [`step_variants`]: ms a training step with the pool, without it, and with the
//!   seed's uploads instead of the staging belt.
//! - [`policies`]: memory reserved against memory requested for each size policy.

use crate::data::Corpus;
use crate::error::Result;
use crate::gpu::{grid_1d, ContextOptions, Kernel, WgpuContext};
use crate::kernels::Target;
use crate::pool::SizePolicy;
use crate::train::{now_ms, StepStats, TrainConfig, Trainer};

/// Writes every element of its output: the smallest honest "use" of a buffer.
const FILL: Kernel = Kernel {
    name: "bench_fill",
    source: "
struct Params { n: u32, a: u32, b: u32, c: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i < p.n) { out[i] = i ^ p.a; }
}",
    entry: "main",
    unchecked: false,
};

/// Median and 99th percentile of `samples`.
fn median_p99(samples: &mut [f64]) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

/// Times `op` in batches and returns ns a call for each batch. A batch grows (from
/// 16, doubling) until it takes at least 2 ms, because browsers round
/// `performance.now()` to 0.1 ms; `max_per_batch` bounds it.
fn time_batches(batches: usize, max_per_batch: usize, mut op: impl FnMut()) -> Vec<f64> {
    let mut per_batch = 16.min(max_per_batch).max(1);
    loop {
        let start = now_ms();
        for _ in 0..per_batch {
            op();
        }
        if now_ms() - start >= 2.0 || per_batch >= max_per_batch {
            break;
        }
        per_batch = (per_batch * 2).min(max_per_batch);
    }
    (0..batches)
        .map(|_| {
            let start = now_ms();
            for _ in 0..per_batch {
                op();
            }
            (now_ms() - start) * 1e6 / per_batch as f64
        })
        .collect()
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct PoolLatencyRow {
    pub bytes: u64,
    /// `create_pooled` + drop, served from the pool: ns a cycle.
    pub pool_median_ns: f64,
    pub pool_p99_ns: f64,
    /// `device.create_buffer` + `destroy`: ns a cycle.
    pub create_median_ns: f64,
    pub create_p99_ns: f64,
    /// One dispatch writing a pooled buffer, ns (amortised over a submit of up to
    /// 16, at most 256 MiB of buffers).
    pub dispatch_pooled_ns: f64,
    /// The same with a fresh buffer each time (created, then destroyed after submit).
    pub dispatch_fresh_ns: f64,
}

/// Pool vs `create_buffer` at each size, on this backend.
pub async fn pool_latency(sizes: &[u64], batches: usize) -> Result<Vec<PoolLatencyRow>> {
    let pooled = WgpuContext::new().await?;
    let fresh = WgpuContext::with_options(ContextOptions {
        pooling: false,
        ..Default::default()
    })
    .await?;
    let mut rows = Vec::new();
    for &bytes in sizes {
        pooled.check_fits(bytes, "a benchmark buffer")?;
        drop(pooled.create_pooled(bytes as usize)); // warm the bucket
        let (pool_median_ns, pool_p99_ns) = median_p99(&mut time_batches(batches, 4096, || {
            drop(pooled.create_pooled(bytes as usize));
        }));
        // Fresh buffers: at most 2 GiB created in all per measurement (browsers free
        // destroyed memory lazily and lose the device under that much churn).
        let fresh_batches = ((2u64 << 30) / (16 * bytes)).clamp(3, batches as u64) as usize;
        let device = &pooled.device;
        let (create_median_ns, create_p99_ns) =
            median_p99(&mut time_batches(fresh_batches, 16, || {
                let buffer = device.create_buffer(&wgpu::BufferDescriptor {
                    label: None,
                    size: bytes,
                    usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                });
                buffer.destroy();
            }));
        let mut dispatch_ns = Vec::new();
        // At most 256 MiB of fresh buffers alive in one submit: a browser's GPU
        // process loses the device well before a GiB.
        let per_round = (256u64 << 20).div_ceil(bytes).clamp(1, 16) as u32;
        for ctx in [&pooled, &fresh] {
            let n = (bytes / 4) as u32;
            let one_round = || async move {
                let start = now_ms();
                let last = ctx.scope(|| {
                    let mut last = None;
                    for i in 0..per_round {
                        let out = ctx.create_pooled(bytes as usize);
                        ctx.dispatch(&FILL, &[n, i, 0, 0], &[&out], grid_1d(n, 256));
                        last = Some(out);
                    }
                    last.expect("at least one dispatch")
                });
                ctx.download::<u32>(&last, 1).await?;
                Ok::<f64, crate::Error>((now_ms() - start) * 1e6 / per_round as f64)
            };
            one_round().await?; // warm-up: pipelines, buckets, staging
            let mut samples = Vec::new();
            let rounds = ((2u64 << 30) / (per_round as u64 * bytes)).clamp(3, 20);
            for _ in 0..rounds {
                samples.push(one_round().await?);
            }
            dispatch_ns.push(median_p99(&mut samples).0);
        }
        rows.push(PoolLatencyRow {
            bytes,
            pool_median_ns,
            pool_p99_ns,
            create_median_ns,
            create_p99_ns,
            dispatch_pooled_ns: dispatch_ns[0],
            dispatch_fresh_ns: dispatch_ns[1],
        });
    }
    Ok(rows)
}

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
/// then the next) so that a machine busy with other work slows them alike.
pub async fn step_variants(
    cfg: &TrainConfig,
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
    for (_, pool, belt, kernels) in &runs {
        let cfg = TrainConfig {
            pool: *pool,
            belt: *belt,
            kernels: *kernels,
            ..cfg.clone()
        };
        trainers.push(Trainer::new(cfg, corpus.clone()).await?);
    }
    let mut created = Vec::new();
    let mut dispatched = Vec::new();
    for trainer in &mut trainers {
        for _ in 0..warmup {
            trainer.step().await?;
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
            let s = trainer.step().await?;
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
    step_runs(runs.collect(), preset, corpus, warmup, steps).await
}

/// ms a step when `n` steps are recorded before their losses are read
/// ([`Trainer::steps`]; 1: [`Trainer::step`]), for each `n` of `values` and each
/// number of calls kept in flight of `in_flight` (1: each call waits for the one
/// before; 2: the next is recorded while the last one's figures come back), taken
/// in turns. Rows are labelled `at once N` (`, K in flight` past 1); `steps` counts
/// calls.
pub async fn at_once_variants(
    cfg: &TrainConfig,
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
    step_runs(runs, preset, corpus, warmup, steps).await
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
            let figures = crate::train::StepsInFlight::figures(oldest).await?;
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
    preset: &str,
    corpus: &Corpus,
    warmup: u32,
    calls: u32,
) -> Result<Vec<StepRow>> {
    let mut trainers = Vec::new();
    for (_, cfg, n, k) in &runs {
        let mut trainer = Trainer::new(cfg.clone(), corpus.clone()).await?;
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

#[derive(Clone, Debug, serde::Serialize)]
pub struct KernelRow {
    pub preset: String,
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
    preset: &str,
    corpus: &Corpus,
    warmup: u32,
    steps: u32,
) -> Result<Vec<KernelRow>> {
    let cfg = TrainConfig {
        time_dispatches: true,
        ..cfg.clone()
    };
    let mut trainer = Trainer::new(cfg, corpus.clone()).await?;
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

#[derive(Clone, Debug, serde::Serialize)]
pub struct PolicyRow {
    pub preset: String,
    pub policy: String,
    /// Most memory the pooled buffers took at once (in use + held free).
    pub peak_bytes_reserved: u64,
    /// Most bytes live tensors asked for at once.
    pub peak_bytes_requested: u64,
    pub ratio: f64,
    pub hit_rate: f64,
    pub buffers_created_after_warmup: u64,
}

/// The policies compared by [`policies`].
pub fn policy_set() -> Vec<SizePolicy> {
    vec![
        SizePolicy::PowerOfTwo,
        SizePolicy::Subdivided { subdivisions: 2 },
        SizePolicy::Subdivided { subdivisions: 4 },
        SizePolicy::Subdivided { subdivisions: 8 },
        SizePolicy::Exact,
    ]
}

/// Trains `warmup + steps` steps under each policy and reports its memory.
pub async fn policies(
    cfg: &TrainConfig,
    preset: &str,
    corpus: &Corpus,
    warmup: u32,
    steps: u32,
) -> Result<Vec<PolicyRow>> {
    let mut rows = Vec::new();
    for policy in policy_set() {
        let cfg = TrainConfig {
            policy,
            ..cfg.clone()
        };
        let mut trainer = Trainer::new(cfg, corpus.clone()).await?;
        for _ in 0..warmup {
            trainer.step().await?;
        }
        let created = trainer.context().counters().buffers_created;
        for _ in 0..steps {
            trainer.step().await?;
        }
        // Sampling-free, eval-free: training steps only.
        let counters = trainer.context().counters();
        let pool = trainer.context().pool_stats();
        rows.push(PolicyRow {
            preset: preset.into(),
            policy: policy.label(),
            peak_bytes_reserved: counters.peak_bytes_reserved,
            peak_bytes_requested: counters.peak_bytes_requested_in_use,
            ratio: counters.peak_bytes_reserved as f64
                / counters.peak_bytes_requested_in_use.max(1) as f64,
            hit_rate: pool.hit_rate(),
            buffers_created_after_warmup: counters.buffers_created - created,
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
    let mut trainer = Trainer::new(cfg, corpus.clone()).await?;
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

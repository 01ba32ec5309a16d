//! The planned policy end to end: after one traced step, a step's tensors take their
//! planned ranges of a few arenas; training is bit-identical to the pool's, a
//! steady step creates nothing, and the arenas hold what the step asks for and
//! hardly more. GPU bodies run natively and in headless Chromium.

mod common;

use tidepool::gpu::ContextOptions;
use tidepool::planner::{self, Lifetime, Limits};
use tidepool::pool::SizePolicy;
use tidepool::trace::StepTrace;
use tidepool::train::{TrainConfig, Trainer};
use tidepool::tuning::Target;

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

/// Odd sizes on purpose; several layers so that lifetimes interleave.
fn config(policy: SizePolicy) -> TrainConfig {
    TrainConfig {
        layers: 2,
        heads: 2,
        width: 24,
        context: 19,
        batch: 3,
        lr: 1e-2,
        warmup: 2,
        steps: 100,
        dropout: 0.1,
        policy,
        ..TrainConfig::preset("tiny").unwrap()
    }
}

/// Losses (as bits) of `steps` steps and the parameters after them.
async fn run(cfg: TrainConfig, steps: u32, poison: bool) -> (Vec<u32>, Vec<Vec<f32>>, Trainer) {
    run_with(cfg, ContextOptions::default(), steps, poison).await
}

async fn run_with(
    cfg: TrainConfig,
    options: ContextOptions,
    steps: u32,
    poison: bool,
) -> (Vec<u32>, Vec<Vec<f32>>, Trainer) {
    let mut trainer = Trainer::with_options(cfg, common::corpus(), options)
        .await
        .expect("trainer");
    let mut losses = Vec::new();
    for i in 0..steps {
        if poison && i == 1 {
            // After the traced step: its plan's arenas exist, unused.
            trainer.context().poison_arenas();
        }
        losses.push(trainer.step().await.expect("step").loss.to_bits());
    }
    let params = trainer.parameters().await.expect("parameters");
    (losses, params, trainer)
}

/// Runs bound `read_write` (`--bindings read-write`) against runs bound as
/// declared: the same bits where a CPU adapter compiles both (lavapipe,
/// SwiftShader: the CPU kernels' target). Elsewhere the `read_write` pipelines are
/// other shader code, which a GPU's compiler may contract or order otherwise (an
/// H200's does, by an ulp or two a step): the losses agree within 1e-5, and the
/// parameters within 1e-3 of their norm (Adam turns an ulp of a gradient near zero
/// into a whole step of its own sign, so single parameters may differ by 2 x lr).
fn same_training(
    trainer: &Trainer,
    (losses, params): (&[u32], &[Vec<f32>]),
    (want_losses, want_params): (&[u32], &[Vec<f32>]),
) {
    if trainer.context().kernel_target() == Target::Cpu {
        assert_eq!(losses, want_losses, "losses differ");
        assert!(same_bits(params, want_params), "parameters differ");
        return;
    }
    assert_eq!(losses.len(), want_losses.len());
    for (a, b) in losses.iter().zip(want_losses) {
        let (a, b) = (f32::from_bits(*a), f32::from_bits(*b));
        assert!(
            (a - b).abs() <= 1e-5 * a.abs().max(1.0),
            "losses {a} and {b}"
        );
    }
    assert_eq!(params.len(), want_params.len());
    let (mut diff, mut norm) = (0f64, 0f64);
    for (x, y) in params.iter().zip(want_params) {
        assert_eq!(x.len(), y.len());
        for (p, q) in x.iter().zip(y) {
            diff += f64::from(p - q).powi(2);
            norm += f64::from(*q).powi(2);
        }
    }
    let relative = (diff / norm.max(f64::MIN_POSITIVE)).sqrt();
    assert!(
        relative <= 1e-3,
        "parameters differ by {relative:.2e} of their norm"
    );
}

fn same_bits(a: &[Vec<f32>], b: &[Vec<f32>]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits())
        })
}

gpu_test!(
    planned_training_is_bit_identical_to_the_pool,
    bit_identical_body(None, 100)
);
gpu_test!(
    planned_training_is_bit_identical_with_the_gpu_kernels,
    bit_identical_body(Some(Target::Gpu), 20)
);
/// 100 steps under `planned` and under `pow2/8`: the same losses and parameters,
/// bit for bit; the arenas poisoned with NaN before the first planned step change
/// nothing (every kernel writes all of its output before anything reads it).
/// With the GPU kernels too (20 steps): other kernels, other operands kept apart.
async fn bit_identical_body(kernels: Option<Target>, steps: u32) {
    let options = ContextOptions {
        kernels,
        ..ContextOptions::default()
    };
    let (pool_losses, pool_params, _) = run_with(
        config(SizePolicy::Subdivided { subdivisions: 8 }),
        options.clone(),
        steps,
        false,
    )
    .await;
    let (losses, params, trainer) =
        run_with(config(SizePolicy::Planned), options, steps, true).await;
    assert_eq!(losses, pool_losses, "losses differ");
    assert!(
        same_bits(&params, &pool_params),
        "parameters differ after {steps} steps"
    );
    let ctx = trainer.context();
    assert_eq!(ctx.plans_made(), 1, "one plan for one step shape");
    let c = ctx.counters();
    assert_eq!(c.plan_misses, 0, "every request of a step foreseen");
    assert!(
        c.plan_hits >= 50 * u64::from(steps - 1),
        "the planned steps' tensors took their ranges: {} in {} steps",
        c.plan_hits,
        steps - 1
    );
    assert!(c.arena_bytes > 0);
    assert!(ctx.plan_refused().is_none());
}

gpu_test!(
    a_steady_planned_step_creates_nothing,
    steady_body(Target::Cpu)
);
gpu_test!(
    a_steady_planned_step_creates_nothing_with_the_gpu_kernels,
    steady_body(Target::Gpu)
);
/// After the traced step and the first planned one, a step creates no buffer and no
/// bind group (fixed ranges hit the bind-group cache) and binds every dispatch as
/// declared; it reserves at most 1% more than arenas
/// planned with no regard to bindings would (`--bindings read-write`), and with
/// the CPU kernels at most 1% more than the most its tensors asked for at once.
/// With either kernel set: a CPU adapter's and a GPU's dispatch different kernels
/// on different operands. (The GPU kernels' tensors at this small size are many
/// and tiny, so their 256-byte alignment alone costs a few percent.)
async fn steady_body(kernels: Target) {
    let cfg = TrainConfig {
        steps: 10,
        ..config(SizePolicy::Planned)
    };
    let options = ContextOptions {
        kernels: Some(kernels),
        ..ContextOptions::default()
    };
    let one_set = {
        let options = ContextOptions {
            read_write_bindings: true,
            ..options.clone()
        };
        let mut t = Trainer::with_options(cfg.clone(), common::corpus(), options)
            .await
            .expect("trainer");
        for _ in 0..3 {
            t.step().await.expect("step");
        }
        t.context().counters().peak_bytes_reserved
    };
    let mut trainer = Trainer::with_options(cfg, common::corpus(), options)
        .await
        .expect("trainer");
    for _ in 0..2 {
        trainer.step().await.expect("warm-up step");
    }
    trainer.context().reset_peaks();
    let before = trainer.context().counters();
    for _ in 0..4 {
        let s = trainer.step().await.expect("step");
        assert_eq!(s.buffers_created_step, 0, "step {} created buffers", s.step);
        assert_eq!(
            s.bind_groups_created_step, 0,
            "step {} made bind groups",
            s.step
        );
    }
    let after = trainer.context().counters();
    assert_eq!(after.buffers_created, before.buffers_created);
    // The plan put every dispatch's read-only operands in other arenas than its
    // outputs: every dispatch binds as declared, as under the pool (the same
    // pipelines, so the same arithmetic on any compiler).
    assert_eq!(
        after.read_write_dispatches, before.read_write_dispatches,
        "dispatches bound read_write in steady planned steps"
    );
    assert!(after.dispatches > before.dispatches);
    let hits = after.plan_hits - before.plan_hits;
    assert!(
        hits > 0 && hits % 4 == 0,
        "{hits} planned ranges in 4 steps"
    );
    assert_eq!(after.plan_misses, 0);
    let reserved = after.peak_bytes_reserved;
    assert!(
        reserved as f64 <= 1.01 * one_set as f64,
        "reserved {reserved}, against {one_set} in one set of arenas"
    );
    let ratio = reserved as f64 / after.peak_bytes_requested_in_use as f64;
    assert!(
        ratio <= 1.01 || kernels == Target::Gpu,
        "reserved {reserved} for {} requested: {ratio:.4}",
        after.peak_bytes_requested_in_use
    );
}

gpu_test!(
    evaluation_and_sampling_fall_back_to_the_pool,
    outside_body()
);
/// Evaluation and sampling are no training step: the pool serves them, they are
/// counted, and the plan stays (no new one, no misses).
async fn outside_body() {
    let cfg = TrainConfig {
        steps: 10,
        eval_every: 2,
        ..config(SizePolicy::Planned)
    };
    let mut trainer = Trainer::new(cfg, common::corpus()).await.expect("trainer");
    for _ in 0..4 {
        trainer.step().await.expect("step");
    }
    trainer.sample("\n", 3, 1.0, 1).await.expect("sample");
    let s = trainer.step().await.expect("step after sampling");
    assert!(s.loss.is_finite());
    let c = trainer.context().counters();
    assert!(c.plan_outside > 0, "evaluation and sampling counted");
    assert_eq!(c.plan_misses, 0);
    assert_eq!(trainer.context().plans_made(), 1);
}

gpu_test!(steps_at_once_follow_the_plan, steps_at_once_body());
/// `steps(n)` uploads a call's batches with its first step: uploads are never
/// planned, so every step of the call follows the one plan.
async fn steps_at_once_body() {
    let cfg = config(SizePolicy::Planned);
    let (one_by_one, _, _) = run(cfg.clone(), 6, false).await;
    let mut trainer = Trainer::new(cfg, common::corpus()).await.expect("trainer");
    let mut losses: Vec<u32> = trainer
        .steps(1)
        .await
        .expect("steps")
        .iter()
        .map(|s| s.loss.to_bits())
        .collect();
    losses.extend(
        trainer
            .steps(5)
            .await
            .expect("steps")
            .iter()
            .map(|s| s.loss.to_bits()),
    );
    assert_eq!(losses, one_by_one);
    assert_eq!(trainer.context().plans_made(), 1);
    assert_eq!(trainer.context().counters().plan_misses, 0);
}

/// The storage tensors born and dead inside a traced step, as the planned policy
/// plans them: a birth is matched to the death of the same buffer.
fn step_lifetimes(trace: &StepTrace) -> Vec<Lifetime> {
    let mut born: std::collections::HashMap<u64, (u64, u32)> = Default::default();
    let mut tensors = Vec::new();
    for e in trace.events.iter().filter(|e| e.purpose == "storage") {
        if e.kind.is_birth() {
            born.insert(e.buffer, (e.requested, e.seq));
        } else if let Some((size, birth)) =
            e.kind.is_death().then(|| born.remove(&e.buffer)).flatten()
        {
            tensors.push(Lifetime {
                size,
                birth,
                death: e.seq,
            });
        }
    }
    tensors
}

gpu_test!(
    a_real_step_is_planned_at_its_peak_under_a_close_limit,
    close_limit_body(Target::Cpu)
);

/// A real step's tensors (traced on the pool, the CPU kernels' step on any
/// adapter) planned under a binding limit just
/// above their peak, as an H200's 2 GiB sits above the shakespeare step's 2.07 GB:
/// the arena stays within 1% of the most bytes live at once. A planner that took
/// the room left under the limit for a gap put tensors on top that fit a gap below.
async fn close_limit_body(kernels: Target) {
    let cfg = TrainConfig {
        steps: 10,
        ..config(SizePolicy::Subdivided { subdivisions: 8 })
    };
    let options = ContextOptions {
        kernels: Some(kernels),
        ..ContextOptions::default()
    };
    let mut trainer = Trainer::with_options(cfg, common::corpus(), options)
        .await
        .expect("trainer");
    trainer.step().await.expect("warm-up step");
    let (_, trace) = trainer.step_traced("steady").await.expect("traced step");
    let tensors = step_lifetimes(&trace);
    assert!(tensors.len() > 50, "{} tensors in a step", tensors.len());
    let lower = planner::lower_bound(&tensors);
    for headroom in [1.02, 1.05, 1.1, 1.2] {
        let limits = Limits {
            offset_alignment: 32,
            max_arena_bytes: (lower as f64 * headroom) as u64,
        };
        let plan = planner::plan(&tensors, limits).expect("plan");
        let ratio = plan.reserved() as f64 / lower as f64;
        assert!(
            ratio <= 1.01,
            "limit {headroom} x the peak: arenas {:?} for a peak of {lower} ({ratio:.4})",
            plan.arenas
        );
    }
}

gpu_test!(
    the_planned_binding_rule_alone_changes_no_result,
    read_write_body()
);
/// `pow2/8` with every storage binding `read_write` (repeats on stand-ins; the
/// benchmarks' `--bindings read-write`) trains as `pow2/8` bound as declared
/// ([`same_training`]): the switch times the rule, nothing else.
async fn read_write_body() {
    let steps = 6;
    let cfg = config(SizePolicy::Subdivided { subdivisions: 8 });
    let (losses, params, declared) = run(cfg.clone(), steps, false).await;
    let options = ContextOptions {
        read_write_bindings: true,
        ..ContextOptions::default()
    };
    let mut trainer = Trainer::with_options(cfg, common::corpus(), options)
        .await
        .expect("trainer");
    let mut rw_losses = Vec::new();
    for _ in 0..steps {
        rw_losses.push(trainer.step().await.expect("step").loss.to_bits());
    }
    let rw_params = trainer.parameters().await.expect("parameters");
    same_training(&trainer, (&rw_losses, &rw_params), (&losses, &params));
    trainer.context().take_error().expect("no wgpu error");
    // The rule was in force: its stand-in for repeated operands exists.
    let made = |t: &Trainer| t.context().counters().buffers_created;
    assert_eq!(
        made(&trainer),
        made(&declared) + 1,
        "one stand-in buffer more"
    );
}

gpu_test!(
    one_set_of_arenas_bound_read_write_trains_the_same,
    one_set_body()
);
/// The other binding rule: `planned` with every binding `read_write`
/// (`--bindings read-write`) plans all tensors into one set of arenas, binds every
/// dispatch so, and trains as the pool does ([`same_training`]); the plan that
/// keeps rivals apart has more arenas.
async fn one_set_body() {
    let steps = 12;
    let (pool_losses, pool_params, _) = run(
        config(SizePolicy::Subdivided { subdivisions: 8 }),
        steps,
        false,
    )
    .await;
    let options = ContextOptions {
        read_write_bindings: true,
        ..ContextOptions::default()
    };
    let mut trainer = Trainer::with_options(config(SizePolicy::Planned), common::corpus(), options)
        .await
        .expect("trainer");
    let mut losses = Vec::new();
    for i in 0..steps {
        if i == 1 {
            trainer.context().poison_arenas();
        }
        losses.push(trainer.step().await.expect("step").loss.to_bits());
    }
    let params = trainer.parameters().await.expect("parameters");
    same_training(&trainer, (&losses, &params), (&pool_losses, &pool_params));
    let c = trainer.context().counters();
    assert_eq!(
        c.read_write_dispatches, c.dispatches,
        "every dispatch read_write"
    );
    assert_eq!(c.plan_misses, 0);
    let one = trainer.context().memory_plan().expect("a plan");
    let apart = run(config(SizePolicy::Planned), 2, false).await.2;
    let apart = apart.context().memory_plan().expect("a plan");
    assert!(
        apart.arenas.len() > one.arenas.len(),
        "{} arenas with rivals apart against {}",
        apart.arenas.len(),
        one.arenas.len()
    );
}

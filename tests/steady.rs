//! After warm-up nothing is created, for every run shape: random runs (steps, call
//! lengths with a short last call, one or two calls in flight, evaluations, samples,
//! traced calls, saves and resumes) and their counters. After a trainer's second
//! step no training step creates a buffer, a bind group or a pipeline; an
//! evaluation, a sample or a save creates objects only the first time it runs, and
//! the step stats say which path created what.
//!
//! Natively a property test draws the shapes (proptest); in Chromium a few seeded
//! shapes of the same kind run (proptest does not build for wasm32).

mod common;

use tidepool::gpu::{ContextOptions, Created, CreatedByPath};
use tidepool::rng::Rng;
use tidepool::train::{StepStats, StepsInFlight, TrainConfig, Trainer};

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

/// One run: its calls' lengths, and what happens between them.
#[derive(Clone, Debug)]
struct RunShape {
    /// Steps of each call (1 to 16; the last may be short).
    calls: Vec<u32>,
    /// Calls kept in flight: 1 or 2.
    in_flight: u32,
    eval_every: u32,
    eval_batches: usize,
    /// Sample a few characters after these calls.
    sample_after: Vec<usize>,
    /// Trace these calls.
    traced: Vec<usize>,
    /// Save after this call, and go on in a trainer resumed from the save.
    resume_after: Option<usize>,
}

impl RunShape {
    /// A shape from a seeded generator (the browser's cases).
    fn drawn(rng: &mut Rng) -> RunShape {
        let n = 2 + rng.below(4);
        let calls = (0..n).map(|_| 1 + rng.below(16) as u32).collect();
        RunShape {
            calls,
            in_flight: 1 + rng.below(2) as u32,
            eval_every: [0, 3, 7, 10][rng.below(4)],
            eval_batches: 1 + rng.below(20),
            sample_after: (0..n).filter(|_| rng.below(3) == 0).collect(),
            traced: (0..n).filter(|_| rng.below(4) == 0).collect(),
            resume_after: (rng.below(2) == 0).then(|| rng.below(n)),
        }
    }
}

fn config(shape: &RunShape) -> TrainConfig {
    TrainConfig {
        context: 16,
        batch: 2,
        eval_every: shape.eval_every,
        eval_batches: shape.eval_batches,
        ..TrainConfig::preset("tiny").expect("a preset")
    }
}

/// What a run saw: for each step, its number, the steps its trainer had done when
/// it was made (0 or a resume's step), and what it created by path.
#[derive(Default)]
struct Seen {
    steps: Vec<(u32, u32, CreatedByPath)>,
}

impl Seen {
    fn add(&mut self, first: u32, stats: &[StepStats]) {
        for s in stats {
            self.steps.push((s.step, first, s.created_step_by_path));
        }
    }

    /// The invariant: after each trainer's second step, the training path creates
    /// nothing, and every other path creates only in the first step that shows it.
    fn check(&self, shape: &RunShape) -> Result<(), String> {
        let none = Created::default();
        let mut seen_path = [false; 3];
        let mut trainer = 0;
        for &(step, first, by) in &self.steps {
            // A resumed trainer is a new context: its paths run for the first time.
            if first != trainer {
                (trainer, seen_path) = (first, [false; 3]);
            }
            let what = |path: &str, c: Created| {
                format!("step {step} (trainer from step {first}): {path} created {c:?}; {shape:?}")
            };
            if step <= first + 2 {
                continue;
            }
            if by.train != none {
                return Err(what("training", by.train));
            }
            if by.setup != none {
                return Err(what("setup", by.setup));
            }
            let others = [by.evaluate, by.sample, by.checkpoint];
            for (i, (c, name)) in others
                .into_iter()
                .zip(["evaluation", "sampling", "checkpoint"])
                .enumerate()
            {
                if c != none {
                    if seen_path[i] {
                        return Err(what(&format!("a later {name}"), c));
                    }
                    seen_path[i] = true;
                }
            }
        }
        Ok(())
    }
}

/// Runs `shape` and checks its counters.
async fn run(shape: RunShape) -> Result<(), String> {
    run_with(shape, ContextOptions::default()).await
}

/// [`run`] on a context built from `options` (a resumed trainer takes the defaults).
async fn run_with(shape: RunShape, options: ContextOptions) -> Result<(), String> {
    let err = |e: tidepool::Error| format!("{e}; {shape:?}");
    let corpus = common::corpus();
    let mut trainer = Trainer::with_options(config(&shape), corpus.clone(), options)
        .await
        .map_err(err)?;
    let mut seen = Seen::default();
    let mut first = 0;
    let mut ahead: Option<StepsInFlight> = None;
    for (i, &n) in shape.calls.iter().enumerate() {
        let call = match ahead.take() {
            Some(call) => call,
            None => start(&mut trainer, n, shape.traced.contains(&i)).map_err(err)?,
        };
        // The next call starts before this one is back where nothing is due.
        let next = shape.calls.get(i + 1);
        let overlap = shape.in_flight == 2
            && !call.evaluates()
            && !shape.sample_after.contains(&i)
            && shape.resume_after != Some(i);
        if let (true, Some(&next)) = (overlap, next) {
            ahead = Some(start(&mut trainer, next, shape.traced.contains(&(i + 1))).map_err(err)?);
        }
        let figures = call.figures().await.map_err(err)?;
        let stats = trainer.finish_steps(figures).await.map_err(err)?;
        seen.add(first, &stats);
        if ahead.is_none() && shape.sample_after.contains(&i) {
            trainer.sample("th", 3, 0.8, 0).await.map_err(err)?;
        }
        if ahead.is_none() && shape.resume_after == Some(i) {
            let bytes = trainer.save().await.map_err(err)?;
            drop(trainer);
            trainer = Trainer::resume(&bytes, Some(corpus.clone()))
                .await
                .map_err(err)?;
            first = trainer.steps_done();
        }
    }
    seen.check(&shape)
}

/// Starts a call of `n` steps, with the allocation trace on around it if `traced`.
fn start(trainer: &mut Trainer, n: u32, traced: bool) -> tidepool::Result<StepsInFlight> {
    if !traced {
        return trainer.start_steps(n);
    }
    let trace = trainer.context().start_trace();
    let call = trainer.start_steps(n);
    let step = trainer.steps_done();
    trainer.context().finish_trace(trace, step, "steady");
    call
}

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use super::{run, run_with, RunShape};
    use proptest::prelude::*;
    use tidepool::gpu::ContextOptions;

    fn shapes() -> impl Strategy<Value = RunShape> {
        (1usize..6)
            .prop_flat_map(|n| {
                (
                    proptest::collection::vec(1u32..=16, n),
                    1u32..=2,
                    prop_oneof![Just(0u32), 1u32..12],
                    1usize..24,
                    proptest::collection::vec(0..n, 0..3),
                    proptest::collection::vec(0..n, 0..3),
                    proptest::option::of(0..n),
                )
            })
            .prop_map(
                |(
                    calls,
                    in_flight,
                    eval_every,
                    eval_batches,
                    sample_after,
                    traced,
                    resume_after,
                )| {
                    RunShape {
                        calls,
                        in_flight,
                        eval_every,
                        eval_batches,
                        sample_after,
                        traced,
                        resume_after,
                    }
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]
        #[test]
        fn nothing_is_created_after_warm_up_in_any_run_shape(shape in shapes()) {
            let result = pollster::block_on(run(shape));
            prop_assert!(result.is_ok(), "{}", result.unwrap_err());
        }
    }

    /// The shapes the issue names: 40 steps in calls of 16 (a short last call), and
    /// 200 steps with evaluations every 50.
    #[test]
    fn the_named_shapes_create_nothing_after_warm_up() {
        let named = [
            RunShape {
                calls: vec![16, 16, 8],
                in_flight: 1,
                eval_every: 0,
                eval_batches: 1,
                sample_after: vec![],
                traced: vec![],
                resume_after: None,
            },
            RunShape {
                calls: vec![1, 1, 1, 16, 16, 5],
                in_flight: 2,
                eval_every: 20,
                eval_batches: 20,
                sample_after: vec![1, 4],
                traced: vec![0, 2],
                resume_after: Some(3),
            },
        ];
        for shape in named {
            pollster::block_on(run(shape)).unwrap();
        }
    }

    /// The kernels a GPU runs (its GEMM variants, its attention), forced on this
    /// adapter: evaluations and samples between calls, two in flight.
    #[test]
    fn the_gpu_kernels_create_nothing_after_warm_up() {
        let shape = RunShape {
            calls: vec![1, 2, 16, 16, 16, 7],
            in_flight: 2,
            eval_every: 10,
            eval_batches: 3,
            sample_after: vec![1, 3],
            traced: vec![],
            resume_after: None,
        };
        let options = ContextOptions {
            kernels: Some(tidepool::tuning::Target::Gpu),
            ..Default::default()
        };
        pollster::block_on(run_with(shape, options)).unwrap();
    }
}

// A few seeded shapes in the browser (and natively, as a fixed case).
gpu_test!(seeded_run_shapes_create_nothing_after_warm_up, async {
    let mut rng = Rng::new(0x57EAD7);
    for _ in 0..3 {
        let shape = RunShape::drawn(&mut rng);
        run(shape).await.unwrap();
    }
});

/// `tidepool train --preset tiny --steps 200 --eval-every 50 --json`: after step 2
/// no step creates a buffer or a bind group but the one with the first evaluation,
/// whose creations are the evaluation's.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn the_cli_creates_nothing_after_warm_up_but_the_first_evaluation() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tidepool"))
        .args(["train", "--preset", "tiny", "--steps", "200"])
        .args(["--eval-every", "50", "--eval-batches", "40", "--json"])
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .output()
        .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tidepool train failed: {stderr}");
    let steps: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object a line"))
        .filter(|l: &serde_json::Value| l["final"].is_null())
        .collect();
    assert_eq!(steps.len(), 200);
    let count = |s: &serde_json::Value, key: &str| s[key].as_u64().expect(key);
    for s in &steps[2..] {
        let step = count(s, "step");
        let by = &s["created_step_by_path"];
        for path in ["setup", "train", "sample", "checkpoint"] {
            assert_eq!(by[path]["buffers"], 0, "step {step}: {path} {by}");
            assert_eq!(by[path]["bind_groups"], 0, "step {step}: {path} {by}");
        }
        if step != 50 {
            assert_eq!(count(s, "buffers_created_step"), 0, "step {step}: {by}");
            assert_eq!(count(s, "bind_groups_created_step"), 0, "step {step}: {by}");
        }
        assert_eq!(count(s, "pipelines_created_step"), 0, "step {step}: {by}");
    }
    // The first step made the run's objects, all under training.
    let first = &steps[0]["created_step_by_path"];
    assert!(first["train"]["buffers"].as_u64() > Some(0), "{first}");
    assert!(steps[49]["val_loss"].is_number(), "step 50 evaluated");
}

//! The trainer end to end: step parity with the CPU reference (llm.c's check),
//! zero buffer creations in steady state, learning, and clear errors for bad input.
//! GPU bodies run natively and in headless Chromium.

mod common;

use tidepool::data::Corpus;
use tidepool::reference_train::ReferenceTrainer;
use tidepool::train::{TrainConfig, Trainer};
use tidepool::Error;

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

/// Small enough for the CPU reference to keep up; odd sizes on purpose.
fn parity_config() -> TrainConfig {
    TrainConfig {
        layers: 2,
        heads: 2,
        width: 24,
        context: 19,
        batch: 3,
        lr: 1e-2,
        warmup: 2,
        steps: 10,
        ..TrainConfig::preset("tiny").unwrap()
    }
}

/// Max |a - b| over max |b| (and a floor, for tensors that are all near zero).
fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(1e-6f32, |m, x| m.max(x.abs()));
    let worst = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    worst / scale
}

/// GPU and CPU trainers built from `cfg` (same seed, batches, optimizer): every
/// parameter's gradient on the first batch, then `steps` steps of losses. Returns
/// both for further checks.
async fn assert_parity(cfg: TrainConfig, steps: u32) -> (Trainer, ReferenceTrainer) {
    let corpus = common::corpus();
    let mut gpu = Trainer::new(cfg.clone(), corpus.clone())
        .await
        .expect("gpu trainer");
    let mut cpu = ReferenceTrainer::new(cfg, corpus).expect("cpu trainer");

    // Step-1 gradients, on the batch both trainers will draw first.
    let (inputs, targets) = cpu.peek_batch();
    let (cpu_loss, cpu_grads) = cpu.gradients(&inputs, &targets);
    let (gpu_loss, gpu_grads) = gpu
        .compute_gradients(&inputs, &targets)
        .await
        .expect("grads");
    assert!(
        (gpu_loss - cpu_loss).abs() <= 1e-5 * cpu_loss.abs(),
        "loss {gpu_loss} vs {cpu_loss}"
    );
    // 1e-3 of each tensor's largest gradient: fp32 sums over a few hundred terms
    // in a different order land around 1e-6..1e-5; a wrong index is O(1).
    for ((g, c), spec) in gpu_grads.iter().zip(&cpu_grads).zip(&gpu.model().params()) {
        let err = rel_err(g, c);
        assert!(
            err < 1e-3,
            "gradient of {}: relative error {err:e}",
            spec.name
        );
    }

    // Then the losses agree step after step (AdamW amplifies rounding a little).
    for step in 1..=steps {
        let (cpu_loss, _) = cpu.step();
        let gpu_loss = gpu.step().await.expect("step").loss;
        let rel = (gpu_loss - cpu_loss).abs() / cpu_loss.abs();
        assert!(
            rel < 1e-4,
            "step {step}: gpu {gpu_loss} vs cpu {cpu_loss} (rel {rel:e})"
        );
    }
    (gpu, cpu)
}

gpu_test!(step_parity_with_the_cpu_reference, step_parity_body());
/// llm.c's check: every gradient of step 1, then ten steps of losses. (Parameters
/// after ten steps are not compared element by element: AdamW's normalised update
/// turns rounding noise in a near-zero gradient into a full learning-rate step, so a
/// few coordinates may differ by lr while the model, and its loss, agree.)
async fn step_parity_body() {
    let (gpu, cpu) = assert_parity(parity_config(), 10).await;
    // The parameters still agree as a whole: relative L2 distance per tensor.
    let gpu_params = gpu.parameters().await.expect("params");
    for ((g, c), spec) in gpu_params
        .iter()
        .zip(&cpu.params)
        .zip(&gpu.model().params())
    {
        let diff: f64 = g.iter().zip(c).map(|(a, b)| ((a - b) as f64).powi(2)).sum();
        let norm: f64 = c.iter().map(|b| (*b as f64).powi(2)).sum();
        let rel = (diff / norm.max(1e-30)).sqrt();
        assert!(
            rel < 1e-2,
            "parameter {} after 10 steps: relative L2 distance {rel:e}",
            spec.name
        );
    }
}

gpu_test!(step_parity_with_dropout, dropout_parity_body());
/// The same with dropout on: GPU and CPU draw the same masks, forward and backward.
async fn dropout_parity_body() {
    let with = TrainConfig {
        dropout: 0.2,
        ..parity_config()
    };
    let corpus = common::corpus();
    let plain = ReferenceTrainer::new(parity_config(), corpus.clone()).unwrap();
    let dropping = ReferenceTrainer::new(with.clone(), corpus).unwrap();
    let (inputs, targets) = plain.peek_batch();
    assert_ne!(
        plain.gradients(&inputs, &targets).0,
        dropping.gradients(&inputs, &targets).0,
        "dropout changes the loss"
    );
    assert_parity(with, 5).await;
}

gpu_test!(steady_state_creates_no_buffers, steady_state_body());
async fn steady_state_body() {
    let mut trainer = Trainer::new(TrainConfig::preset("tiny").unwrap(), common::corpus())
        .await
        .expect("trainer");
    for _ in 0..3 {
        trainer.step().await.expect("warm-up step");
    }
    let warm = trainer.stats().clone();
    let mut held = Vec::new();
    for _ in 0..5 {
        let s = trainer.step().await.expect("step");
        assert_eq!(s.buffers_created_step, 0, "step {} created buffers", s.step);
        assert_eq!(s.dispatches_step, warm.dispatches_step, "step {}", s.step);
        assert!(
            s.step_hit_rate >= 0.99,
            "step {} hit rate {}",
            s.step,
            s.step_hit_rate
        );
        held.push(s.bytes_held);
    }
    assert_eq!(trainer.stats().buffers_created, warm.buffers_created);
    assert!(
        held.windows(2).all(|w| w[0] == w[1]),
        "bytes held moved: {held:?}"
    );
    assert!(warm.dispatches_step > 0);
    assert_eq!(
        trainer.stats().dispatches - warm.dispatches,
        5 * warm.dispatches_step
    );
    // Sampling uses fixed shapes, so after its first token it reuses too.
    let text = trainer.sample("\n", 3, 1.0, 10).await.expect("sample");
    assert_eq!(text.chars().count(), 3);
    let before = trainer.context().counters().buffers_created;
    trainer.sample("\n", 3, 1.0, 10).await.expect("sample");
    assert_eq!(trainer.context().counters().buffers_created, before);
}

gpu_test!(
    a_step_submitted_in_parts_trains_identically,
    submit_in_parts_body()
);
/// Submitting a step in parts (`submit_every`) changes when the GPU starts, not what
/// it computes: the same losses and parameters, bit for bit, as one submit a step.
async fn submit_in_parts_body() {
    let cfg = TrainConfig {
        dropout: 0.1,
        ..parity_config()
    };
    let mut runs = Vec::new();
    for submit_every in [0, 5] {
        let mut trainer = Trainer::new(
            TrainConfig {
                submit_every,
                ..cfg.clone()
            },
            common::corpus(),
        )
        .await
        .expect("trainer");
        let mut losses = Vec::new();
        let mut submits = Vec::new();
        for _ in 0..3 {
            let before = trainer.context().counters().submits;
            let s = trainer.step().await.expect("step");
            losses.push(s.loss.to_bits());
            submits.push((s.submits - before, s.dispatches_step));
        }
        runs.push((
            losses,
            trainer.parameters().await.expect("parameters"),
            submits,
        ));
    }
    let (one, parts) = (&runs[0], &runs[1]);
    for (&(whole, dispatches), &(split, _)) in one.2.iter().zip(&parts.2) {
        // The step's work, with the copies of its loss and norm into the readback:
        // the read needs no submit of its own. In parts: 4 dispatches, then 5 a
        // part, and the last part holds the rest and the norm's copy (one more
        // command: counted as one more item of the scope).
        assert_eq!(whole, 1, "one submit a step");
        let parts = tidepool::gpu::scope_submits(dispatches + 1, 5);
        assert_eq!(split, parts, "{dispatches} dispatches");
    }
    assert_eq!(one.0, parts.0, "losses");
    assert!(one.1 == parts.1, "parameters differ after 3 steps");
}

gpu_test!(
    steps_at_once_train_as_steps_one_by_one,
    steps_at_once_body()
);
/// `steps(n)` records n steps before reading their losses: the same losses,
/// parameters and learning rates, bit for bit, as n calls of `step()`; the steps
/// after the first go out in one submit each; after warm-up it creates nothing
/// either; a bad n is a config error.
async fn steps_at_once_body() {
    let cfg = TrainConfig {
        dropout: 0.1,
        ..parity_config()
    };
    let mut one = Trainer::new(cfg.clone(), common::corpus())
        .await
        .expect("trainer");
    let mut many = Trainer::new(cfg, common::corpus()).await.expect("trainer");
    let mut want = Vec::new();
    for _ in 0..9 {
        let s = one.step().await.expect("step");
        want.push((
            s.step,
            s.loss.to_bits(),
            s.lr.to_bits(),
            s.grad_norm.to_bits(),
        ));
    }
    let mut got = Vec::new();
    let submit_every = many.config().submit_every;
    assert!(submit_every > 0, "the parts below need submit_every");
    for n in [3, 3, 3] {
        let mut last = many.context().counters().submits;
        let stats = many.steps(n).await.expect("steps");
        assert_eq!(stats.len(), n as usize);
        // The first step goes out in parts (the GPU waits for it); the ones after
        // it in one submit each, recorded while the GPU runs the one before.
        for (i, s) in stats.iter().enumerate() {
            let parts = if i == 0 {
                tidepool::gpu::scope_submits(s.dispatches_step + 1, submit_every)
            } else {
                1
            };
            assert!(
                parts > 1 || i > 0,
                "a step of {} dispatches",
                s.dispatches_step
            );
            assert_eq!(s.submits - last, parts, "step {} of a call", i + 1);
            last = s.submits;
        }
        got.extend(stats.iter().map(|s| {
            (
                s.step,
                s.loss.to_bits(),
                s.lr.to_bits(),
                s.grad_norm.to_bits(),
            )
        }));
        if got.len() == 9 {
            // The third call of the same n: its staging and buffers all come back.
            for s in &stats {
                assert_eq!(s.buffers_created_step, 0, "step {} created buffers", s.step);
                assert_eq!(s.bind_groups_created_step, 0, "step {}", s.step);
            }
        }
    }
    assert_eq!(got, want);
    assert_eq!(many.steps_done(), 9);
    assert!(
        one.parameters().await.unwrap() == many.parameters().await.unwrap(),
        "parameters differ after 9 steps"
    );
    for n in [0, tidepool::train::MAX_STEPS_AT_ONCE + 1] {
        let e = many.steps(n).await.expect_err("a bad n");
        assert_eq!(e.kind(), "config", "{e}");
    }
    assert_eq!(many.steps_done(), 9, "a refused call takes no step");
}

gpu_test!(
    steps_in_flight_train_as_calls_one_after_another,
    steps_in_flight_body()
);
/// Two calls in flight (`start_steps` while the one before is unread, as the page
/// trains): the same losses, norms, learning rates and evaluations, bit for bit, as
/// the same calls made one after another; a call whose steps reach `eval_every`
/// says so (no call may start after it before it finishes); after warm-up a call in
/// flight beside another creates nothing.
async fn steps_in_flight_body() {
    let cfg = TrainConfig {
        dropout: 0.1,
        eval_every: 6,
        eval_batches: 2,
        ..parity_config()
    };
    let bits = |s: &tidepool::train::StepStats| {
        let val = s.val_loss.map(f32::to_bits);
        (
            s.step,
            s.loss.to_bits(),
            s.lr.to_bits(),
            s.grad_norm.to_bits(),
            val,
        )
    };
    let mut one = Trainer::new(cfg.clone(), common::corpus())
        .await
        .expect("trainer");
    let mut want = Vec::new();
    for _ in 0..5 {
        want.extend(one.steps(3).await.expect("steps").iter().map(bits));
    }
    let mut two = Trainer::new(cfg, common::corpus()).await.expect("trainer");
    let mut got = Vec::new();
    let finish = async |two: &mut Trainer, call: tidepool::train::StepsInFlight| {
        let figures = call.figures().await.expect("figures");
        let stats = two.finish_steps(figures).await.expect("finish");
        for s in &stats {
            assert!(
                s.ms.is_finite() && s.ms > 0.0,
                "step {}: {} ms",
                s.step,
                s.ms
            );
        }
        stats
    };
    // Steps 1-3 and 4-6 in flight together; 6 evaluates, so 7-9 waits for it.
    let a = two.start_steps(3).expect("start");
    let b = two.start_steps(3).expect("start");
    assert!(!a.evaluates() && b.evaluates());
    got.extend(finish(&mut two, a).await.iter().map(bits));
    got.extend(finish(&mut two, b).await.iter().map(bits));
    // 7-9 beside 10-12 (which evaluates), then 13-15 alone: every buffer a pair
    // needs was made by the first pair.
    let c = two.start_steps(3).expect("start");
    let d = two.start_steps(3).expect("start");
    assert!(!c.evaluates() && d.evaluates());
    for stats in [finish(&mut two, c).await, finish(&mut two, d).await] {
        for s in &stats {
            assert_eq!(s.buffers_created_step, 0, "step {} created buffers", s.step);
            assert_eq!(s.bind_groups_created_step, 0, "step {}", s.step);
        }
        got.extend(stats.iter().map(bits));
    }
    let e = two.start_steps(3).expect("start");
    got.extend(finish(&mut two, e).await.iter().map(bits));
    assert_eq!(got, want);
    assert!(
        got[5].4.is_some() && got[11].4.is_some(),
        "steps 6 and 12 evaluate"
    );
    assert!(
        one.parameters().await.unwrap() == two.parameters().await.unwrap(),
        "parameters differ after 15 steps"
    );
}

gpu_test!(
    evaluation_is_the_mean_of_the_reference_losses,
    evaluation_body()
);
/// `evaluate` records its batches in groups and reads each group's losses at once:
/// its mean over 19 held-out batches (a group of 16, then 3) matches the CPU
/// reference's losses on the same windows, averaged on the host.
async fn evaluation_body() {
    let cfg = TrainConfig {
        eval_batches: 19,
        ..parity_config()
    };
    let corpus = common::corpus();
    let reference = ReferenceTrainer::new(cfg.clone(), corpus.clone()).expect("reference");
    let mut trainer = Trainer::new(cfg.clone(), corpus.clone())
        .await
        .expect("trainer");
    let got = trainer.evaluate().await.expect("eval");
    let mut batcher = tidepool::train::Batcher::new(tidepool::train::EVAL_SEED);
    let mut total = 0.0f64;
    for _ in 0..cfg.eval_batches {
        let (inputs, targets) = batcher.next(&corpus.val, cfg.batch, cfg.context);
        total += f64::from(reference.gradients(&inputs, &targets).0);
    }
    let want = (total / cfg.eval_batches as f64) as f32;
    assert!(
        (got - want).abs() <= 1e-5 * want.abs(),
        "evaluate {got} against the reference's mean {want}"
    );
}

gpu_test!(no_pool_mode_creates_buffers_every_step, no_pool_body());
async fn no_pool_body() {
    let cfg = TrainConfig {
        pool: false,
        ..TrainConfig::preset("tiny").unwrap()
    };
    let mut trainer = Trainer::new(cfg, common::corpus()).await.expect("trainer");
    trainer.step().await.expect("step");
    let s = trainer.step().await.expect("step");
    assert!(
        s.buffers_created_step > 50,
        "created {}",
        s.buffers_created_step
    );
    assert_eq!(s.pool.hits, 0);
    assert_eq!(s.bytes_held, 0);
}

#[cfg(not(target_arch = "wasm32"))]
#[test]
fn tiny_preset_learns_the_default_corpus() {
    pollster::block_on(async {
        let corpus = common::corpus();
        let ln_vocab = (corpus.vocab_size() as f32).ln();
        let mut trainer = Trainer::new(TrainConfig::preset("tiny").unwrap(), corpus)
            .await
            .expect("trainer");
        let val_before = trainer.evaluate().await.expect("eval");
        let mut last = 0.0;
        for _ in 0..200 {
            last = trainer.step().await.expect("step").loss;
        }
        let val_after = trainer.evaluate().await.expect("eval");
        eprintln!(
            "ln(vocab) {ln_vocab:.3}; train {last:.3}; held-out {val_before:.3} -> {val_after:.3}"
        );
        assert!(
            last < 0.65 * ln_vocab,
            "train loss {last} vs ln(vocab) {ln_vocab}"
        );
        assert!(
            val_after < val_before - 1.0,
            "held-out {val_before} -> {val_after}"
        );
    });
}

async fn trainer_error(cfg: TrainConfig, corpus: Result<Corpus, Error>) -> Error {
    match corpus {
        Err(e) => e,
        Ok(corpus) => match Trainer::new(cfg, corpus).await {
            Err(e) => e,
            Ok(_) => panic!("expected an error"),
        },
    }
}

gpu_test!(bad_input_is_a_clear_error, bad_input_body());
async fn bad_input_body() {
    let tiny = || TrainConfig::preset("tiny").unwrap();
    let text = |t: &str| Corpus::from_text("test.txt", t);
    let cases: Vec<(TrainConfig, Result<Corpus, Error>, &str)> = vec![
        (tiny(), Corpus::from_bytes("empty.txt", b""), "empty"),
        (
            tiny(),
            Corpus::from_bytes("bad.txt", b"ok \xff\xfe"),
            "not UTF-8",
        ),
        (
            tiny(),
            Corpus::from_bytes("img.bin", &[0u8, 1, 2, 3, 65, 7, 0, 9]),
            "binary",
        ),
        (tiny(), text("far too short for the context"), "too short"),
        (
            TrainConfig { batch: 0, ..tiny() },
            Ok(common::corpus()),
            "batch",
        ),
        (
            TrainConfig {
                layers: 0,
                ..tiny()
            },
            Ok(common::corpus()),
            "layers",
        ),
        (
            TrainConfig {
                width: 30,
                heads: 4,
                ..tiny()
            },
            Ok(common::corpus()),
            "multiple of heads",
        ),
        (
            TrainConfig { lr: -1.0, ..tiny() },
            Ok(common::corpus()),
            "learning rate",
        ),
        (
            TrainConfig {
                context: 0,
                ..tiny()
            },
            Ok(common::corpus()),
            "context",
        ),
    ];
    for (cfg, corpus, expect) in cases {
        let message = trainer_error(cfg, corpus).await.to_string();
        assert!(
            message.contains(expect),
            "{message:?} should mention {expect:?}"
        );
    }
    assert!(TrainConfig::preset("huge")
        .unwrap_err()
        .to_string()
        .contains("tiny"));
    // Too large for any device: the MLP weights alone are 2^34 floats.
    let huge = TrainConfig {
        width: 65536,
        heads: 1024,
        batch: 8,
        context: 256,
        ..tiny()
    };
    match trainer_error(huge, Ok(common::corpus())).await {
        Error::TooLarge(m) => assert!(m.contains("lower width"), "{m}"),
        other => panic!("expected TooLarge, got {other}"),
    }
}

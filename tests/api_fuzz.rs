//! The trainer API under random sequences of calls: create, load, evaluate, sample,
//! step, steps, save, replace and free in random orders with random and hostile
//! arguments (corpora shorter than the context or of another vocabulary, damaged
//! checkpoints, NaN temperatures, lengths past the caps). Every call resolves or
//! fails with an error of a known kind, never a panic, and the trainer stays
//! usable. Natively through the crate's API; in headless Chromium through the JS
//! glue of the wasm API, where a panic is a trap and a promise that never settles.
//! Plus the step counter at its limit on both targets.

mod common;

use tidepool::checkpoint::Checkpoint;
use tidepool::data::Corpus;
use tidepool::rng::Rng;
use tidepool::train::{TrainConfig, Trainer, MAX_STEP};
use tidepool::Error;

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

use common::ERROR_KINDS as KINDS;

fn pick<T: Clone>(rng: &mut Rng, options: &[T]) -> T {
    options[rng.below(options.len())].clone()
}

/// A model a CPU adapter trains a step of in well under a second, its shape drawn.
fn random_config(rng: &mut Rng) -> TrainConfig {
    TrainConfig {
        layers: 1,
        width: 16,
        heads: 2,
        context: pick(rng, &[4, 8, 13]),
        batch: pick(rng, &[1, 2, 3]),
        eval_batches: pick(rng, &[1, 2]),
        eval_every: pick(rng, &[0, 1, 3]),
        steps: 50,
        ..TrainConfig::default()
    }
}

/// The first 20k characters of the default corpus.
fn small_corpus() -> Corpus {
    let text = include_str!("../data/tinyshakespeare.txt");
    Corpus::from_text("tinyshakespeare.txt (first 20k)", &text[..20_000]).unwrap()
}

/// Corpora a call may get: the small one; one with its vocabulary but only a few
/// tokens (shorter than most contexts); one of another vocabulary.
fn corpora() -> [Corpus; 3] {
    let small = small_corpus();
    let vocab: String = small.tokenizer.chars().iter().collect();
    [
        small,
        Corpus::from_text("its vocabulary once", &vocab).unwrap(),
        Corpus::from_text("other.txt", &"the quick brown fox ".repeat(50)).unwrap(),
    ]
}

#[track_caller]
fn assert_known(e: &Error, what: &str) {
    assert!(
        KINDS.contains(&e.kind()),
        "{what}: unknown kind {}",
        e.kind()
    );
    assert!(e.to_string().len() > 10, "{what}: unclear error {e}");
}

/// A call's outcome: fine, or an error of a known kind.
#[track_caller]
fn checked<T>(result: Result<T, Error>, what: &str) -> Option<T> {
    match result {
        Ok(value) => Some(value),
        Err(e) => {
            assert_known(&e, what);
            None
        }
    }
}

gpu_test!(random_call_sequences_fail_clearly, sequences_body());
async fn sequences_body() {
    let seed = common::fresh_seed();
    let mut rng = Rng::new(seed);
    let corpora = corpora();
    let mut trainer: Option<Trainer> = None;
    let mut saved: Option<Vec<u8>> = None;
    let calls = if cfg!(target_arch = "wasm32") { 14 } else { 30 };
    let mut log = Vec::new();
    for i in 0..calls {
        let op = rng.below(9);
        let what = format!("call {i} ({log:?}, TIDEPOOL_SEED={seed})");
        match (op, trainer.as_mut()) {
            (0, _) | (1, None) => {
                let cfg = random_config(&mut rng);
                // The small corpus half the time: most calls then have a trainer.
                let corpus = corpora[rng.below(4).saturating_sub(1)].clone();
                log.push(format!("create {} on {}", cfg.context, corpus.name));
                trainer = checked(Trainer::new(cfg, corpus).await, &what);
            }
            (1, Some(_)) => {
                let bytes = match (&saved, rng.below(3)) {
                    (Some(bytes), 0) => bytes.clone(),
                    (Some(bytes), 1) => bytes[..bytes.len() / 2].to_vec(),
                    _ => b"not a checkpoint".to_vec(),
                };
                let corpus = match rng.below(4) {
                    0 => None,
                    n => Some(corpora[n - 1].clone()),
                };
                log.push(format!("load {} bytes", bytes.len()));
                if let Some(loaded) = checked(Trainer::resume(&bytes, corpus).await, &what) {
                    trainer = Some(loaded);
                }
            }
            (2, Some(t)) => {
                log.push("evaluate".into());
                if let Some(loss) = checked(t.evaluate().await, &what) {
                    assert!(loss.is_finite(), "{what}: held-out loss {loss}");
                }
            }
            (3, Some(t)) => {
                let prompt = pick(&mut rng, &["", "The ", "\u{1F30A}", "zq"]);
                let length = pick(&mut rng, &[0, 1, 3, 10_001, usize::MAX]);
                let temperature = pick(&mut rng, &[0.0, 0.8, -1.0, f32::NAN, f32::INFINITY]);
                let top_k = pick(&mut rng, &[0, 1, 5, usize::MAX]);
                log.push(format!("sample {prompt:?} {length} {temperature} {top_k}"));
                if let Some(text) =
                    checked(t.sample(prompt, length, temperature, top_k).await, &what)
                {
                    assert_eq!(text.chars().count(), length, "{what}");
                }
            }
            (4, Some(t)) => {
                log.push("step".into());
                if let Some(stats) = checked(t.step().await, &what) {
                    assert!(stats.loss.is_finite(), "{what}: loss {}", stats.loss);
                }
            }
            (5, Some(t)) => {
                let n = pick(&mut rng, &[0, 1, 3, 1025, u32::MAX]);
                log.push(format!("steps {n}"));
                if let Some(stats) = checked(t.steps(n).await, &what) {
                    assert_eq!(stats.len(), n as usize, "{what}");
                }
            }
            (6, Some(t)) => {
                log.push("save".into());
                saved = checked(t.save().await, &what).or(saved);
            }
            (7, Some(_)) => {
                // The wasm API's replace: the old trainer goes before the new one is built.
                log.push("replace".into());
                drop(trainer.take());
                let cfg = random_config(&mut rng);
                trainer = checked(Trainer::new(cfg, pick(&mut rng, &corpora)).await, &what);
            }
            (_, Some(_)) => {
                log.push("free".into());
                trainer = None;
            }
            (_, None) => log.push("(nothing to call)".into()),
        }
    }
    common::note(&format!("seed {seed}: {log:?}"));
}

gpu_test!(the_step_counter_stops_at_its_limit, step_limit_body());
async fn step_limit_body() {
    let cfg = TrainConfig {
        layers: 1,
        width: 16,
        heads: 2,
        context: 8,
        batch: 2,
        ..TrainConfig::default()
    };
    let corpus = small_corpus();
    let trainer = Trainer::new(cfg, corpus.clone()).await.expect("trainer");
    let mut near: Checkpoint = trainer.checkpoint().await.expect("checkpoint");
    drop(trainer);
    near.step = MAX_STEP - 1;
    let bytes = near.to_bytes().expect("bytes");
    let mut resumed = Trainer::resume(&bytes, Some(corpus)).await.expect("resume");
    let last = resumed.step().await.expect("the last step there is");
    assert_eq!(last.step, MAX_STEP);
    for refused in [resumed.step().await.err(), resumed.steps(2).await.err()] {
        match refused {
            Some(Error::Config(m)) => assert!(m.contains("step counter stops at"), "{m}"),
            other => panic!("a step past the counter's limit gave {other:?}"),
        }
    }
    assert_eq!(resumed.steps_done(), MAX_STEP, "nothing wrapped");
    // Saved there, it loads (to sample), and its next step is refused the same way.
    let full = resumed.save().await.expect("save");
    let mut loaded = Trainer::resume(&full, Some(small_corpus()))
        .await
        .expect("a run at the limit loads");
    assert_eq!(loaded.steps_done(), MAX_STEP);
    assert_eq!(
        loaded.step().await.expect_err("no step left").kind(),
        "config"
    );
    assert_eq!(
        loaded
            .sample("", 2, 0.0, 0)
            .await
            .expect("sample")
            .chars()
            .count(),
        2
    );
}

/// The same through the JS glue, as a page calls it: arguments of any JS type, and
/// a second call made before the first resolves (`busy`).
#[cfg(target_arch = "wasm32")]
mod through_js {
    use super::*;
    use js_sys::{Function, Object, Promise, Reflect, Uint8Array};
    use tidepool::web;
    use wasm_bindgen::{JsCast, JsValue};
    use wasm_bindgen_futures::JsFuture;

    fn object(pairs: &[(&str, f64)]) -> JsValue {
        let o = Object::new();
        for (k, v) in pairs {
            Reflect::set(&o, &(*k).into(), &JsValue::from_f64(*v)).unwrap();
        }
        o.into()
    }

    /// `target[method](...args)`: its promise, or what it threw.
    fn call(target: &JsValue, method: &str, args: &[JsValue]) -> Result<Promise, JsValue> {
        let f: Function = Reflect::get(target, &method.into())?.dyn_into()?;
        let args: js_sys::Array = args.iter().collect();
        f.apply(target, &args)?.dyn_into()
    }

    /// Awaits `promise` (or takes what `call` threw): a value, or an Error of a known
    /// kind.
    async fn settled(promise: Result<Promise, JsValue>, what: &str) -> Option<JsValue> {
        let result = match promise {
            Ok(promise) => JsFuture::from(promise).await,
            Err(thrown) => Err(thrown),
        };
        match result {
            Ok(value) => Some(value),
            Err(error) => {
                let kind = Reflect::get(&error, &"kind".into())
                    .ok()
                    .and_then(|k| k.as_string());
                let kind = kind.unwrap_or_else(|| panic!("{what}: {error:?} has no kind"));
                assert!(KINDS.contains(&kind.as_str()), "{what}: kind {kind}");
                None
            }
        }
    }

    #[wasm_bindgen_test::wasm_bindgen_test]
    async fn random_js_calls_settle_with_a_kind() {
        let seed = common::fresh_seed();
        let mut rng = Rng::new(seed);
        let text: JsValue = include_str!("../data/tinyshakespeare.txt")[..20_000].into();
        let short: JsValue = "abc".into();
        let tiny = object(&[
            ("layers", 1.0),
            ("width", 16.0),
            ("heads", 2.0),
            ("context", 8.0),
            ("batch", 2.0),
            ("eval_batches", 1.0),
        ]);
        let create = web::Trainer::create(tiny.clone(), text.clone(), JsValue::UNDEFINED);
        let mut trainer = JsFuture::from(create).await.expect("create");
        let class = Reflect::get(&trainer, &"constructor".into()).unwrap();
        let junk = Uint8Array::from(&b"not a checkpoint"[..]).into();
        let mut saved: JsValue = junk;
        let n = JsValue::from_f64;
        let values = [
            JsValue::UNDEFINED,
            JsValue::NULL,
            n(-1.0),
            n(f64::NAN),
            n(1e12),
            "3".into(),
        ];
        let mut log = Vec::new();
        for i in 0..12 {
            let what = format!("call {i} ({log:?}, seed {seed})");
            let hostile = pick(&mut rng, &values);
            let (method, args): (&str, Vec<JsValue>) = match rng.below(8) {
                0 => ("evaluate", vec![]),
                1 => (
                    "sample",
                    vec![
                        "The ".into(),
                        pick(&mut rng, &[n(3.0), hostile.clone()]),
                        n(0.8),
                        n(0.0),
                    ],
                ),
                2 => ("sample", vec![hostile.clone(), n(2.0), n(0.0), n(0.0)]),
                3 => ("step", vec![]),
                4 => ("steps", vec![pick(&mut rng, &[n(2.0), hostile.clone()])]),
                5 => ("save", vec![]),
                6 => (
                    "replace",
                    vec![
                        tiny.clone(),
                        pick(&mut rng, &[text.clone(), short.clone(), hostile.clone()]),
                        hostile.clone(),
                    ],
                ),
                _ => (
                    "load",
                    vec![
                        saved.clone(),
                        pick(&mut rng, &[text.clone(), short.clone(), JsValue::UNDEFINED]),
                        hostile.clone(),
                    ],
                ),
            };
            log.push(method);
            let target = if method == "load" { &class } else { &trainer };
            let first = call(target, method, &args);
            // Now and then a second call before the first resolves: `busy`, or
            // (steps) a second call in flight; either way both settle.
            let second = (rng.below(4) == 0).then(|| call(&trainer, "step", &[]));
            let value = settled(first, &what).await;
            if let Some(second) = second {
                settled(second, &what).await;
            }
            match (method, value) {
                ("save", Some(bytes)) => saved = bytes,
                ("load", Some(loaded)) => trainer = loaded,
                _ => {}
            }
        }
        // Still usable: a step or a clear refusal (a loaded trainer without text).
        settled(
            call(&trainer, "sample", &["".into(), n(2.0), n(0.0), n(0.0)]),
            "the last sample",
        )
        .await
        .expect("sampling works after every call");
    }
}

//! Checkpoints: a resumed run is bit-identical to one that never stopped, and every
//! kind of bad file is refused with its own clear error while the running trainer
//! carries on. GPU bodies run natively and in headless Chromium.

mod common;

use std::collections::HashMap;

use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use tidepool::checkpoint::{self, keys, Checkpoint, MAX_CHECKPOINT_BYTES};
use tidepool::data::Corpus;
use tidepool::train::{TrainConfig, Trainer};
use tidepool::Error;

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

/// Tiny and odd-sized, with dropout so that resuming must continue the masks.
fn config() -> TrainConfig {
    TrainConfig {
        layers: 2,
        heads: 2,
        width: 24,
        context: 19,
        batch: 3,
        lr: 1e-2,
        warmup: 2,
        steps: 10,
        dropout: 0.1,
        ..TrainConfig::preset("tiny").unwrap()
    }
}

/// A valid checkpoint built on the host (initial weights, made-up moments and
/// states), so the bad-file cases need no training.
fn host_checkpoint() -> Checkpoint {
    let cfg = config();
    let corpus = common::corpus();
    let model = cfg.model(corpus.vocab_size());
    let params = model.init(cfg.seed);
    let moments = |scale: f32| -> Vec<Vec<f32>> {
        params
            .iter()
            .map(|p| p.iter().map(|x| x * scale).collect())
            .collect()
    };
    Checkpoint {
        step: 7,
        batcher_state: 0x1234_5678_9abc_def0,
        sample_state: u64::MAX - 3,
        vocab: corpus.tokenizer.chars().to_vec(),
        adam_m: moments(0.5),
        adam_v: moments(0.25),
        params,
        model,
        train: cfg,
    }
}

/// The checkpoint with its metadata and tensors passed through `meta` and `tensor`
/// (name, shape, data) -> (shape, data).
fn rewrite(
    bytes: &[u8],
    meta: impl FnOnce(&mut HashMap<String, String>),
    tensor: impl Fn(&str, Vec<usize>, Vec<u8>) -> (Vec<usize>, Vec<u8>),
) -> Vec<u8> {
    let (_, header) = SafeTensors::read_metadata(bytes).expect("valid input");
    let mut metadata = header.metadata().clone().expect("metadata");
    meta(&mut metadata);
    let file = SafeTensors::deserialize(bytes).expect("valid input");
    let owned: Vec<(String, Vec<usize>, Vec<u8>)> = file
        .tensors()
        .into_iter()
        .map(|(name, view)| {
            let (shape, data) = tensor(&name, view.shape().to_vec(), view.data().to_vec());
            (name, shape, data)
        })
        .collect();
    let views = owned.iter().map(|(name, shape, data)| {
        (
            name.clone(),
            TensorView::new(Dtype::F32, shape.clone(), data).expect("consistent view"),
        )
    });
    safetensors::serialize(views, Some(metadata)).expect("serialize")
}

fn set_meta(bytes: &[u8], key: &str, value: String) -> Vec<u8> {
    rewrite(
        bytes,
        |m| {
            m.insert(key.to_string(), value);
        },
        |_, shape, data| (shape, data),
    )
}

#[track_caller]
fn assert_err(result: Result<Trainer, Error>, kind: fn(&Error) -> bool, words: &str) {
    match result {
        Ok(_) => panic!("a bad checkpoint was accepted (expected an error with {words:?})"),
        Err(e) => {
            assert!(kind(&e), "wrong kind of error: {e:?}");
            assert!(
                e.to_string().contains(words),
                "error {:?} does not say {words:?}",
                e.to_string()
            );
        }
    }
}

fn checkpoint_err(e: &Error) -> bool {
    matches!(e, Error::Checkpoint(_)) && e.kind() == "checkpoint"
}

fn bits(tensors: &[Vec<f32>]) -> Vec<Vec<u32>> {
    tensors
        .iter()
        .map(|t| t.iter().map(|x| x.to_bits()).collect())
        .collect()
}

async fn resume_is_exact() {
    let corpus = common::corpus();
    let mut straight = Trainer::new(config(), corpus.clone())
        .await
        .expect("trainer");
    let mut want = Vec::new();
    for _ in 0..10 {
        want.push(straight.step().await.expect("step").loss.to_bits());
    }

    let mut first = Trainer::new(config(), corpus.clone())
        .await
        .expect("trainer");
    let mut got = Vec::new();
    for _ in 0..5 {
        got.push(first.step().await.expect("step").loss.to_bits());
    }
    let bytes = first.save().await.expect("save");
    drop(first);
    let mut resumed = Trainer::resume(&bytes, Some(corpus)).await.expect("resume");
    assert_eq!(resumed.steps_done(), 5);
    for _ in 0..5 {
        got.push(resumed.step().await.expect("step").loss.to_bits());
    }
    assert_eq!(
        got, want,
        "losses of 5 + save + load + 5 steps against 10 steps"
    );
    assert!(
        bits(&resumed.parameters().await.unwrap()) == bits(&straight.parameters().await.unwrap()),
        "parameters after 10 steps differ between the resumed and the straight run"
    );
    // The sampler's random stream continues too.
    let a = straight.sample("Th", 8, 1.0, 0).await.expect("sample");
    let b = resumed.sample("Th", 8, 1.0, 0).await.expect("sample");
    assert_eq!(a, b, "samples after resuming");
}
gpu_test!(resume_is_exact_test, resume_is_exact());

/// What is saved is what is read: every tensor, state and config.
async fn round_trip() {
    let ckpt = host_checkpoint();
    let bytes = ckpt.to_bytes().expect("to_bytes");
    assert_eq!(Checkpoint::from_bytes(&bytes).expect("from_bytes"), ckpt);
    // PyTorch's layout and names (checked independently by
    // scripts/torch_load_checkpoint.py).
    let file = SafeTensors::deserialize(&bytes).unwrap();
    let (c, v) = (ckpt.model.width, ckpt.model.vocab);
    for (name, shape) in [
        ("transformer.wte.weight", vec![v, c]),
        ("transformer.h.1.attn.c_attn.weight", vec![3 * c, c]),
        ("transformer.h.0.mlp.c_proj.weight", vec![c, 4 * c]),
        ("optimizer.v.transformer.h.1.mlp.c_fc.bias", vec![4 * c]),
    ] {
        assert_eq!(
            file.tensor(name).expect(name).shape(),
            shape.as_slice(),
            "{name}"
        );
    }
    assert!(
        file.tensor("lm_head.weight").is_err(),
        "the head is tied, not stored"
    );
}
gpu_test!(round_trip_test, round_trip());

/// Every bad file is refused with its own message, and a trainer that was running
/// when the loads failed still has its parameters and still trains.
async fn bad_checkpoints() {
    let corpus = common::corpus();
    let good = host_checkpoint().to_bytes().unwrap();
    let mut running = Trainer::new(config(), corpus.clone())
        .await
        .expect("trainer");
    running.step().await.expect("step");
    let before = bits(&running.parameters().await.unwrap());
    let load = |bytes: Vec<u8>| {
        let corpus = corpus.clone();
        async move { Trainer::resume(&bytes, Some(corpus)).await }
    };

    // Truncated: anywhere, header or data.
    for keep in [good.len() - 1, good.len() / 2, 100, 7, 0] {
        assert_err(
            load(good[..keep].to_vec()).await,
            checkpoint_err,
            "truncated",
        );
    }
    // Not safetensors at all.
    let text = b"ROMEO: what light through yonder window breaks? It is the east.".to_vec();
    assert_err(
        load(text).await,
        checkpoint_err,
        "not a complete safetensors file",
    );
    // safetensors, but not ours.
    let foreign = rewrite(&good, |m| m.clear(), |_, s, d| (s, d));
    assert_err(
        load(foreign).await,
        checkpoint_err,
        "not a tidepool checkpoint",
    );
    // Another format version.
    let v2 = set_meta(&good, keys::FORMAT, "2".into());
    assert_err(load(v2).await, checkpoint_err, "format version \"2\"");
    // A tensor whose shape does not match the config.
    let wpe = rewrite(
        &good,
        |_| {},
        |name, shape, data| {
            if name == "transformer.wpe.weight" {
                let row = shape[1] * 4;
                (vec![shape[0] - 1, shape[1]], data[row..].to_vec())
            } else {
                (shape, data)
            }
        },
    );
    assert_err(
        load(wpe).await,
        checkpoint_err,
        "tensor transformer.wpe.weight",
    );
    // A config that does not match the tensors (one layer more).
    let mut deeper = host_checkpoint();
    deeper.train.layers = 3;
    deeper.model.layers = 3;
    let deeper_json = serde_json::to_string(&deeper.train).unwrap();
    let model_json = serde_json::to_string(&deeper.model).unwrap();
    let deeper = rewrite(
        &good,
        |m| {
            m.insert(keys::TRAIN_CONFIG.into(), deeper_json);
            m.insert(keys::MODEL_CONFIG.into(), model_json);
        },
        |_, s, d| (s, d),
    );
    assert_err(load(deeper).await, checkpoint_err, "is missing");
    // Another vocabulary than the corpus.
    let other = Corpus::from_text("other.txt", &"the quick brown fox ".repeat(200)).unwrap();
    assert_err(
        Trainer::resume(&good, Some(other)).await,
        |e| matches!(e, Error::Data(_)),
        "another vocabulary",
    );
    // A step larger than any device allows (a huge batch; plan::check names the
    // first limit it breaks).
    let mut huge = host_checkpoint().train;
    huge.batch = 1 << 24;
    let huge = set_meta(
        &good,
        keys::TRAIN_CONFIG,
        serde_json::to_string(&huge).unwrap(),
    );
    assert_err(
        load(huge).await,
        |e| matches!(e, Error::TooLarge(_)),
        "for this device",
    );
    // A config declaring more parameters than a checkpoint may hold (checked in u64
    // before anything is sized from it).
    let mut wide = host_checkpoint();
    // 65536 wide, heads of 128: 10^11 parameters
    (wide.train.width, wide.train.heads) = (1 << 16, 512);
    (wide.model.width, wide.model.heads) = (1 << 16, 512);
    let wide = rewrite(
        &good,
        |m| {
            m.insert(
                keys::TRAIN_CONFIG.into(),
                serde_json::to_string(&wide.train).unwrap(),
            );
            m.insert(
                keys::MODEL_CONFIG.into(),
                serde_json::to_string(&wide.model).unwrap(),
            );
        },
        |_, s, d| (s, d),
    );
    assert_err(
        load(wide).await,
        |e| matches!(e, Error::TooLarge(_)),
        "MAX_CHECKPOINT_BYTES",
    );
    // A weight or a moment that is not finite, named with its tensor.
    for (tensor, value) in [
        ("transformer.wte.weight", f32::NAN),
        ("optimizer.m.transformer.wpe.weight", f32::INFINITY),
        ("optimizer.v.transformer.ln_f.bias", f32::NEG_INFINITY),
    ] {
        let poisoned = rewrite(
            &good,
            |_| {},
            |name, shape, mut data| {
                if name == tensor {
                    let at = data.len() / 8 * 4;
                    data[at..at + 4].copy_from_slice(&value.to_le_bytes());
                }
                (shape, data)
            },
        );
        assert_err(
            load(poisoned).await,
            checkpoint_err,
            &format!("tensor {tensor} holds"),
        );
    }
    // A step past the counter's limit.
    for step in [u64::from(u32::MAX) + 1, u64::MAX] {
        let past = set_meta(&good, keys::STEP, step.to_string());
        assert_err(load(past).await, checkpoint_err, "step counter stops at");
    }

    // Nothing was lost: same parameters, and the run goes on and saves.
    assert!(bits(&running.parameters().await.unwrap()) == before);
    running
        .step()
        .await
        .expect("the running trainer still trains");
    Trainer::resume(&running.save().await.unwrap(), Some(corpus))
        .await
        .expect("and its checkpoint loads");
}
gpu_test!(bad_checkpoints_test, bad_checkpoints());

/// A file over the documented cap is refused before it is parsed.
#[cfg(not(target_arch = "wasm32"))]
async fn file_size_cap() {
    let len = usize::try_from(MAX_CHECKPOINT_BYTES + 1).unwrap();
    // Zeroed pages are not touched by the check, so this costs no memory natively.
    let oversized = vec![0u8; len];
    assert_err(
        Trainer::resume(&oversized, None).await,
        |e| matches!(e, Error::TooLarge(_)),
        "MAX_CHECKPOINT_BYTES",
    );
    assert!(checkpoint::check_file_size(MAX_CHECKPOINT_BYTES).is_ok());
}
#[cfg(not(target_arch = "wasm32"))]
gpu_test!(file_size_cap_test, file_size_cap());

/// The wasm API checks a `Uint8Array`'s length with the same function before it
/// copies the bytes into wasm memory.
#[cfg(target_arch = "wasm32")]
#[wasm_bindgen_test::wasm_bindgen_test]
fn file_size_cap_test() {
    let e = checkpoint::check_file_size(MAX_CHECKPOINT_BYTES + 1).unwrap_err();
    assert!(matches!(e, Error::TooLarge(_)) && e.to_string().contains("MAX_CHECKPOINT_BYTES"));
    assert!(checkpoint::check_file_size(MAX_CHECKPOINT_BYTES).is_ok());
}

/// Loaded without its corpus, a trainer samples (with a prompt) but does not train;
/// a prompt character outside the vocabulary is an error, not skipped.
async fn sample_only() {
    let bytes = host_checkpoint().to_bytes().unwrap();
    let mut trainer = Trainer::resume(&bytes, None).await.expect("resume");
    let text = trainer.sample("The ", 6, 0.8, 5).await.expect("sample");
    assert_eq!(text.chars().count(), 6);
    let vocab = trainer.corpus().tokenizer.chars().to_vec();
    assert!(text.chars().all(|c| vocab.contains(&c)));
    let greedy = trainer.sample("The ", 4, 0.0, 0).await.unwrap();
    assert_eq!(greedy, trainer.sample("The ", 4, 0.0, 0).await.unwrap());
    match trainer.sample("ab \u{1F30A}x", 4, 0.8, 5).await {
        Err(Error::Config(m)) => {
            assert!(m.contains("\u{1F30A}") && m.contains("vocabulary"), "{m}")
        }
        other => panic!("an unknown prompt character gave {other:?}"),
    }
    assert!(matches!(
        trainer.sample("a", 4, f32::NAN, 5).await,
        Err(Error::Config(_))
    ));
    match trainer.step().await {
        Err(Error::Data(m)) => assert!(m.contains("no training text"), "{m}"),
        other => panic!("training without text gave {other:?}"),
    }
    // Evaluating has no held-out text either: refused like a step, not a panic.
    match trainer.evaluate().await {
        Err(Error::Data(m)) => assert!(m.contains("no training text"), "{m}"),
        other => panic!("evaluating without text gave {other:?}"),
    }
    // A corpus with the vocabulary but shorter than the context: refused too.
    let vocab: String = trainer.corpus().tokenizer.chars().iter().collect();
    let mut short = Trainer::resume(
        &bytes,
        Some(Corpus::from_text("short.txt", &vocab).unwrap()),
    )
    .await
    .expect("resume with a short corpus");
    match short.evaluate().await {
        Err(Error::Data(m)) => assert!(m.contains("too short for a context"), "{m}"),
        other => panic!("evaluating on a short corpus gave {other:?}"),
    }
    assert!(matches!(short.step().await, Err(Error::Data(_))));
    // Still usable after each refusal.
    assert_eq!(
        short
            .sample("The ", 3, 0.0, 0)
            .await
            .unwrap()
            .chars()
            .count(),
        3
    );
}
gpu_test!(sample_only_test, sample_only());

/// The wasm API as the page calls it: `save()` gives a `Uint8Array`, `Trainer.load`
/// takes it (or its `ArrayBuffer`) back, `sample` checks its JS numbers, bad bytes
/// reject, and the trainer that saved still trains.
#[cfg(target_arch = "wasm32")]
#[wasm_bindgen_test::wasm_bindgen_test]
async fn web_api_save_load_sample() {
    use js_sys::{Array, Function, Object, Reflect, Uint8Array};
    use tidepool::web::Trainer as WebTrainer;
    use wasm_bindgen::{JsCast, JsValue};
    use wasm_bindgen_futures::JsFuture;

    async fn call(target: &JsValue, method: &str, args: &[JsValue]) -> Result<JsValue, String> {
        let f: Function = Reflect::get(target, &method.into())
            .unwrap()
            .unchecked_into();
        let args: Array = args.iter().collect();
        let promise = f.apply(target, &args).map_err(|e| format!("{e:?}"))?;
        JsFuture::from(js_sys::Promise::from(promise))
            .await
            .map_err(|e| {
                Reflect::get(&e, &"message".into())
                    .unwrap()
                    .as_string()
                    .unwrap()
            })
    }
    let config = Object::new();
    for (key, value) in [("batch", 2.0), ("context", 16.0), ("steps", 10.0)] {
        Reflect::set(&config, &key.into(), &value.into()).unwrap();
    }
    let corpus_text: JsValue = include_str!("../data/tinyshakespeare.txt").into();
    let first = JsFuture::from(WebTrainer::create(
        config.into(),
        corpus_text.clone(),
        JsValue::UNDEFINED,
    ))
    .await
    .expect("create");
    call(&first, "step", &[]).await.expect("step");
    let bytes = call(&first, "save", &[]).await.expect("save");
    let bytes: Uint8Array = bytes.dyn_into().expect("save resolves to a Uint8Array");
    assert!(bytes.length() > 1000);

    // Loaded from its ArrayBuffer without a corpus: samples after a prompt.
    let loaded = JsFuture::from(WebTrainer::load(
        bytes.buffer().into(),
        JsValue::UNDEFINED,
        JsValue::UNDEFINED,
    ))
    .await
    .expect("load");
    let text = call(
        &loaded,
        "sample",
        &["Th".into(), 5.into(), 0.8.into(), 3.into()],
    )
    .await
    .expect("sample");
    assert_eq!(text.as_string().unwrap().chars().count(), 5);
    for (length, top_k) in [
        (1.5, 3.0),
        (-1.0, 3.0),
        (f64::NAN, 3.0),
        (1e9, 3.0),
        (5.0, -2.0),
    ] {
        let e = call(
            &loaded,
            "sample",
            &["Th".into(), length.into(), 0.8.into(), top_k.into()],
        )
        .await
        .expect_err("a bad number is refused");
        assert!(e.contains("whole number"), "{e}");
    }
    let e = call(&loaded, "step", &[])
        .await
        .expect_err("no text, no training");
    assert!(e.contains("no training text"), "{e}");

    // With its corpus it trains on.
    let resumed = JsFuture::from(WebTrainer::load(
        bytes.clone().into(),
        corpus_text,
        JsValue::UNDEFINED,
    ))
    .await
    .expect("load with the corpus");
    let stats = call(&resumed, "step", &[]).await.expect("resumed step");
    assert_eq!(
        Reflect::get(&stats, &"step".into()).unwrap().as_f64(),
        Some(2.0)
    );

    // Bad bytes reject with their message; the first trainer is untouched.
    let truncated = bytes.subarray(0, bytes.length() / 2);
    let e = JsFuture::from(WebTrainer::load(
        truncated.into(),
        JsValue::UNDEFINED,
        JsValue::UNDEFINED,
    ))
    .await
    .expect_err("truncated");
    assert!(format!("{e:?}").contains("truncated"), "{e:?}");
    let e = JsFuture::from(WebTrainer::load(
        "not bytes".into(),
        JsValue::UNDEFINED,
        JsValue::UNDEFINED,
    ))
    .await
    .expect_err("a string is not a checkpoint");
    assert!(format!("{e:?}").contains("Uint8Array"), "{e:?}");
    let stats = call(&first, "step", &[])
        .await
        .expect("the first trainer still trains");
    assert_eq!(
        Reflect::get(&stats, &"step".into()).unwrap().as_f64(),
        Some(2.0)
    );
}

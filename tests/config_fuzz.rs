//! The configuration surface under hostile input: thousands of random settings
//! (0, 1, huge, u32::MAX, negative, fractional, NaN, infinite, unknown presets and
//! policies) through `Overrides` and `plan::check`, each accepted or refused with a
//! clear error, never a panic; a few of the accepted ones train a step, and the
//! trainer API works after every refusal. Plus one test for each edge of the checks
//! (grids, head size, bindings, sizes past 4 GiB). GPU bodies run natively and in
//! headless Chromium; the wasm API's own checks (error kinds, `sample(-1)`, the
//! schedule's inputs) are tested in the browser build.

mod common;

use tidepool::config::Overrides;
use tidepool::data::Corpus;
use tidepool::plan::{self, DeviceLimits};
use tidepool::pool::{BufferPool, BufferPoolConfig, SizePolicy};
use tidepool::rng::Rng;
use tidepool::train::{TrainConfig, Trainer};
use tidepool::Error;

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

pub(crate) use common::ERROR_KINDS as KINDS;

/// A number a user or a page might send: edges and junk when `hostile`, else
/// mostly unset or small plausible values.
fn number(rng: &mut Rng, hostile: bool) -> Option<f64> {
    const EDGES: [f64; 20] = [
        0.0,
        1.0,
        2.0,
        3.0,
        4.0,
        8.0,
        12.0,
        16.0,
        64.0,
        65535.0,
        65536.0,
        4294967295.0,
        4294967296.0,
        9007199254740993.0,
        1e300,
        -1.0,
        -0.5,
        0.5,
        f64::NAN,
        f64::INFINITY,
    ];
    match (hostile, rng.below(4)) {
        (true, 0) | (false, 0 | 1) => None,
        (true, 1) => Some(EDGES[rng.below(EDGES.len())]),
        (_, 2) => Some(1.0 + rng.below(8) as f64),
        _ => Some((4 * (1 + rng.below(12))) as f64),
    }
}

fn pick<T: Clone>(rng: &mut Rng, options: &[T]) -> T {
    options[rng.below(options.len())].clone()
}

/// Half the cases hostile (every field may be junk), half plausible (valid-looking
/// values, most fields unset), so that both refusals and acceptances are common.
fn random_overrides(rng: &mut Rng) -> Overrides {
    let hostile = rng.below(2) == 0;
    let text = |rng: &mut Rng, valid: usize, options: &[&str]| {
        let n = if hostile { options.len() } else { valid };
        (n > 0 && rng.below(3) == 0).then(|| options[rng.below(n)].to_string())
    };
    let fraction = |rng: &mut Rng| match (hostile, rng.below(4)) {
        (_, 0) | (false, 1) => None,
        (true, 1) => Some(pick(rng, &[0.0, 0.999, 1.0, -0.1, f64::NAN, 1e40])),
        _ => Some(rng.uniform() as f64 * 0.5),
    };
    let number = |rng: &mut Rng| number(rng, hostile);
    Overrides {
        preset: text(
            rng,
            3,
            &["tiny", "small", "shakespeare", "huge", "", "TINY"],
        ),
        layers: number(rng),
        heads: number(rng),
        width: number(rng),
        context: number(rng),
        batch: number(rng),
        lr: if hostile {
            pick(
                rng,
                &[None, Some(0.0), Some(-1.0), Some(f64::NAN), Some(1e39)],
            )
        } else {
            pick(rng, &[None, Some(1e-3), Some(3e-4)])
        },
        steps: number(rng),
        warmup: number(rng),
        dropout: fraction(rng),
        dropout_placement: text(rng, 0, &["residual", "nanogpt", "everywhere"]),
        weight_decay: fraction(rng),
        grad_clip: fraction(rng),
        seed: number(rng),
        eval_every: number(rng),
        eval_batches: number(rng),
        pool: pick(rng, &[None, Some(true), Some(false)]),
        recompute: pick(rng, &[None, Some(true), Some(false)]),
        precision: text(rng, 2, &["f32", "f16", "bf16", "F16", "", "fp8"]),
        submit_every: if hostile {
            pick(
                rng,
                &[None, Some(-1.0), Some(0.5), Some(f64::NAN), Some(2e6)],
            )
        } else {
            pick(rng, &[None, Some(0.0), Some(1.0), Some(7.0)])
        },
        policy: text(
            rng,
            3,
            &[
                "pow2",
                "pow2/8",
                "exact",
                "pow2/3",
                "pow2/0",
                "pow2/1073741824",
                "pow2/-1",
                "bogus",
            ],
        ),
    }
}

/// An error a user can act on: a known kind and a message that says something.
#[track_caller]
fn assert_clear(e: &Error, what: &str) {
    assert!(
        KINDS.contains(&e.kind()),
        "{what}: unknown kind {}",
        e.kind()
    );
    let message = e.to_string();
    assert!(message.len() > 20, "{what}: unclear error {message:?}");
}

/// Settings a CPU adapter trains one step of in well under a second.
fn cheap(cfg: &TrainConfig) -> bool {
    cfg.layers <= 2
        && cfg.width <= 64
        && cfg.context <= 32
        && cfg.batch <= 8
        && cfg.eval_batches <= 4
        && cfg.eval_every <= 1
}

/// A short slice of the default corpus: tokenising 1 MB thousands of times would
/// dominate the test.
fn small_corpus() -> Corpus {
    let text = include_str!("../data/tinyshakespeare.txt");
    Corpus::from_text("tinyshakespeare.txt (first 20k)", &text[..20_000]).unwrap()
}

gpu_test!(random_configs_train_or_fail_clearly, fuzz_body());
async fn fuzz_body() {
    let seed = common::fresh_seed();
    let mut rng = Rng::new(seed);
    let corpus = small_corpus();
    let vocab = corpus.vocab_size() as u64;
    let roomy = DeviceLimits {
        max_binding_bytes: 1 << 40,
        ..DeviceLimits::webgpu_default()
    };
    let mut cheap_ones = Vec::new();
    let (mut accepted, mut refused) = (0, 0);
    for i in 0..4000 {
        let overrides = random_overrides(&mut rng);
        let what = format!("case {i} (TIDEPOOL_SEED={seed}): {overrides:?}");
        match overrides.resolve() {
            Err(e) => {
                assert_clear(&e, &what);
                assert_eq!(e.kind(), "config", "{what}");
                refused += 1;
            }
            Ok(cfg) => {
                // Vocabularies from one character to past every count a corpus
                // can have (a checkpoint declares its own).
                let vocabs = [
                    vocab,
                    1,
                    1025,
                    70_000,
                    1 << 21,
                    u64::from(u32::MAX),
                    u64::MAX,
                ];
                let other = pick(&mut rng, &vocabs);
                for (limits, vocab) in [(DeviceLimits::webgpu_default(), vocab), (roomy, other)] {
                    match plan::check(&cfg, vocab, &limits) {
                        Err(e) => assert_clear(&e, &what),
                        Ok(plan) => {
                            assert!(plan
                                .buffers
                                .iter()
                                .all(|b| b.created <= limits.max_binding_bytes));
                            assert!(plan.head_size <= tidepool::config::MAX_HEAD_SIZE);
                        }
                    }
                }
                accepted += 1;
                // f16 trains only where the adapter has shader-f16 (SwiftShader has
                // not): tests/matmul_f16.rs trains it, and checks the refusal.
                let f32 = cfg.precision == tidepool::config::Precision::F32;
                if f32 && cheap(&cfg) && corpus.check_context(cfg.context).is_ok() {
                    cheap_ones.push(cfg);
                }
            }
        }
        // JSON as a config file or a page would send it, junk included.
        let json = match rng.below(4) {
            0 => serde_json::to_string(&overrides).unwrap(),
            1 => r#"{"layers": "two"}"#.to_string(),
            2 => r#"{"unknown_setting": 1}"#.to_string(),
            _ => format!(r#"{{"batch": {}, "heads": -3}}"#, rng.below(100)),
        };
        if let Err(e) = Overrides::from_json(&json).and_then(|o| o.resolve()) {
            assert_clear(&e, &json);
        }
    }
    assert!(
        accepted > 100 && refused > 100,
        "accepted {accepted}, refused {refused}: the generator lost its edge"
    );

    // A handful of the accepted, cheap ones train a step; after each refused
    // create the next valid one still works.
    let mut trained = 0;
    let invalid = [
        TrainConfig {
            heads: 3,
            ..TrainConfig::default()
        },
        TrainConfig {
            batch: 16384,
            context: 8,
            ..TrainConfig::default()
        },
    ];
    for (n, cfg) in cheap_ones.into_iter().take(3).enumerate() {
        let bad = invalid[n % invalid.len()].clone();
        match Trainer::new(bad, corpus.clone()).await {
            Err(e) => assert_clear(&e, "an invalid create"),
            Ok(_) => panic!("an invalid config was accepted"),
        }
        let what = format!("{cfg:?} (TIDEPOOL_SEED={seed})");
        let mut trainer = Trainer::new(cfg, corpus.clone())
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let stats = trainer
            .step()
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(stats.loss.is_finite(), "{what}: loss {}", stats.loss);
        // What passed the plan cannot panic later: evaluation and sampling too.
        let val = trainer
            .evaluate()
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(val.is_finite(), "{what}: held-out loss {val}");
        let text = trainer
            .sample("", 2, 1.0, 0)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(text.chars().count(), 2, "{what}");
        trained += 1;
    }
    eprintln!("seed {seed}: {accepted} accepted, {refused} refused, {trained} trained a step");
    assert!(
        trained >= 1,
        "no cheap config among the random ones (seed {seed})"
    );
}

gpu_test!(
    sample_rejects_absurd_lengths_and_stays_usable,
    sample_body()
);
async fn sample_body() {
    let cfg = TrainConfig {
        layers: 1,
        width: 16,
        heads: 2,
        context: 8,
        batch: 2,
        ..TrainConfig::default()
    };
    let mut trainer = Trainer::new(cfg, small_corpus()).await.expect("trainer");
    // `sample(-1)` from JS must not become length 4294967295 and lock the trainer.
    for (length, temperature) in [
        (u32::MAX as usize, 1.0),
        (usize::MAX, 1.0),
        (3, f32::NAN),
        (3, -1.0),
    ] {
        match trainer.sample("\n", length, temperature, 0).await {
            Err(e) => assert_eq!(e.kind(), "config", "{e}"),
            Ok(_) => panic!("sample({length}, {temperature}) was accepted"),
        }
    }
    let text = trainer
        .sample("\n", 4, 1.0, 0)
        .await
        .expect("sample after the errors");
    assert_eq!(text.chars().count(), 4);
}

gpu_test!(eval_every_is_honoured, eval_every_body());
async fn eval_every_body() {
    let cfg = TrainConfig {
        layers: 1,
        width: 16,
        heads: 2,
        context: 8,
        batch: 2,
        eval_every: 2,
        eval_batches: 1,
        ..TrainConfig::default()
    };
    let mut trainer = Trainer::new(cfg, small_corpus()).await.expect("trainer");
    assert_eq!(
        trainer.step().await.unwrap().val_loss,
        None,
        "no evaluation after step 1"
    );
    let val = trainer.step().await.unwrap().val_loss;
    assert!(
        val.is_some_and(f32::is_finite),
        "evaluated after step 2: {val:?}"
    );
}

// Settings at the edges of the checks, against explicit limits (no GPU needed).

fn refused(cfg: &TrainConfig, vocab: u64) -> Error {
    match plan::check(cfg, vocab, &DeviceLimits::webgpu_default()) {
        Err(e) => e,
        Ok(plan) => panic!("accepted: {plan:?}"),
    }
}

fn overrides(json: &str) -> Result<TrainConfig, Error> {
    Overrides::from_json(json)?.resolve()
}

#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn batch_times_heads_past_one_grid_dimension_is_refused() {
    let cfg = overrides(r#"{"batch": 16384, "context": 8}"#).unwrap();
    let e = refused(&cfg, 65);
    assert_eq!(e.kind(), "too_large");
    let m = e.to_string();
    assert!(
        m.contains("65536") && m.contains("65535") && m.contains("lower batch or heads"),
        "{m}"
    );
}

#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn head_size_over_128_is_a_config_error() {
    let e = overrides(r#"{"width": 132, "heads": 1}"#).unwrap_err();
    assert_eq!(e.kind(), "config");
    let m = e.to_string();
    assert!(
        m.contains("132") && m.contains("128") && m.contains("heads"),
        "{m}"
    );
    // 128 itself is supported, where the device has the workgroup memory for it.
    let cfg = overrides(r#"{"width": 128, "heads": 1}"#).unwrap();
    let e = refused(&cfg, 65);
    assert!(
        e.to_string().contains("workgroup memory") && e.to_string().contains("16384"),
        "{e}"
    );
    let roomy = DeviceLimits {
        max_workgroup_storage_bytes: 32768,
        ..DeviceLimits::webgpu_default()
    };
    assert!(plan::check(&cfg, 65, &roomy).is_ok());
}

#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn absurd_subdivisions_are_refused_and_never_divide_by_zero() {
    let e = overrides(r#"{"policy": "pow2/1073741824"}"#).unwrap_err();
    assert_eq!(e.kind(), "config");
    assert!(e.to_string().contains("1024"), "{e}");
    let config = BufferPoolConfig {
        policy: SizePolicy::Subdivided {
            subdivisions: 1 << 30,
        },
        ..Default::default()
    };
    assert!(config.validate().unwrap_err().contains("1024"));
    // Built directly, the policy still rounds without wrapping or dividing by 0.
    for n in [1usize, 4095, 1 << 20, usize::MAX / 2] {
        assert!(config.policy.size_class(n) >= n);
    }
}

#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn a_weight_past_the_binding_limit_is_refused() {
    // 4 x 2900 x 2900 floats: a 134,560,000-byte MLP weight against 128 MiB.
    // (Head size 116 needs 24 KiB of workgroup memory: give it that, as lavapipe
    // does, so the binding limit is what refuses it.)
    let cfg = overrides(r#"{"width": 2900, "heads": 25, "batch": 1, "context": 8}"#).unwrap();
    let limits = DeviceLimits {
        max_workgroup_storage_bytes: 32768,
        ..DeviceLimits::webgpu_default()
    };
    let e = plan::check(&cfg, 65, &limits).unwrap_err();
    assert_eq!(e.kind(), "too_large");
    let m = e.to_string();
    assert!(
        m.contains("134560000") && m.contains("134217728") && m.contains("lower width"),
        "{m}"
    );
}

#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn a_weight_whose_moments_pass_the_binding_limit_is_refused() {
    // 4 x 2048 x 2048 floats: a 64 MiB MLP weight fits a 128 MiB binding, but its two
    // AdamW moments side by side (and the arena chunk's header) do not; at width 2040
    // they do. (Head size 128 needs more than 16 KiB of workgroup memory.)
    let limits = DeviceLimits {
        max_workgroup_storage_bytes: 32768,
        ..DeviceLimits::webgpu_default()
    };
    let cfg = overrides(r#"{"width": 2048, "heads": 16, "batch": 1, "context": 8}"#).unwrap();
    let e = plan::check(&cfg, 65, &limits).unwrap_err();
    assert_eq!(e.kind(), "too_large");
    let moments = (4 * 2048 * 2048 + tidepool::arena::HEADER_FLOATS) * 8;
    let m = e.to_string();
    assert!(
        m.contains("moments") && m.contains(&moments.to_string()) && m.contains("lower width"),
        "{m}"
    );
    let cfg = overrides(r#"{"width": 2040, "heads": 17, "batch": 1, "context": 8}"#).unwrap();
    plan::check(&cfg, 65, &limits).expect("the moments of a 4 x 2040 x 2040 weight fit");
}

#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn shakespeare_at_context_296_fits_128_mib_bindings() {
    let cfg = overrides(r#"{"preset": "shakespeare", "context": 296}"#).unwrap();
    let plan = plan::check(&cfg, 65, &DeviceLimits::webgpu_default()).expect("fits");
    let largest = &plan.buffers[0];
    assert!(largest.created <= 128 << 20, "{largest:?}");
    // The flash kernel never forms batch x heads x context^2 (807 MB here).
    assert!(plan.buffers.iter().all(|b| !b.name.contains("context^2")));
    // And the split-K partial sums are counted: the MLP's reach 29 x 1536 x 384.
    assert!(plan
        .buffers
        .iter()
        .any(|b| b.name.contains("MLP weights' partial")));
}

#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn sizes_past_4_gib_do_not_wrap() {
    const GIB: u64 = 1 << 30;
    // A 3 GiB request rounds to 4 GiB in u64 (it gave 0 in wasm32's usize).
    assert_eq!(SizePolicy::PowerOfTwo.class_bytes(3 * GIB), Some(4 * GIB));
    assert_eq!(SizePolicy::PowerOfTwo.class_bytes(u64::MAX - 1), None);
    assert_eq!(
        SizePolicy::Subdivided { subdivisions: 8 }.class_bytes(5 * GIB + 1),
        Some(5 * GIB + GIB / 2)
    );
    // Past the pool's largest class the request is created at its exact size.
    assert_eq!(
        plan::created_size(SizePolicy::PowerOfTwo, 3 * GIB, GIB),
        3 * GIB
    );
    let pool = BufferPool::<Fake>::with_config(BufferPoolConfig::default());
    let n = (3 * GIB) as usize; // fits wasm32's usize (below 4 GiB)
    assert_eq!(
        pool.size_class(n),
        n,
        "never rounded past the largest pooled size"
    );
    assert!(SizePolicy::PowerOfTwo.size_class(n) as u64 >= 3 * GIB);
    // Device limits of 4 GiB and more are read whole.
    let limits = wgpu::Limits {
        max_storage_buffer_binding_size: 6 * GIB,
        max_buffer_size: 5 * GIB,
        ..wgpu::Limits::default()
    };
    assert_eq!(DeviceLimits::from_wgpu(&limits).max_binding_bytes, 5 * GIB);
    // Shapes whose products pass u64 are refused, not wrapped.
    let cfg = TrainConfig {
        width: 1 << 20,
        heads: 1 << 14,
        batch: 1 << 24,
        context: 1 << 24,
        ..TrainConfig::default()
    };
    let roomy = DeviceLimits {
        max_binding_bytes: u64::MAX,
        max_workgroups_per_dimension: u64::MAX,
        ..DeviceLimits::webgpu_default()
    };
    let e = plan::check(&cfg, 65, &roomy).unwrap_err();
    assert_eq!(e.kind(), "too_large", "{e}");
}

struct Fake;
impl tidepool::pool::Poolable for Fake {
    fn destroy(&self) {}
}

#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn the_listed_settings_are_exactly_the_struct_fields() {
    let json = serde_json::to_value(Overrides::default()).unwrap();
    let mut keys: Vec<&str> = json
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut listed = Overrides::FIELDS.to_vec();
    keys.sort_unstable();
    listed.sort_unstable();
    assert_eq!(keys, listed);
    let e = Overrides::check_keys(["batch", "batchsize"]).unwrap_err();
    assert!(e.to_string().contains("\"batchsize\""), "{e}");
}

#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn corpus_is_capped_and_split_90_10() {
    let cap = tidepool::data::MAX_CORPUS_BYTES as usize;
    let e = Corpus::from_bytes("big.txt", &vec![b'a'; cap + 1]).unwrap_err();
    assert_eq!(e.kind(), "corpus");
    assert!(e.to_string().contains("67108864"), "{e}");
    let corpus = small_corpus();
    assert_eq!(corpus.train.len(), 18_000);
    assert_eq!(corpus.val.len(), 2_000);
    let text = &include_str!("../data/tinyshakespeare.txt")[..20_000];
    assert_eq!(corpus.tokenizer.decode(&corpus.val), text[18_000..]);
}

/// The wasm API itself (what the page calls): numbers from JS checked, errors
/// carrying `kind`, and the API usable after each refusal.
#[cfg(target_arch = "wasm32")]
mod web_api {
    use super::KINDS;
    use js_sys::{Function, Object, Promise, Reflect};
    use tidepool::web;
    use wasm_bindgen::{JsCast, JsValue};
    use wasm_bindgen_futures::JsFuture;

    fn object(pairs: &[(&str, JsValue)]) -> JsValue {
        let o = Object::new();
        for (k, v) in pairs {
            Reflect::set(&o, &(*k).into(), v).unwrap();
        }
        o.into()
    }

    fn kind(error: &JsValue) -> String {
        assert!(
            error.is_instance_of::<js_sys::Error>(),
            "{error:?} is not an Error"
        );
        Reflect::get(error, &"kind".into())
            .unwrap()
            .as_string()
            .unwrap_or_else(|| panic!("{error:?} has no kind"))
    }

    async fn rejected(promise: Promise, what: &str) -> String {
        let error = match JsFuture::from(promise).await {
            Err(error) => error,
            Ok(value) => panic!("{what} should reject, resolved to {value:?}"),
        };
        let kind = kind(&error);
        assert!(KINDS.contains(&kind.as_str()), "kind {kind}");
        kind
    }

    fn call(target: &JsValue, method: &str, args: &[JsValue]) -> Promise {
        let f: Function = Reflect::get(target, &method.into())
            .unwrap()
            .dyn_into()
            .unwrap();
        let args: js_sys::Array = args.iter().collect();
        f.apply(target, &args).unwrap().dyn_into().unwrap()
    }

    #[wasm_bindgen_test::wasm_bindgen_test]
    async fn the_wasm_api_rejects_with_a_kind_and_stays_usable() {
        let text: JsValue = include_str!("../data/tinyshakespeare.txt")[..20_000].into();
        let n = |x: f64| JsValue::from_f64(x);
        let cases = [
            (object(&[("batch", n(-1.0))]), "config"),
            (object(&[("layers", n(f64::NAN))]), "config"),
            (object(&[("context", n(4294967296.0))]), "config"),
            (object(&[("policy", "pow2/1073741824".into())]), "config"),
            (object(&[("width", n(132.0)), ("heads", n(1.0))]), "config"),
            (object(&[("no_such_setting", n(1.0))]), "config"),
            (object(&[("preset", "huge".into())]), "config"),
            (
                object(&[("batch", n(16384.0)), ("context", n(8.0))]),
                "too_large",
            ),
        ];
        for (config, want) in cases {
            let what = format!("{:?}", js_sys::JSON::stringify(&config));
            let got = rejected(
                web::Trainer::create(config, text.clone(), JsValue::UNDEFINED),
                &what,
            )
            .await;
            assert_eq!(got, want, "{what}");
        }
        let tiny = object(&[
            ("layers", n(1.0)),
            ("width", n(16.0)),
            ("heads", n(2.0)),
            ("context", n(8.0)),
            ("batch", n(2.0)),
        ]);
        assert_eq!(
            rejected(
                web::Trainer::create(tiny.clone(), JsValue::UNDEFINED, JsValue::UNDEFINED),
                "no corpus"
            )
            .await,
            "corpus"
        );
        assert_eq!(
            rejected(
                web::Trainer::create(tiny.clone(), n(3.0), JsValue::UNDEFINED),
                "a number as corpus"
            )
            .await,
            "corpus"
        );
        // After every refusal a valid create works.
        let trainer = JsFuture::from(web::Trainer::create(
            tiny.clone(),
            text.clone(),
            JsValue::UNDEFINED,
        ))
        .await
        .expect("create");
        // A corpus name that is not a string, or too long, rejects with `config`
        // through the JS glue (the class's static methods), where a non-string once
        // trapped the module.
        let class = Reflect::get(&trainer, &"constructor".into()).unwrap();
        let long_name: JsValue = "x".repeat(web::MAX_NAME_CHARS as usize + 1).into();
        let hostile_names = [
            n(5.0),
            object(&[("length", n(3e9))]),
            JsValue::TRUE,
            long_name,
        ];
        for name in &hostile_names {
            let what = format!("name {:?}", js_sys::JSON::stringify(name));
            let create = call(
                &class,
                "create",
                &[tiny.clone(), text.clone(), name.clone()],
            );
            assert_eq!(rejected(create, &what).await, "config", "create, {what}");
            let load = call(&class, "load", &[n(0.0), text.clone(), name.clone()]);
            assert_eq!(rejected(load, &what).await, "config", "load, {what}");
            let replace = call(
                &trainer,
                "replace",
                &[tiny.clone(), text.clone(), name.clone()],
            );
            assert_eq!(rejected(replace, &what).await, "config", "replace, {what}");
        }
        let named = call(
            &class,
            "create",
            &[tiny.clone(), text.clone(), "a name".into()],
        );
        JsFuture::from(named).await.expect("a string name is fine");
        JsFuture::from(call(&trainer, "step", &[]))
            .await
            .expect("step");
        // A call made while another is in flight is refused as `busy`, and neither
        // disturbs the call in flight nor the next one. `steps(n)` alone may have a
        // second call in flight (recorded while the first's losses come back), not
        // a third; the getters answer meanwhile.
        let first = call(&trainer, "steps", &[n(2.0)]);
        let second = call(&trainer, "steps", &[n(1.0)]);
        let text_arg = JsValue::from_str("");
        let overlapping: [(&str, Vec<JsValue>); 7] = [
            ("step", vec![]),
            ("steps", vec![n(1.0)]),
            ("evaluate", vec![]),
            ("save", vec![]),
            ("trace", vec![]),
            ("sample", vec![text_arg, n(2.0), n(1.0), n(0.0)]),
            ("replace", vec![tiny.clone(), text.clone()]),
        ];
        for (method, args) in &overlapping {
            assert_eq!(rejected(call(&trainer, method, args), method).await, "busy");
        }
        let getter = |method: &str| {
            let f: Function = Reflect::get(&trainer, &method.into())
                .unwrap()
                .dyn_into()
                .unwrap();
            f.call0(&trainer)
        };
        for method in ["stats", "model"] {
            getter(method).expect(method);
        }
        let resolved = |p: Promise| async move {
            let stats: js_sys::Array = JsFuture::from(p)
                .await
                .expect("a call in flight ends well")
                .dyn_into()
                .expect("steps(n) resolves to an array");
            stats
        };
        let step = |stats: &JsValue| Reflect::get(stats, &"step".into()).unwrap().as_f64();
        let stats = resolved(first).await;
        assert_eq!(stats.length(), 2);
        assert_eq!(step(&stats.get(1)), Some(3.0), "one step, then two");
        let stats = resolved(second).await;
        assert_eq!(stats.length(), 1);
        assert_eq!(step(&stats.get(0)), Some(4.0), "then the second call's one");
        // Any other call in flight holds the trainer: the getters throw `busy` too.
        let one = call(&trainer, "step", &[]);
        assert_eq!(
            rejected(call(&trainer, "steps", &[n(1.0)]), "steps").await,
            "busy"
        );
        for method in ["stats", "model"] {
            let thrown = getter(method).expect_err(method);
            assert_eq!(kind(&thrown), "busy", "{method}");
        }
        let stats = JsFuture::from(one).await.expect("the next call");
        assert_eq!(step(&stats), Some(5.0), "the refused calls trained nothing");
        // sample(-1) must not wrap to 4294967295 and lock the trainer.
        for (length, temperature) in [
            (-1.0, 1.0),
            (1e12, 1.0),
            (f64::NAN, 1.0),
            (2.5, 1.0),
            (4.0, f64::NAN),
        ] {
            let what = format!("sample(\"\", {length}, {temperature})");
            let args = [JsValue::from_str(""), n(length), n(temperature), n(0.0)];
            let kind = rejected(call(&trainer, "sample", &args), &what).await;
            assert_eq!(kind, "config", "{what}");
        }
        // A prompt that is not a string (the old signature's length first) rejects too.
        let what = "sample(-1, 1, 0) without a prompt";
        let args = [n(-1.0), n(1.0), n(0.0)];
        assert_eq!(
            rejected(call(&trainer, "sample", &args), what).await,
            "config"
        );
        let args = [JsValue::from_str(""), n(3.0), n(1.0), n(0.0)];
        let sample = JsFuture::from(call(&trainer, "sample", &args))
            .await
            .expect("sample");
        assert_eq!(sample.as_string().unwrap().chars().count(), 3);
        // replace: a refused config keeps the trainer; a good one swaps it in place.
        let bad = object(&[("width", n(132.0)), ("heads", n(1.0))]);
        assert_eq!(
            rejected(
                call(&trainer, "replace", &[bad, text.clone()]),
                "replace with head size 132"
            )
            .await,
            "config"
        );
        JsFuture::from(call(&trainer, "step", &[]))
            .await
            .expect("the old trainer survives");
        JsFuture::from(call(&trainer, "replace", &[tiny, text]))
            .await
            .expect("replace");
        let stats = JsFuture::from(call(&trainer, "step", &[]))
            .await
            .expect("step after replace");
        let step = Reflect::get(&stats, &"step".into()).unwrap().as_f64();
        assert_eq!(step, Some(1.0), "a fresh trainer");
        assert!(web::presets().contains(&"shakespeare".to_string()));
        assert!(web::policies().contains(&"pow2/8".to_string()));
    }

    /// `new Schedule(options)` and its methods refuse what is not a number they can
    /// use, with kind `config` naming it, and otherwise answer as the crate's
    /// `train::Schedule` does.
    #[wasm_bindgen_test::wasm_bindgen_test]
    fn the_schedule_checks_its_inputs_and_answers_as_the_crates() {
        let n = |x: f64| JsValue::from_f64(x);
        let refused = |result: Result<web::Schedule, JsValue>, what: &str| {
            let error = result
                .err()
                .unwrap_or_else(|| panic!("{what} should throw"));
            assert_eq!(kind(&error), "config", "{what}");
            let message = Reflect::get(&error, &"message".into()).unwrap();
            message.as_string().unwrap()
        };
        for (options, names) in [
            (object(&[("callMs", n(f64::NAN))]), "callMs"),
            (object(&[("callMs", n(0.0))]), "callMs"),
            (object(&[("callMs", n(-16.0))]), "callMs"),
            (object(&[("maxAtOnce", n(0.0))]), "maxAtOnce"),
            (object(&[("maxAtOnce", n(1025.0))]), "maxAtOnce"),
            (object(&[("maxAtOnce", n(2.5))]), "maxAtOnce"),
            (object(&[("overlapMs", n(-1.0))]), "overlapMs"),
            (object(&[("overlapMs", n(f64::NAN))]), "overlapMs"),
            (object(&[("evalEvery", n(-20.0))]), "evalEvery"),
            (object(&[("evalEvery", n(4294967296.0))]), "evalEvery"),
            (object(&[("saveEvery", n(f64::INFINITY))]), "saveEvery"),
            (object(&[("end", n(1e300))]), "end"),
            (object(&[("batchMs", n(16.0))]), "batchMs"),
            (n(16.0), "object"),
        ] {
            let what = format!("{:?}", js_sys::JSON::stringify(&options));
            let message = refused(web::Schedule::new(options), &what);
            assert!(message.contains(names), "{what}: {message}");
        }
        let page = web::Schedule::new(object(&[
            ("callMs", n(16.0)),
            ("maxAtOnce", n(16.0)),
            ("overlapMs", n(8.0)),
            ("evalEvery", n(20.0)),
            ("end", n(30.0)),
        ]))
        .expect("the worker's schedule");
        let same = tidepool::train::Schedule {
            call_ms: 16.0,
            max_at_once: 16,
            overlap_ms: Some(8.0),
            eval_every: 20,
            save_every: 0,
            end: Some(30),
        };
        for step in [0.0, 5.0, 18.0, 19.0, 28.0] {
            for ms in [None, Some(0.0), Some(0.5), Some(5.0), Some(40.0)] {
                let want = same.steps_from(step as u32, ms.filter(|&ms| ms > 0.0));
                assert_eq!(page.steps_from(step, ms).unwrap(), want, "{step} {ms:?}");
            }
        }
        assert!(page.overlaps(Some(8.0)).unwrap() && !page.overlaps(Some(8.5)).unwrap());
        assert!(!page.overlaps(None).unwrap());
        assert!(page.nothing_due_at(21.0).unwrap() && !page.nothing_due_at(20.0).unwrap());
        assert!(!page.nothing_due_at(30.0).unwrap(), "the end");
        assert!(page.evaluation_due_at(40.0).unwrap() && !page.evaluation_due_at(41.0).unwrap());
        assert!(!page.save_due_at(40.0).unwrap(), "no saves");
        assert_eq!(
            page.steps_from(4294967295.0, Some(1.0)).unwrap(),
            0,
            "the counter is full"
        );
        for bad in [f64::NAN, -1.0, f64::INFINITY] {
            let error = page.steps_from(0.0, Some(bad)).unwrap_err();
            assert_eq!(kind(&error), "config", "msPerStep {bad}");
            assert_eq!(kind(&page.overlaps(Some(bad)).unwrap_err()), "config");
        }
        for bad in [f64::NAN, -1.0, 0.5, 4294967296.0] {
            assert_eq!(kind(&page.steps_from(bad, None).unwrap_err()), "config");
            assert_eq!(kind(&page.nothing_due_at(bad).unwrap_err()), "config");
            assert_eq!(kind(&page.save_due_at(bad).unwrap_err()), "config");
        }
        // No options: no time bound, 16 a call, no overlap, nothing due.
        let plain = web::Schedule::new(JsValue::UNDEFINED).expect("defaults");
        assert_eq!(plain.steps_from(0.0, None).unwrap(), 16);
        assert!(!plain.overlaps(Some(1.0)).unwrap());
        assert!(plain.nothing_due_at(1000.0).unwrap());
    }

    fn wasm_memory_bytes() -> f64 {
        let memory: js_sys::WebAssembly::Memory = wasm_bindgen::memory().dyn_into().unwrap();
        let buffer: js_sys::ArrayBuffer = memory.buffer().dyn_into().unwrap();
        buffer.byte_length() as f64
    }

    /// Tokenising a corpus at the 64 MiB cap grew wasm memory from 65 to about 1000
    /// MiB (characters collected whole, ids copied twice); now it takes the ids
    /// (4 bytes a character) and the held-out 10% split off, on top of the text.
    #[wasm_bindgen_test::wasm_bindgen_test]
    fn a_corpus_at_the_cap_tokenises_in_memory_proportional_to_it() {
        let cap = tidepool::data::MAX_CORPUS_BYTES as usize;
        let line = "Tokens take four bytes a character; this line has a few kinds.\n";
        let mut text = String::with_capacity(cap);
        text.extend(line.chars().cycle().take(cap));
        let before = wasm_memory_bytes();
        let corpus = tidepool::data::Corpus::from_text("cap.txt", &text).expect("at the cap");
        let grown = wasm_memory_bytes() - before;
        let mib = |b: f64| b / (1 << 20) as f64;
        web_sys::console::log_1(
            &format!(
                "64 MiB corpus: wasm memory {:.0} MiB with the text, grew {:.0} MiB tokenising it",
                mib(before),
                mib(grown)
            )
            .into(),
        );
        assert_eq!(corpus.tokens(), cap);
        // ids 256 MiB + the held-out copy 26 MiB (281 MiB at peak natively, counted
        // by a global allocator), and the allocator's slack.
        assert!(mib(grown) < 300.0, "grew {:.0} MiB", mib(grown));
    }
}

//! The benchmark exports (feature `bench`): the measurements of [`crate::bench`]
//! for the browser and Dawn runners in `scripts/`.

use wasm_bindgen::prelude::*;

use super::js::{js_error, optional_string, parse_corpus, string, to_js, whole};
use crate::bench;
use crate::config::TrainConfig;
use crate::data::Corpus;
use crate::error::Error;
use crate::gpu::ContextOptions;
use crate::pool::SizePolicy;

fn bench_corpus(corpus: &JsValue) -> Result<Corpus, JsValue> {
    parse_corpus(corpus, "benchmark corpus")
}

/// `benchPool(batches)`: pooled buffer vs `createBuffer` latency rows (see
/// `tidepool::bench::pool_latency`).
#[wasm_bindgen(js_name = benchPool)]
pub fn bench_pool(batches: f64) -> js_sys::Promise {
    wasm_bindgen_futures::future_to_promise(async move {
        let batches = whole("batches", batches, 1_000_000)?;
        let sizes = [256, 64 << 10, 4 << 20, 64 << 20];
        let rows = bench::pool_latency(&sizes, batches)
            .await
            .map_err(js_error)?;
        to_js(&rows)
    })
}

/// A benchmark's context from its optional `bindings`: `"declared"` (the default),
/// or `"read-write"`, every storage binding bound as the planned policy binds
/// ([`ContextOptions::read_write_bindings`]).
fn bench_options(bindings: &JsValue) -> Result<ContextOptions, JsValue> {
    let read_write_bindings = match optional_string(bindings, "bindings", 16)?.as_deref() {
        None | Some("declared") => false,
        Some("read-write") => true,
        Some(other) => {
            return Err(js_error(Error::Config(format!(
                "bindings must be \"declared\" or \"read-write\", got {other:?}"
            ))))
        }
    };
    Ok(ContextOptions {
        read_write_bindings,
        ..ContextOptions::default()
    })
}

/// A preset benchmark's arguments from JS, checked: the preset's settings, the
/// corpus, and the warm-up and timed steps (each at most a million).
struct PresetRun {
    preset: String,
    cfg: TrainConfig,
    corpus: Corpus,
    warmup: u32,
    steps: u32,
}

fn preset_run(
    preset: &JsValue,
    warmup: f64,
    steps: f64,
    corpus: &JsValue,
) -> Result<PresetRun, JsValue> {
    let preset = string(preset, "the preset's name", 64)?;
    Ok(PresetRun {
        warmup: whole("warmup", warmup, 1_000_000)? as u32,
        steps: whole("steps", steps, 1_000_000)? as u32,
        cfg: TrainConfig::preset(&preset).map_err(js_error)?,
        corpus: bench_corpus(corpus)?,
        preset,
    })
}

/// `benchStep(preset, warmup, steps, corpus?)`: ms a step pooled, with plain
/// uploads, and without the pool.
#[wasm_bindgen(js_name = benchStep)]
pub fn bench_step(
    #[wasm_bindgen(unchecked_param_type = "string")] preset: JsValue,
    warmup: f64,
    steps: f64,
    #[wasm_bindgen(unchecked_param_type = "string | undefined")] corpus: JsValue,
) -> js_sys::Promise {
    wasm_bindgen_futures::future_to_promise(async move {
        let run = preset_run(&preset, warmup, steps, &corpus)?;
        let options = ContextOptions::default();
        let (cfg, corpus) = (&run.cfg, &run.corpus);
        let rows = bench::step_variants(cfg, &options, &run.preset, corpus, run.warmup, run.steps);
        to_js(&rows.await.map_err(js_error)?)
    })
}

/// `benchKernels(preset, warmup, steps, corpus?, policy?, bindings?)`: GPU
/// milliseconds a step per kernel, each dispatch timed in a pass of its own (`tidepool
/// bench kernels` in the browser), under `policy` (default: the preset's) with
/// `bindings` ([`bench_options`]). Needs the adapter's timestamp-query; browsers may
/// round its times (Chrome to 100 µs unless started with
/// `--enable-dawn-features=allow_unsafe_apis`).
#[wasm_bindgen(js_name = benchKernels)]
pub fn bench_kernels(
    #[wasm_bindgen(unchecked_param_type = "string")] preset: JsValue,
    warmup: f64,
    steps: f64,
    #[wasm_bindgen(unchecked_param_type = "string | undefined")] corpus: JsValue,
    #[wasm_bindgen(unchecked_param_type = "string | undefined")] policy: JsValue,
    #[wasm_bindgen(unchecked_param_type = "string | undefined")] bindings: JsValue,
) -> js_sys::Promise {
    wasm_bindgen_futures::future_to_promise(async move {
        let mut run = preset_run(&preset, warmup, steps, &corpus)?;
        if let Some(policy) = optional_string(&policy, "policy", 16)? {
            run.cfg.policy = SizePolicy::parse(&policy).map_err(|e| js_error(Error::Config(e)))?;
        }
        let options = bench_options(&bindings)?;
        let (cfg, corpus) = (&run.cfg, &run.corpus);
        let rows = bench::kernel_times(cfg, &options, &run.preset, corpus, run.warmup, run.steps);
        to_js(&rows.await.map_err(js_error)?)
    })
}

/// `benchPolicies(preset, warmup, steps, corpus?, bindings?, recompute?)`: memory
/// reserved and ms a step per size policy, with `bindings` ([`bench_options`]); with
/// `recompute`, the layernorm outputs recomputed in the backward.
#[wasm_bindgen(js_name = benchPolicies)]
pub fn bench_policies(
    #[wasm_bindgen(unchecked_param_type = "string")] preset: JsValue,
    warmup: f64,
    steps: f64,
    #[wasm_bindgen(unchecked_param_type = "string | undefined")] corpus: JsValue,
    #[wasm_bindgen(unchecked_param_type = "string | undefined")] bindings: JsValue,
    recompute: Option<bool>,
) -> js_sys::Promise {
    wasm_bindgen_futures::future_to_promise(async move {
        let mut run = preset_run(&preset, warmup, steps, &corpus)?;
        run.cfg.recompute = recompute.unwrap_or(false);
        let options = bench_options(&bindings)?;
        let (cfg, corpus) = (&run.cfg, &run.corpus);
        let set = bench::policy_set();
        let rows = bench::policies(
            cfg,
            &options,
            (&run.preset, corpus),
            run.warmup,
            run.steps,
            &set,
        );
        to_js(&rows.await.map_err(js_error)?)
    })
}

//! The `Trainer` class: a GPT training in the page, and who holds it while its
//! calls are in flight (a second call is refused with kind `busy`, except a second
//! `steps(n)`).

use std::cell::RefCell;
use std::rc::Rc;

use wasm_bindgen::prelude::*;

use super::js::{
    corpus_name, internal, js_error, kind_error, parse_config, parse_corpus, to_js, whole,
};
use crate::error::Error;
use crate::plan::{self, DeviceLimits};
use crate::train;

/// The trainer behind a JS handle, and how many `steps` calls are in flight on it.
struct State {
    trainer: RefCell<Option<train::Trainer>>,
    flight: std::cell::Cell<Flight>,
}

/// Who has the trainer: `steps` calls started and not yet resolved (and whether the
/// latest evaluates when it finishes: then no steps may start after it before
/// that), or one other call alone.
#[derive(Clone, Copy, Default)]
struct Flight {
    calls: u32,
    evaluates: bool,
    alone: bool,
}

type Shared = Rc<State>;

fn shared(trainer: train::Trainer) -> Shared {
    Rc::new(State {
        trainer: RefCell::new(Some(trainer)),
        flight: Default::default(),
    })
}

/// A call's claim on the trainer alone, taken when the call is made (so the order
/// of the calls decides which is refused, not the order of their futures' first
/// polls) and let go when its future ends.
struct Claim(Shared);

impl Claim {
    /// Refused (`busy`) while `steps` calls are in flight or another call has one.
    fn take(state: &Shared) -> Result<Claim, JsValue> {
        let flight = state.flight.get();
        if flight.calls > 0 || flight.alone {
            return Err(busy());
        }
        state.flight.set(Flight {
            alone: true,
            ..flight
        });
        Ok(Claim(state.clone()))
    }

    fn trainer(&self) -> Result<std::cell::RefMut<'_, Option<train::Trainer>>, JsValue> {
        self.0.trainer.try_borrow_mut().map_err(|_| busy())
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let flight = self.0.flight.get();
        self.0.flight.set(Flight {
            alone: false,
            ..flight
        });
    }
}

/// A GPT training in this page, on its own WebGPU device and pool.
#[wasm_bindgen]
pub struct Trainer {
    inner: Shared,
}

/// The one kind no [`Error`] has: it is about the caller's order of calls, not about
/// the run.
fn busy() -> JsValue {
    kind_error(
        "busy",
        "the trainer is busy with an earlier call: await its promise before the next call \
         (only steps(n) may be called again before the one before resolves)",
    )
}

fn freed() -> JsValue {
    internal("the trainer was freed")
}

/// Runs `f` on the trainer; rejects when it is freed or already busy (a call not
/// awaited before the next one).
fn with_trainer<F, R>(inner: &Shared, f: F) -> js_sys::Promise
where
    F: for<'a> FnOnce(
            &'a mut train::Trainer,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<R, Error>> + 'a>,
        > + 'static,
    R: serde::Serialize,
{
    let claim = match Claim::take(inner) {
        Ok(claim) => claim,
        Err(e) => return js_sys::Promise::reject(&e),
    };
    // Nothing else borrows the trainer while the claim is held.
    #[allow(clippy::await_holding_refcell_ref)]
    wasm_bindgen_futures::future_to_promise(async move {
        let mut guard = claim.trainer()?;
        let trainer = guard.as_mut().ok_or_else(freed)?;
        let result = f(trainer).await.map_err(js_error)?;
        to_js(&result)
    })
}

#[wasm_bindgen]
impl Trainer {
    /// `Trainer.create(config, corpus, name?)`: `config` holds any of the settings
    /// of `resolveConfig`; `corpus` is a string or a `Uint8Array` of UTF-8 text up
    /// to `maxCorpusBytes()` (checked: empty, binary and invalid UTF-8 are errors).
    /// Rejects with an `Error` whose `kind` says why.
    pub fn create(
        config: JsValue,
        corpus: JsValue,
        #[wasm_bindgen(unchecked_param_type = "string | undefined")] name: JsValue,
    ) -> js_sys::Promise {
        wasm_bindgen_futures::future_to_promise(async move {
            let cfg = parse_config(config)?;
            let name = corpus_name(&name, "Trainer.create")?;
            let corpus = parse_corpus(&corpus, &name)?;
            drop(name);
            let trainer = train::Trainer::new(cfg, corpus).await.map_err(js_error)?;
            Ok(Trainer {
                inner: shared(trainer),
            }
            .into())
        })
    }

    /// `trainer.replace(config, corpus, name?)`: checks the new settings and corpus
    /// against this trainer's device (nothing is lost when they are refused), then
    /// frees this trainer's buffers before building the new one in its place, so
    /// two trainers never hold memory at once. If building fails after that (a GPU
    /// error), the trainer is left freed.
    pub fn replace(
        &self,
        config: JsValue,
        corpus: JsValue,
        #[wasm_bindgen(unchecked_param_type = "string | undefined")] name: JsValue,
    ) -> js_sys::Promise {
        let claim = match Claim::take(&self.inner) {
            Ok(claim) => claim,
            Err(e) => return js_sys::Promise::reject(&e),
        };
        #[allow(clippy::await_holding_refcell_ref)]
        wasm_bindgen_futures::future_to_promise(async move {
            let cfg = parse_config(config)?;
            let name = corpus_name(&name, "trainer.replace")?;
            let corpus = parse_corpus(&corpus, &name)?;
            let mut guard = claim.trainer()?;
            let old = guard.as_ref().ok_or_else(freed)?;
            corpus.check_context(cfg.context).map_err(js_error)?;
            let limits = DeviceLimits::of(old.context());
            plan::check(&cfg, corpus.vocab_size() as u64, &limits).map_err(js_error)?;
            // Drops the old trainer: its context destroys every buffer it made.
            *guard = None;
            *guard = Some(train::Trainer::new(cfg, corpus).await.map_err(js_error)?);
            Ok(JsValue::UNDEFINED)
        })
    }

    /// `{ name, backend }` of the adapter.
    pub fn adapter(&self) -> Result<JsValue, JsValue> {
        self.read(|t| {
            serde_json::json!({
                "name": t.context().adapter_name(),
                "backend": t.context().backend(),
                // `precision: 'f16'` needs it (the page offers f16 only then).
                "shader_f16": t.context().adapter_features().contains(wgpu::Features::SHADER_F16),
                // Block reductions by subgroups (else shared memory).
                "subgroups": t.context().subgroups(),
            })
        })
    }

    /// `{ name, bytes, vocab, tokens }` of the corpus.
    pub fn corpus(&self) -> Result<JsValue, JsValue> {
        self.read(|t| {
            let c = t.corpus();
            serde_json::json!({
                "name": c.name, "bytes": c.bytes, "vocab": c.vocab_size(), "tokens": c.tokens(),
            })
        })
    }

    /// The resolved model and training settings.
    pub fn model(&self) -> Result<JsValue, JsValue> {
        self.read(|t| {
            let (m, c) = (t.model(), t.config());
            serde_json::json!({
                "layers": m.layers, "heads": m.heads, "width": m.width,
                "context": m.context, "vocab": m.vocab, "batch": c.batch,
                "params": m.num_params(), "lr": c.lr, "policy": c.policy.label(),
                "pool": c.pool, "steps": c.steps, "eval_every": c.eval_every,
                "eval_batches": c.eval_batches, "dropout": c.dropout,
                "precision": c.precision.name(), "submit_every": c.submit_every,
                "recompute": c.recompute,
            })
        })
    }

    /// The latest step's figures without stepping.
    pub fn stats(&self) -> Result<JsValue, JsValue> {
        self.read(|t| serde_json::to_value(t.stats()).unwrap_or_default())
    }

    /// The context's and the pool's counters now (`{context, pool}`): with what an
    /// evaluation or a sample since the latest step created, which that step's
    /// figures do not hold yet.
    pub fn counters(&self) -> Result<JsValue, JsValue> {
        self.read(|t| {
            let ctx = t.context();
            serde_json::json!({ "context": ctx.counters(), "pool": ctx.pool_stats() })
        })
    }

    /// The planned policy's active plan (`{arenas, ranges, reserved, plans_made}`:
    /// each arena's trace buffer id and bytes, each planned tensor's arena, offset
    /// and size in the order the step asks for them), or `null` under the other
    /// policies and before the first planned step.
    #[wasm_bindgen(js_name = memoryPlan)]
    pub fn memory_plan(&self) -> Result<JsValue, JsValue> {
        self.try_read(|t| t.context().memory_plan().map(safe_plan).transpose())
    }

    /// One training step; resolves to its figures.
    pub fn step(&self) -> js_sys::Promise {
        with_trainer(&self.inner, |t| Box::pin(t.step()))
    }

    /// `steps(n)`: `n` training steps (1 to 1024) recorded back to back, their
    /// losses read once at the end, so the GPU goes from step to step without waiting
    /// for the host; resolves to an array of `n` step stats (each `ms` is the call's
    /// time over `n`, from the end of the call before when that was still in flight).
    /// A bad `n` rejects with `kind: "config"`.
    ///
    /// The steps are recorded and submitted before this returns, so a second
    /// `steps(n)` may be called before the first resolves (not a third, nor one after
    /// a call whose steps reach an evaluation, `eval_every`: those reject with
    /// `busy`): its steps then run on the GPU while the first's losses come back,
    /// which in a browser saves the millisecond or more between calls. Calls resolve
    /// in the order they were made. Every other call waits for them (`busy`).
    pub fn steps(&self, n: f64) -> js_sys::Promise {
        let n = match whole("n", n, train::MAX_STEPS_AT_ONCE) {
            Ok(n) if n > 0 => n as u32,
            Ok(_) => {
                return js_sys::Promise::reject(&kind_error(
                    "config",
                    "steps(n): n must be at least 1",
                ))
            }
            Err(e) => return js_sys::Promise::reject(&e),
        };
        match self.start_steps(n) {
            Ok(promise) => promise,
            Err(e) => js_sys::Promise::reject(&e),
        }
    }

    /// `steps(n)` past its checks: records and submits now, resolves when the
    /// figures are back and the stats made.
    fn start_steps(&self, n: u32) -> Result<js_sys::Promise, JsValue> {
        let state = self.inner.clone();
        let flight = state.flight.get();
        let full = flight.calls >= train::MAX_STEPS_IN_FLIGHT;
        if flight.alone || full || (flight.calls > 0 && flight.evaluates) {
            return Err(busy());
        }
        let in_flight = {
            let mut guard = state.trainer.try_borrow_mut().map_err(|_| busy())?;
            let trainer = guard.as_mut().ok_or_else(freed)?;
            trainer.start_steps(n).map_err(js_error)?
        };
        state.flight.set(Flight {
            calls: flight.calls + 1,
            evaluates: in_flight.evaluates(),
            alone: false,
        });
        // Held across the await only by a call that evaluates, and no steps start
        // after such a call until it resolves: nothing else can want the trainer.
        #[allow(clippy::await_holding_refcell_ref)]
        Ok(wasm_bindgen_futures::future_to_promise(async move {
            let finished = async {
                let figures = in_flight.figures().await.map_err(js_error)?;
                let mut guard = state.trainer.try_borrow_mut().map_err(|_| busy())?;
                let trainer = guard.as_mut().ok_or_else(freed)?;
                trainer.finish_steps(figures).await.map_err(js_error)
            }
            .await;
            let mut flight = state.flight.get();
            flight.calls -= 1;
            flight.evaluates &= flight.calls > 0;
            state.flight.set(flight);
            to_js(&finished?)
        }))
    }

    /// One training step with the allocation trace on; resolves to a trace (the
    /// JSON of `tidepool train --trace`, docs/trace.md) holding that step, labelled
    /// `first` for step 1 and `steady` after.
    pub fn trace(&self) -> js_sys::Promise {
        with_trainer(&self.inner, |t| {
            Box::pin(async move {
                let label = if t.steps_done() == 0 {
                    "first"
                } else {
                    "steady"
                };
                let (_, step) = t.step_traced(label).await?;
                let mut trace = t.context().new_trace();
                trace.steps.push(step);
                Ok(trace)
            })
        })
    }

    /// Resolves to the mean held-out loss.
    pub fn evaluate(&self) -> js_sys::Promise {
        with_trainer(&self.inner, |t| Box::pin(t.evaluate()))
    }

    /// `sample(prompt, length, temperature, topK)` resolves to `length` characters
    /// sampled from the model after `prompt`, every character of which must be in
    /// the vocabulary (`prompt` and `length` up to 10000 characters, `temperature`
    /// >= 0 with 0 greedy, `topK` a whole number, 0: all). Anything else rejects
    /// with `kind: "config"`; the trainer stays usable.
    pub fn sample(
        &self,
        #[wasm_bindgen(unchecked_param_type = "string")] prompt: JsValue,
        length: f64,
        temperature: f64,
        top_k: f64,
    ) -> js_sys::Promise {
        // Taken as any JS value so that a number or undefined rejects with a kind like
        // every other bad argument, instead of throwing from the generated glue.
        let Some(prompt) = prompt.as_string() else {
            return js_sys::Promise::reject(&kind_error(
                "config",
                "sample(prompt, length, temperature, topK): the prompt must be a string \
                 (\"\" for none)",
            ));
        };
        let max = train::MAX_SAMPLE_CHARS as u32;
        let args = whole("the prompt's length", prompt.chars().count() as f64, max)
            .and_then(|_| whole("length", length, max))
            .and_then(|length| Ok((length, whole("topK", top_k, u32::MAX)?)));
        let (length, top_k) = match args {
            Ok(args) => args,
            Err(e) => return js_sys::Promise::reject(&e),
        };
        with_trainer(&self.inner, move |t| {
            Box::pin(async move { t.sample(&prompt, length, temperature as f32, top_k).await })
        })
    }

    /// `save()` resolves to the run as a checkpoint: a `Uint8Array` holding a
    /// safetensors file (docs/checkpoint.md) that `Trainer.load` and
    /// `tidepool train --resume` continue exactly.
    pub fn save(&self) -> js_sys::Promise {
        let claim = match Claim::take(&self.inner) {
            Ok(claim) => claim,
            Err(e) => return js_sys::Promise::reject(&e),
        };
        #[allow(clippy::await_holding_refcell_ref)]
        wasm_bindgen_futures::future_to_promise(async move {
            let guard = claim.trainer()?;
            let trainer = guard.as_ref().ok_or_else(freed)?;
            let bytes = trainer.save().await.map_err(js_error)?;
            Ok(js_sys::Uint8Array::from(bytes.as_slice()).into())
        })
    }

    /// `Trainer.load(bytes, corpus?, name?)` resolves to a new trainer that continues
    /// the run saved in `bytes` (a `Uint8Array` or `ArrayBuffer`). `corpus` (as in
    /// `create`) must have the checkpoint's vocabulary; without one the trainer
    /// samples but does not train. A bad file rejects with its `kind` and leaves
    /// every existing trainer as it was.
    pub fn load(
        bytes: JsValue,
        corpus: JsValue,
        #[wasm_bindgen(unchecked_param_type = "string | undefined")] name: JsValue,
    ) -> js_sys::Promise {
        wasm_bindgen_futures::future_to_promise(async move {
            let name = corpus_name(&name, "Trainer.load")?;
            let bytes = if let Some(buffer) = bytes.dyn_ref::<js_sys::ArrayBuffer>() {
                js_sys::Uint8Array::new(buffer)
            } else {
                bytes.dyn_into::<js_sys::Uint8Array>().map_err(|_| {
                    js_error(Error::Config(
                        "a checkpoint is a Uint8Array or an ArrayBuffer".into(),
                    ))
                })?
            };
            // Checked before the bytes are copied into wasm memory.
            crate::checkpoint::check_file_size(bytes.length().into()).map_err(js_error)?;
            let corpus = if corpus.is_undefined() || corpus.is_null() {
                None
            } else {
                Some(parse_corpus(&corpus, &name)?)
            };
            let trainer = train::Trainer::resume(&bytes.to_vec(), corpus)
                .await
                .map_err(js_error)?;
            Ok(Trainer {
                inner: shared(trainer),
            }
            .into())
        })
    }

    fn read(
        &self,
        f: impl FnOnce(&train::Trainer) -> serde_json::Value,
    ) -> Result<JsValue, JsValue> {
        self.try_read(|t| Ok(f(t)))
    }

    /// What `f` reads of the trainer, when no call holds it.
    fn try_read<T: serde::Serialize>(
        &self,
        f: impl FnOnce(&train::Trainer) -> Result<T, JsValue>,
    ) -> Result<JsValue, JsValue> {
        if self.inner.flight.get().alone {
            return Err(busy());
        }
        let inner = self.inner.trainer.try_borrow().map_err(|_| busy())?;
        let trainer = inner.as_ref().ok_or_else(freed)?;
        to_js(&f(trainer)?)
    }
}

/// The largest whole number a JS number holds exactly (`Number.MAX_SAFE_INTEGER`).
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// `plan` if each of its figures is a whole JS number: every range lies inside an
/// arena and every arena inside `reserved`, so `reserved` and the buffer ids are
/// all there is to check; else a `too_large` error.
fn safe_plan(plan: crate::gpu::PlanLayout) -> Result<crate::gpu::PlanLayout, JsValue> {
    let largest_id = plan.arenas.iter().map(|a| a.buffer).max().unwrap_or(0);
    if plan.reserved > MAX_SAFE_INTEGER || largest_id > MAX_SAFE_INTEGER {
        return Err(js_error(Error::TooLarge(format!(
            "the memory plan (arenas of {} bytes, buffer ids up to {largest_id}) passes \
             what a JS number holds exactly (Number.MAX_SAFE_INTEGER, 2^53 - 1): lower \
             batch, context or width",
            plan.reserved
        ))));
    }
    Ok(plan)
}

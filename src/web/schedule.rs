//! The `Schedule` class: the training schedule ([`crate::train::Schedule`]) for the
//! page's worker, so that the worker and the CLI cut a run into calls alike.

use wasm_bindgen::prelude::*;

use super::js::{js_error, whole};
use crate::error::Error;
use crate::train;

/// The fields `new Schedule(options)` takes, as JS spells them; every one optional.
#[derive(Default, serde::Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct Options {
    call_ms: Option<f64>,
    max_at_once: Option<f64>,
    overlap_ms: Option<f64>,
    eval_every: Option<f64>,
    save_every: Option<f64>,
    end: Option<f64>,
}

const FIELDS: [&str; 6] = [
    "callMs",
    "maxAtOnce",
    "overlapMs",
    "evalEvery",
    "saveEvery",
    "end",
];

fn config_error(message: String) -> JsValue {
    js_error(Error::Config(message))
}

/// A step number from JS: a whole number from 0 to 2^32 - 1.
fn step_number(name: &str, value: f64) -> Result<u32, JsValue> {
    Ok(whole(name, value, u32::MAX)? as u32)
}

/// A measured ms a step from JS: `undefined`, `null` or 0 before any is measured,
/// else positive and finite.
fn ms_a_step(value: Option<f64>) -> Result<Option<f64>, JsValue> {
    match value {
        None => Ok(None),
        Some(0.0) => Ok(None),
        Some(ms) if ms.is_finite() && ms > 0.0 => Ok(Some(ms)),
        Some(ms) => Err(config_error(format!(
            "msPerStep must be a positive number of ms (0 or undefined before a step is \
             measured), got {ms}"
        ))),
    }
}

/// How many steps each training call takes, and whether the next call may start
/// before the one in flight is back.
#[wasm_bindgen]
pub struct Schedule {
    inner: train::Schedule,
}

#[wasm_bindgen]
// The negated comparisons also refuse NaN.
#[allow(clippy::neg_cmp_op_on_partial_ord)]
impl Schedule {
    /// `new Schedule({ callMs, maxAtOnce, overlapMs, evalEvery, saveEvery, end })`:
    /// calls of at most `callMs` of training by the last ms a step (unset or
    /// `Infinity`: no bound) and at most `maxAtOnce` steps (1 to 1024, default 16),
    /// overlapping where a step takes at most `overlapMs` (unset or `null`: never),
    /// ending where an evaluation (`evalEvery`), a save (`saveEvery`) or the run's
    /// last step (`end`; unset or 0: none) is due. Anything else throws an `Error`
    /// with kind `config` naming the field.
    #[wasm_bindgen(constructor)]
    pub fn new(options: JsValue) -> Result<Schedule, JsValue> {
        let given: Options = if options.is_undefined() || options.is_null() {
            Options::default()
        } else {
            let object = options
                .dyn_ref::<js_sys::Object>()
                .ok_or_else(|| config_error("a schedule's options are an object".into()))?;
            for key in js_sys::Object::keys(object).iter() {
                let key = key.as_string().unwrap_or_default();
                if !FIELDS.contains(&key.as_str()) {
                    return Err(config_error(format!(
                        "unknown schedule option {key:?}; the options are {}",
                        FIELDS.join(", ")
                    )));
                }
            }
            serde_wasm_bindgen::from_value(options)
                .map_err(|e| config_error(format!("a schedule's options: {e}")))?
        };
        let every = |name, value: Option<f64>| value.map_or(Ok(0), |v| step_number(name, v));
        let mut inner = train::Schedule {
            eval_every: every("evalEvery", given.eval_every)?,
            save_every: every("saveEvery", given.save_every)?,
            end: match given.end {
                None => None,
                Some(end) => Some(step_number("end", end)?).filter(|&end| end > 0),
            },
            ..train::Schedule::default()
        };
        if let Some(ms) = given.call_ms {
            if !(ms > 0.0) {
                return Err(config_error(format!(
                    "callMs must be a positive number of ms (Infinity: no bound), got {ms}"
                )));
            }
            inner.call_ms = ms;
        }
        if let Some(most) = given.max_at_once {
            let max = train::MAX_STEPS_AT_ONCE;
            inner.max_at_once = match whole("maxAtOnce", most, max)? {
                0 => return Err(config_error(format!("maxAtOnce must be 1 to {max}, got 0"))),
                most => most as u32,
            };
        }
        if let Some(ms) = given.overlap_ms {
            if !(ms >= 0.0) {
                return Err(config_error(format!(
                    "overlapMs must be a number of ms, not negative (null: never), got {ms}"
                )));
            }
            inner.overlap_ms = Some(ms);
        }
        inner.validate().map_err(js_error)?;
        Ok(Schedule { inner })
    }

    /// `stepsFrom(step, msPerStep)`: how many steps the call starting after step
    /// `step` takes, given the last measured ms a step (`undefined`, `null` or 0:
    /// none yet). At least 1, but 0 from step 2^32 - 1 (the step counter is full).
    #[wasm_bindgen(js_name = stepsFrom)]
    pub fn steps_from(&self, step: f64, ms_per_step: Option<f64>) -> Result<u32, JsValue> {
        let step = step_number("step", step)?;
        Ok(self.inner.steps_from(step, ms_a_step(ms_per_step)?))
    }

    /// `overlaps(msPerStep)`: whether, at this ms a step, the next call may start
    /// before the one in flight is back (where `nothingDueAt` its end).
    pub fn overlaps(&self, ms_per_step: Option<f64>) -> Result<bool, JsValue> {
        Ok(self.inner.overlaps(ms_a_step(ms_per_step)?))
    }

    /// `evaluationDueAt(step)`: an evaluation is due after step `step`.
    #[wasm_bindgen(js_name = evaluationDueAt)]
    pub fn evaluation_due_at(&self, step: f64) -> Result<bool, JsValue> {
        Ok(self.inner.evaluation_due_at(step_number("step", step)?))
    }

    /// `saveDueAt(step)`: a save is due after step `step`.
    #[wasm_bindgen(js_name = saveDueAt)]
    pub fn save_due_at(&self, step: f64) -> Result<bool, JsValue> {
        Ok(self.inner.save_due_at(step_number("step", step)?))
    }

    /// `nothingDueAt(end)`: no evaluation, save or end of the run after a call
    /// ending at step `end`.
    #[wasm_bindgen(js_name = nothingDueAt)]
    pub fn nothing_due_at(&self, end: f64) -> Result<bool, JsValue> {
        Ok(self.inner.nothing_due_at(step_number("end", end)?))
    }
}

//! Any allocator's recording in the page: a PyTorch memory snapshot or a tidepool
//! trace, from its bytes to the report (`tidepool trace replay --json`) and the
//! arrays the timeline draws. Every failure to read a file is an error of kind
//! `trace`; its size is checked before it is copied into wasm memory.

use wasm_bindgen::prelude::*;

use super::js::{js_error, whole};
use crate::error::Error;
use crate::snapshot::pickle::{Limits, MAX_BYTES};
use crate::snapshot::timeline::Timeline;
use crate::snapshot::{self, report, Format, Recording};

/// Refuses a file of `len` bytes (UTF-16 units for text, each at least a byte of
/// UTF-8) above [`MAX_BYTES`], before it is copied.
fn check_length(len: f64, unit: &str) -> Result<(), JsValue> {
    if len <= MAX_BYTES as f64 {
        return Ok(());
    }
    Err(js_error(Error::Trace(format!(
        "the file is {len} {unit}; at most {MAX_BYTES} bytes are read in the browser \
         (record fewer events with _record_memory_history(max_entries=N), or replay it \
         with `tidepool trace replay FILE --max-mb N`)"
    ))))
}

/// A report as a plain object; figures past 2^53, which a JS number cannot hold
/// exactly, are an error of kind `trace` (only a crafted file has them).
fn figures<T: serde::Serialize>(value: &T) -> Result<JsValue, JsValue> {
    let serializer = serde_wasm_bindgen::Serializer::json_compatible();
    value.serialize(&serializer).map_err(|e| {
        js_error(Error::Trace(format!(
            "{e}: the recording's byte counts pass 2^53, more than the page can show"
        )))
    })
}

/// `replayTrace(json)`: a trace (from `Trainer.trace()` or `tidepool train --trace`)
/// replayed through every size policy and plan, against the lower bound and the
/// pool that ran: the report of `tidepool trace replay --json`.
#[wasm_bindgen(js_name = replayTrace)]
pub fn replay_trace(
    #[wasm_bindgen(unchecked_param_type = "string")] json: JsValue,
) -> Result<JsValue, JsValue> {
    // Taken as any value: wasm-bindgen's glue would trap on a non-string.
    let json = json.dyn_into::<js_sys::JsString>().map_err(|_| {
        js_error(Error::Trace(
            "replayTrace(json): the trace must be a string of JSON".into(),
        ))
    })?;
    check_length(json.length().into(), "characters")?;
    let text: String = json.into();
    figures(&snapshot::report(text.as_bytes(), &report::Options::default()).map_err(js_error)?)
}

/// A file read once: its recordings (a PyTorch snapshot's device, each step of a
/// tidepool trace), reported and drawn from here. `free()` lets its memory go.
#[wasm_bindgen]
pub struct Snapshot {
    format: Format,
    recordings: Vec<Recording>,
}

#[wasm_bindgen]
impl Snapshot {
    /// `Snapshot.read(bytes, device?)`: a PyTorch memory snapshot (the pickle
    /// `_dump_snapshot` writes) or a tidepool trace (JSON); for a snapshot, its
    /// `device` (default: the one with the most events).
    pub fn read(
        #[wasm_bindgen(unchecked_param_type = "Uint8Array")] bytes: JsValue,
        device: Option<f64>,
    ) -> Result<Snapshot, JsValue> {
        let bytes = bytes.dyn_into::<js_sys::Uint8Array>().map_err(|_| {
            js_error(Error::Trace(
                "Snapshot.read(bytes): the file must be a Uint8Array".into(),
            ))
        })?;
        check_length(bytes.length().into(), "bytes")?;
        let device = match device {
            Some(d) => Some(whole("device", d, u32::from(u16::MAX))? as u32),
            None => None,
        };
        let (format, recordings) =
            snapshot::read(&bytes.to_vec(), Limits::default(), device).map_err(js_error)?;
        Ok(Snapshot { format, recordings })
    }

    /// `Snapshot.checkSize(bytes)`: throws what `read` would for a file of that
    /// size, before anything is read.
    #[wasm_bindgen(js_name = checkSize)]
    pub fn check_size(bytes: f64) -> Result<(), JsValue> {
        if !(bytes.is_finite() && bytes >= 0.0 && bytes.fract() == 0.0) {
            return Err(js_error(Error::Config(format!(
                "a file's size is a whole number of bytes, got {bytes}"
            ))));
        }
        check_length(bytes, "bytes")
    }

    /// `pytorch-snapshot` or `tidepool-trace`.
    #[wasm_bindgen(getter)]
    pub fn format(&self) -> String {
        self.format.name().into()
    }

    /// How many recordings the file holds.
    #[wasm_bindgen(getter)]
    pub fn recordings(&self) -> u32 {
        self.recordings.len() as u32
    }

    /// `snapshot.report()`: each recording's repeating step (or all of it) replayed.
    pub fn report(&self) -> Result<JsValue, JsValue> {
        figures(&report::of_recordings(self.format, &self.recordings, None).map_err(js_error)?)
    }

    /// `snapshot.replay(recording, start, end)`: that recording's events
    /// `start..end` (from 0) replayed: one step of the report.
    pub fn replay(&self, recording: f64, start: f64, end: f64) -> Result<JsValue, JsValue> {
        let (i, r) = self.recording(recording)?;
        let start = whole("start", start, u32::MAX)? as u32;
        let end = whole("end", end, u32::MAX)? as u32;
        figures(&report::step_report(r, Some((start, end)), i).map_err(js_error)?)
    }

    /// `snapshot.timeline(recording)`: what the timeline draws, in typed arrays (see
    /// `tidepool::snapshot::timeline::Timeline`, whose fields these are).
    pub fn timeline(&self, recording: f64) -> Result<JsValue, JsValue> {
        let (_, r) = self.recording(recording)?;
        timeline_js(&Timeline::of(r))
    }
}

impl Snapshot {
    fn recording(&self, index: f64) -> Result<(u32, &Recording), JsValue> {
        let last = (self.recordings.len() as u32).saturating_sub(1);
        let i = whole("recording", index, last)?;
        match self.recordings.get(i) {
            Some(r) => Ok((i as u32, r)),
            None => Err(js_error(Error::Trace("the file holds no recording".into()))),
        }
    }
}

fn strings(items: &[String]) -> JsValue {
    items
        .iter()
        .map(|s| JsValue::from_str(s))
        .collect::<js_sys::Array>()
        .into()
}

/// The timeline as a plain object of typed arrays (copied out of wasm memory, so
/// the worker can transfer them to the page).
fn timeline_js(t: &Timeline) -> Result<JsValue, JsValue> {
    let out = js_sys::Object::new();
    let (peak, peak_at) = t.peak();
    let fields: [(&str, JsValue); 21] = [
        ("label", t.label.as_str().into()),
        ("allocator", t.allocator.as_str().into()),
        ("events", t.events.into()),
        ("peak", peak.into()),
        ("peak_at", peak_at.into()),
        ("start", js_sys::Uint32Array::from(&t.start[..]).into()),
        ("end", js_sys::Uint32Array::from(&t.end[..]).into()),
        ("size", js_sys::Float64Array::from(&t.size[..]).into()),
        ("stream", js_sys::Uint32Array::from(&t.stream[..]).into()),
        ("stack", js_sys::Uint32Array::from(&t.stack[..]).into()),
        ("by_end", js_sys::Uint32Array::from(&t.by_end[..]).into()),
        ("streams", strings(&t.streams)),
        ("live", js_sys::Float64Array::from(&t.live[..]).into()),
        (
            "reserved",
            js_sys::Float64Array::from(&t.reserved[..]).into(),
        ),
        ("frame_names", strings(&t.frame_names)),
        ("frame_files", strings(&t.frame_files)),
        (
            "frame_lines",
            js_sys::Uint32Array::from(&t.frame_lines[..]).into(),
        ),
        (
            "stack_frames",
            js_sys::Uint32Array::from(&t.stack_frames[..]).into(),
        ),
        (
            "stack_offsets",
            js_sys::Uint32Array::from(&t.stack_offsets[..]).into(),
        ),
        (
            "stack_label",
            js_sys::Uint32Array::from(&t.stack_label[..]).into(),
        ),
        ("no_frame", snapshot::timeline::NO_FRAME.into()),
    ];
    for (key, value) in fields {
        js_sys::Reflect::set(&out, &key.into(), &value)?;
    }
    Ok(out.into())
}

//! What crosses the wasm boundary: errors with a `kind`, values to JS, and numbers,
//! configs and corpora from JS, each checked before use.

use wasm_bindgen::prelude::*;

use crate::config::{Overrides, TrainConfig};
use crate::data::{self, Corpus};
use crate::error::Error;

/// A JS `Error` with `message` and `kind` (one of `config`, `too_large`, `corpus`,
/// `trace`, `checkpoint`, `no_webgpu`, `device_lost`, `busy`, `internal`): pages branch on the
/// kind, not the text.
pub(super) fn kind_error(kind: &str, message: &str) -> JsValue {
    let error = js_sys::Error::new(message);
    // Setting a property on a fresh Error cannot fail.
    let _ = js_sys::Reflect::set(&error, &"kind".into(), &kind.into());
    error.into()
}

pub(super) fn js_error(e: Error) -> JsValue {
    kind_error(e.kind(), &e.to_string())
}

pub(super) fn internal(message: impl std::fmt::Display) -> JsValue {
    kind_error("internal", &message.to_string())
}

pub(super) fn to_js<T: serde::Serialize>(value: &T) -> Result<JsValue, JsValue> {
    let serializer = serde_wasm_bindgen::Serializer::json_compatible();
    value.serialize(&serializer).map_err(internal)
}

/// A whole number in `[0, max]` from JS, or a `config` error naming `name`.
pub(super) fn whole(name: &str, value: f64, max: u32) -> Result<usize, JsValue> {
    if value.is_finite() && value.fract() == 0.0 && (0.0..=max as f64).contains(&value) {
        return Ok(value as usize);
    }
    Err(js_error(Error::Config(format!(
        "{name} must be a whole number from 0 to {max}, got {value}"
    ))))
}

/// Characters a corpus name may have (the page's MAX_NAME_CHARS too): it only
/// labels the corpus in messages.
pub const MAX_NAME_CHARS: u32 = 1000;

/// A string argument of at most `max` characters (UTF-16 units), `None` for
/// `undefined` or `null`; anything else is a `config` error naming `what`. Strings
/// cross as `JsValue`s and are checked here: wasm-bindgen's string glue traps the
/// module on a non-string (`{length: 3e9}` asks its allocator for 3 GB).
pub(super) fn optional_string(
    value: &JsValue,
    what: &str,
    max: u32,
) -> Result<Option<String>, JsValue> {
    if value.is_undefined() || value.is_null() {
        return Ok(None);
    }
    let Some(text) = value.dyn_ref::<js_sys::JsString>() else {
        return Err(js_error(Error::Config(format!("{what} must be a string"))));
    };
    if text.length() > max {
        return Err(js_error(Error::Config(format!(
            "{what} is {} characters; at most {max}",
            text.length()
        ))));
    }
    Ok(Some(String::from(text)))
}

/// [`optional_string`], required.
pub(super) fn string(value: &JsValue, what: &str, max: u32) -> Result<String, JsValue> {
    optional_string(value, what, max)?
        .ok_or_else(|| js_error(Error::Config(format!("{what} must be a string"))))
}

/// The optional name of a corpus (`call` names the method in errors): at most
/// [`MAX_NAME_CHARS`], `"your file"` when none is given.
pub(super) fn corpus_name(name: &JsValue, call: &str) -> Result<String, JsValue> {
    let what = format!("{call}: the corpus name (MAX_NAME_CHARS)");
    Ok(optional_string(name, &what, MAX_NAME_CHARS)?.unwrap_or_else(|| "your file".into()))
}

pub(super) fn parse_config(config: JsValue) -> Result<TrainConfig, JsValue> {
    let overrides: Overrides = if config.is_undefined() || config.is_null() {
        Overrides::default()
    } else {
        if let Some(object) = config.dyn_ref::<js_sys::Object>() {
            let keys: Vec<String> = js_sys::Object::keys(object)
                .iter()
                .filter_map(|k| k.as_string())
                .collect();
            Overrides::check_keys(keys).map_err(js_error)?;
        }
        serde_wasm_bindgen::from_value(config)
            .map_err(|e| js_error(Error::Config(e.to_string())))?
    };
    overrides.resolve().map_err(js_error)
}

/// A corpus from a JS string or `Uint8Array`, its size checked before it is copied
/// into wasm memory.
pub(super) fn parse_corpus(corpus: &JsValue, name: &str) -> Result<Corpus, JsValue> {
    if corpus.is_undefined() || corpus.is_null() {
        return Err(js_error(Error::Data(format!(
            "no corpus given: fetch {} (the default) or pick a text file, and pass its text",
            super::default_corpus_path()
        ))));
    }
    if let Some(text) = corpus.dyn_ref::<js_sys::JsString>() {
        // Every UTF-16 unit is at least one UTF-8 byte: refuse before copying.
        data::check_corpus_size(name, text.length().into()).map_err(js_error)?;
        let text = String::from(text);
        return Corpus::from_text(name, &text).map_err(js_error);
    }
    if let Some(bytes) = corpus.dyn_ref::<js_sys::Uint8Array>() {
        data::check_corpus_size(name, bytes.length().into()).map_err(js_error)?;
        return Corpus::from_bytes(name, &bytes.to_vec()).map_err(js_error);
    }
    Err(js_error(Error::Data(
        "the corpus must be a string or a Uint8Array".into(),
    )))
}

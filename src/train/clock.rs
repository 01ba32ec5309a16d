//! [`now_ms`]: the one clock of the crate's timings, on both targets.

/// Milliseconds from an arbitrary origin: `performance.now()` on the web.
pub fn now_ms() -> f64 {
    #[cfg(target_arch = "wasm32")]
    {
        use wasm_bindgen::{JsCast, JsValue};
        // Looked up once: a step reads the clock a few times, and each lookup
        // crosses into JavaScript twice more than the call itself.
        thread_local! {
            static NOW: Option<(JsValue, js_sys::Function)> = {
                let perf = js_sys::Reflect::get(&js_sys::global(), &"performance".into()).ok();
                perf.and_then(|p| {
                    let now = js_sys::Reflect::get(&p, &"now".into()).ok()?;
                    Some((p, now.dyn_into::<js_sys::Function>().ok()?))
                })
            };
        }
        NOW.with(|now| {
            now.as_ref()
                .and_then(|(perf, now)| now.call0(perf).ok()?.as_f64())
        })
        .unwrap_or_else(js_sys::Date::now)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        use std::sync::OnceLock;
        static START: OnceLock<std::time::Instant> = OnceLock::new();
        START
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_secs_f64()
            * 1e3
    }
}

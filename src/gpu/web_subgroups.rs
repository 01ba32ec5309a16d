//! Subgroups in the browser. wgpu 30's WebGPU backend maps no `subgroups` feature
//! (its `FEATURES_MAPPING` stops at `clip-distances`), so a device it requests never
//! has them, though Chrome offers them (SwiftShader included). While a context is
//! being made, [`Shim`] wraps `navigator.gpu.requestAdapter` so that the adapter it
//! returns adds `subgroups` to the features its `requestDevice` asks for, where that
//! adapter offers them; wgpu's shaders reach the browser as WGSL unchanged, so
//! `enable subgroups;` in them then compiles. Dropping the shim restores
//! `navigator.gpu`. Written with closures, not JavaScript source: pages whose
//! Content-Security-Policy allows no `eval` still get it.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use js_sys::{Array, Function, Promise, Reflect};
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};

const FEATURE: &str = "subgroups";

type Closures = Rc<RefCell<Vec<Closure<dyn FnMut(JsValue) -> JsValue>>>>;

/// `navigator.gpu.requestAdapter` wrapped while it lives.
pub(crate) struct Shim {
    gpu: JsValue,
    asked: Rc<Cell<bool>>,
    closures: Closures,
}

impl Shim {
    /// Wraps `navigator.gpu.requestAdapter`; `None` where there is none to wrap, or
    /// where another context being made has wrapped it (one shim at a time: a shim
    /// wrapping another's wrapper would call it after that one is dropped), so that
    /// context goes without subgroups.
    pub fn install() -> Option<Shim> {
        let get = |target: &JsValue, key: &str| Reflect::get(target, &key.into()).ok();
        let gpu = get(&get(&js_sys::global(), "navigator")?, "gpu")?;
        if js_sys::Object::has_own(
            gpu.unchecked_ref::<js_sys::Object>(),
            &"requestAdapter".into(),
        ) {
            return None;
        }
        let original: Function = get(&gpu, "requestAdapter")?.dyn_into().ok()?;
        let asked = Rc::new(Cell::new(false));
        let closures: Closures = Rc::default();

        // The adapter's requestDevice, asking for subgroups too.
        let on_adapter = {
            let (asked, closures) = (asked.clone(), closures.clone());
            Closure::<dyn FnMut(JsValue) -> JsValue>::new(move |adapter: JsValue| {
                if offers(&adapter) {
                    if let Some(request) =
                        get(&adapter, "requestDevice").and_then(|f| f.dyn_into::<Function>().ok())
                    {
                        let (this, asked) = (adapter.clone(), asked.clone());
                        let wrapped =
                            Closure::<dyn FnMut(JsValue) -> JsValue>::new(move |desc: JsValue| {
                                if with_feature(&desc) {
                                    asked.set(true);
                                }
                                request.call1(&this, &desc).unwrap_or_else(|e| e)
                            });
                        let _ = Reflect::set(&adapter, &"requestDevice".into(), wrapped.as_ref());
                        closures.borrow_mut().push(wrapped);
                    }
                }
                adapter
            })
        };
        let on_adapter_fn: Function = on_adapter.as_ref().clone().unchecked_into();
        closures.borrow_mut().push(on_adapter);

        let this = gpu.clone();
        let request_adapter = Closure::<dyn FnMut(JsValue) -> JsValue>::new(move |options| {
            // promise.then(on_adapter), through Reflect: js-sys's `then` takes a
            // callback that returns nothing, and the adapter must pass through.
            let then = |promise: JsValue| {
                let then: Function = Reflect::get(&promise, &"then".into())?.dyn_into()?;
                then.call1(&promise, &on_adapter_fn)
            };
            original
                .call1(&this, &options)
                .and_then(then)
                .unwrap_or_else(|e| Promise::reject(&e).into())
        });
        Reflect::set(&gpu, &"requestAdapter".into(), request_adapter.as_ref()).ok()?;
        closures.borrow_mut().push(request_adapter);
        Some(Shim {
            gpu,
            asked,
            closures,
        })
    }

    /// Whether a device was requested with `subgroups` through the shim.
    pub fn asked(&self) -> bool {
        self.asked.get()
    }
}

impl Drop for Shim {
    fn drop(&mut self) {
        // The wrapper is an own property shadowing GPU.prototype's method.
        let _ = Reflect::delete_property(
            self.gpu.unchecked_ref::<js_sys::Object>(),
            &"requestAdapter".into(),
        );
        // The closures hold their own list (a cycle): let them go. The adapter's
        // requestDevice has been called by now; wgpu asks for one device an adapter.
        self.closures.borrow_mut().clear();
    }
}

/// `adapter.features.has("subgroups")`.
fn offers(adapter: &JsValue) -> bool {
    let Ok(features) = Reflect::get(adapter, &"features".into()) else {
        return false;
    };
    let Ok(has) = Reflect::get(&features, &"has".into()) else {
        return false;
    };
    has.dyn_into::<Function>()
        .ok()
        .and_then(|has| has.call1(&features, &FEATURE.into()).ok())
        .and_then(|v| v.as_bool())
        .unwrap_or(false)
}

/// Adds `subgroups` to `desc.requiredFeatures` (wgpu always sets the array).
fn with_feature(desc: &JsValue) -> bool {
    let Ok(features) = Reflect::get(desc, &"requiredFeatures".into()) else {
        return false;
    };
    let Ok(features) = features.dyn_into::<Array>() else {
        return false;
    };
    if !features.includes(&FEATURE.into(), 0) {
        features.push(&FEATURE.into());
    }
    true
}

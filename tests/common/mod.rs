//! Shared by the test files: one body runs natively (pollster) and in headless
//! Chromium (wasm-bindgen-test), plus helpers for parity checks.
#![allow(dead_code)]

use std::rc::Rc;

use tidepool::{PooledBuffer, WgpuContext};

/// `gpu_test!(name, body())` makes `name` a native `#[test]` and a browser
/// `#[wasm_bindgen_test]`, both running the async `body()`.
#[macro_export]
macro_rules! gpu_test {
    ($name:ident, $body:expr) => {
        #[cfg(not(target_arch = "wasm32"))]
        #[test]
        fn $name() {
            pollster::block_on($body)
        }
        #[cfg(target_arch = "wasm32")]
        #[wasm_bindgen_test::wasm_bindgen_test]
        async fn $name() {
            $body.await
        }
    };
}

/// Every kind an error may have (`Error::kind`, and `busy` from the wasm API).
pub const ERROR_KINDS: [&str; 9] = [
    "config",
    "too_large",
    "corpus",
    "trace",
    "checkpoint",
    "no_webgpu",
    "device_lost",
    "busy",
    "internal",
];

/// The tests' context: the default one, but a request is only served from its own
/// size class (fit ratio 1). [`poisoned`] leaves NaN buffers in the outputs' classes;
/// with fitting, one output's request can take another's poisoned buffer (a larger
/// class) and leave the other to a fresh, clean one, so an unwritten element could
/// pass. Fitting has its own tests (tests/pool.rs, tests/gpu.rs, the training tests'
/// default trainers).
pub async fn context() -> WgpuContext {
    context_with(true).await
}

/// [`context`], with the kernels' block reductions by subgroups where the device
/// has them (`subgroups`) or by shared memory.
pub async fn context_with(subgroups: bool) -> WgpuContext {
    WgpuContext::with_options(tidepool::gpu::ContextOptions {
        pool: tidepool::pool::BufferPoolConfig {
            fit_ratio: 1,
            ..Default::default()
        },
        subgroups,
        ..Default::default()
    })
    .await
    .expect("a GPU context (lavapipe natively, WebGPU in the browser)")
}

/// The parity tests' context ([`context_with`]): natively a fresh one a call (tests
/// run on threads of their own, each with its device); in the browser one a test
/// binary and `subgroups`, kept across its tests. SwiftShader compiles each pipeline
/// for seconds, and the tests of a kernel compile the same ones (dropout, shapes and
/// seeds are uniforms): a fresh device a test spent most of the browser suite's time
/// compiling. The tests stay independent of what earlier ones left in the pool:
/// [`poisoned`] puts its NaN buffers on top of their buckets, which hand them out
/// first; what a kernel reads comes from fresh uploads.
pub async fn parity_context_with(subgroups: bool) -> Rc<WgpuContext> {
    #[cfg(target_arch = "wasm32")]
    {
        use std::cell::RefCell;
        thread_local! {
            static KEPT: RefCell<[Option<Rc<WgpuContext>>; 2]> = const { RefCell::new([None, None]) };
        }
        let slot = usize::from(subgroups);
        if let Some(ctx) = KEPT.with(|kept| kept.borrow()[slot].clone()) {
            return ctx;
        }
        let ctx = Rc::new(context_with(subgroups).await);
        KEPT.with(|kept| kept.borrow_mut()[slot] = Some(ctx.clone()));
        ctx
    }
    #[cfg(not(target_arch = "wasm32"))]
    Rc::new(context_with(subgroups).await)
}

/// [`parity_context_with`] the context's default: subgroups wherever the device has them.
pub async fn parity_context() -> Rc<WgpuContext> {
    parity_context_with(true).await
}

/// The contexts a test of a kernel that calls the prelude's block reductions runs
/// on, each with its name: by subgroups wherever the device has them, and by shared
/// memory everywhere. A device with subgroups whose context does not use them fails
/// the test (a test must not pass without running the variant it names where it
/// could); one without says so and runs the shared-memory variant alone.
pub async fn reduction_contexts() -> Vec<(&'static str, Rc<WgpuContext>)> {
    let ctx = parity_context_with(true).await;
    let info = ctx.adapter_info();
    // Natively what wgpu reports; in the browser what the browser's own adapter
    // says (wgpu 30 reports no subgroups there), so both are checked against the
    // context's claim.
    let offered = ctx.device_has_subgroups();
    #[cfg(not(target_arch = "wasm32"))]
    assert_eq!(
        offered,
        ctx.adapter_features().contains(wgpu::Features::SUBGROUP),
        "subgroups offered by the adapter but not on the device, or the reverse"
    );
    #[cfg(target_arch = "wasm32")]
    assert_eq!(
        offered,
        browser_offers_subgroups().await == Some(true),
        "the context's subgroups disagree with the browser's adapter"
    );
    let fits = info.subgroup_max_size <= tidepool::gpu::MAX_SUBGROUP_WIDTH;
    let mut contexts = Vec::new();
    if offered && fits {
        assert!(
            ctx.subgroups(),
            "{} offers subgroups {} to {} wide, but the context does not use them",
            ctx.adapter_name(),
            info.subgroup_min_size,
            info.subgroup_max_size
        );
        note(&format!(
            "{}: subgroups {} to {} wide: both reduction variants run",
            ctx.adapter_name(),
            info.subgroup_min_size,
            info.subgroup_max_size
        ));
        contexts.push(("subgroup reductions", ctx));
    } else {
        assert!(!ctx.subgroups(), "subgroups used where not expected");
        let why = if !offered {
            "the device does not offer subgroups".to_string()
        } else {
            format!("its subgroups are up to {} wide", info.subgroup_max_size)
        };
        note(&format!(
            "{}: {why}; the subgroup reductions are not run here, only the shared-memory ones",
            ctx.adapter_name()
        ));
    }
    let fallback = parity_context_with(false).await;
    assert!(!fallback.subgroups(), "subgroups used though turned off");
    contexts.push(("shared-memory reductions", fallback));
    contexts
}

/// `navigator.gpu`'s adapter offers `subgroups` (`None`: it could not be asked),
/// asked directly: wgpu 30's WebGPU backend reports no subgroups.
#[cfg(target_arch = "wasm32")]
async fn browser_offers_subgroups() -> Option<bool> {
    use js_sys::Reflect;
    use wasm_bindgen::JsCast;
    let get = |target: &wasm_bindgen::JsValue, key: &str| Reflect::get(target, &key.into()).ok();
    let gpu = get(&get(&js_sys::global(), "navigator")?, "gpu")?;
    let request: js_sys::Function = get(&gpu, "requestAdapter")?.dyn_into().ok()?;
    let promise: js_sys::Promise = request.call0(&gpu).ok()?.dyn_into().ok()?;
    let adapter = wasm_bindgen_futures::JsFuture::from(promise).await.ok()?;
    let features = get(&adapter, "features")?;
    let has: js_sys::Function = get(&features, "has")?.dyn_into().ok()?;
    has.call1(&features, &"subgroups".into()).ok()?.as_bool()
}

/// A seed that differs every run, for tests that draw random shapes and data; they
/// print it, and natively `TIDEPOOL_SEED=N` replays a failure with seed N.
pub fn fresh_seed() -> u64 {
    #[cfg(not(target_arch = "wasm32"))]
    if let Ok(seed) = std::env::var("TIDEPOOL_SEED") {
        return seed
            .parse()
            .unwrap_or_else(|_| panic!("TIDEPOOL_SEED={seed:?} is not a whole number"));
    }
    tidepool::rng::random_seed()
}

/// A line in the test's output: stderr natively, the console in the browser.
pub fn note(text: &str) {
    #[cfg(target_arch = "wasm32")]
    wasm_bindgen_test::console_log!("{text}");
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("{text}");
}

pub async fn read(ctx: &WgpuContext, buffer: &PooledBuffer, len: usize) -> Vec<f32> {
    ctx.download::<f32>(buffer, len).await.expect("download")
}

/// Largest |got - want| over the largest |want| (and 1e-6), with a message naming
/// the first non-finite or worst element.
pub fn max_rel_error(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len(), "length");
    if let Some(i) = got.iter().position(|x| !x.is_finite()) {
        panic!(
            "element {i} is {} (want {}): unwritten or overflowed",
            got[i], want[i]
        );
    }
    let scale = want.iter().fold(1e-6f32, |m, x| m.max(x.abs()));
    let worst = got
        .iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs())
        .fold(0.0f32, f32::max);
    worst / scale
}

#[track_caller]
pub fn assert_close(what: &str, got: &[f32], want: &[f32], tol: f32, seed: u64) {
    let err = max_rel_error(got, want);
    assert!(
        err <= tol,
        "{what}: max relative error {err:e} > {tol:e} (seed {seed}; replay natively with TIDEPOOL_SEED={seed})"
    );
}

/// [`assert_close`] measuring the error against the largest |want| or `floor`,
/// whichever is larger: an output that sums terms which can cancel far below their own
/// size carries the kernel's rounding at the terms' size, not the sum's.
#[track_caller]
pub fn assert_close_against(
    what: &str,
    got: &[f32],
    want: &[f32],
    floor: f32,
    tol: f32,
    seed: u64,
) {
    let scale = want.iter().fold(1e-6f32, |m, x| m.max(x.abs()));
    let err = max_rel_error(got, want) * scale / scale.max(floor);
    assert!(
        err <= tol,
        "{what}: max error {err:e} of max(largest output, {floor:e}) > {tol:e} (seed {seed}; replay natively with TIDEPOOL_SEED={seed})"
    );
}

/// Leaves one NaN-filled pooled buffer of each of `lens` floats on top of its
/// bucket, runs `launch`, and checks that it drew at least that many buffers from
/// the pool: the listed outputs (LIFO buckets hand them the poisoned buffers first),
/// so any element a kernel fails to write stays NaN. List outputs of one size in
/// the order the launcher creates them, last first. Scratch buffers a launcher
/// draws beyond the list may miss.
pub fn poisoned<R>(ctx: &WgpuContext, lens: &[usize], launch: impl FnOnce() -> R) -> R {
    // Held together so that two of one size are two buffers, not one reused.
    let held: Vec<_> = lens
        .iter()
        .map(|&len| ctx.upload_pooled(&vec![f32::NAN; len.max(1)]))
        .collect();
    drop(held);
    let hits = ctx.pool_stats().hits;
    let out = launch();
    assert!(
        ctx.pool_stats().hits >= hits + lens.len() as u64,
        "the outputs were not drawn from the poisoned pool"
    );
    out
}

/// The default corpus, Tiny Shakespeare, on both targets: the wasm build does not
/// embed it (the page fetches it), so the tests compile the same file in.
pub fn corpus() -> tidepool::data::Corpus {
    tidepool::data::Corpus::from_text(
        tidepool::data::BUILTIN_NAME,
        include_str!("../../data/tinyshakespeare.txt"),
    )
    .expect("the default corpus is valid")
}

//! `WgpuContext`: one device and queue, and what a context holds (its memory manager,
//! recorder, pipeline cache, timer), built from [`ContextOptions`]. Recording is
//! recording.rs, transfers transfer.rs, the device's negotiation device.rs.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use super::counters::{ContextCounters, Object, Path};
use super::device::{
    device_features, fallback_adapter_name, request_adapter, subgroup_widths_fit, timing_features,
};
use super::kernel::Kernel;
use super::lock;
use super::memory::MemoryManager;
use super::pipelines::{Compiled, Pipelines};
use super::pooled::PooledBuffer;
use super::recorder::Recorder;
use super::timing::DispatchTimer;
use crate::config::Precision;
use crate::error::{Error, Result};
use crate::pool::{BufferPool, BufferPoolConfig, BufferPoolStats};
use crate::tuning::{F16Core, Target};

/// How to build a context.
#[derive(Clone, Debug)]
pub struct ContextOptions {
    /// Limits and size policy of the pool.
    pub pool: BufferPoolConfig,
    /// `false`: every buffer is created fresh and destroyed after the submit that
    /// used it (`--no-pool`), for comparison.
    pub pooling: bool,
    /// Operands of the matmuls. `F16` needs the adapter's shader-f16 and is refused
    /// (a `config` error) without it.
    pub precision: Precision,
    /// Inside a scope, submit what has been recorded after at most this many
    /// dispatches (0: only when the outermost scope ends). A scope's work then reaches
    /// the GPU in parts, and the GPU runs the first while the host records the rest
    /// (the first part is 4 dispatches, each next one twice the last, up to this); what
    /// waits for "the scope's submit" (destroys, the staging belt, the pool's clock)
    /// still waits for the scope's end.
    pub submit_every: u32,
    /// Time every dispatch on the GPU ([`WgpuContext::dispatch_times`]); needs the
    /// adapter's timestamp-query, and gives each dispatch a compute pass of its own.
    pub time_dispatches: bool,
    /// Block reductions by subgroup operations where the device has them; `false`
    /// keeps the shared-memory ones (op parity runs both; `tidepool bench` measures
    /// a step without them).
    pub subgroups: bool,
    /// The kernels' tuning ([`Target`]): `None` picks it by adapter
    /// ([`Target::for_adapter`]); benchmarks compare both on one adapter.
    pub kernels: Option<Target>,
    /// The core of the f16 matmuls: `None` picks the tensor-core one where the
    /// device runs it. A tensor-core core named here where the device cannot run it
    /// makes the f16 matmuls panic: a test run there must not pass on the fallback.
    pub f16_core: Option<F16Core>,
    /// The f16 matmuls whose core can read an f16 copy of the weights (written once
    /// a step: [`crate::kernels::ParamArena`]) read it in place of the f32 weights:
    /// the same halves (the cores round a loaded weight to f16 anyway), half the
    /// bytes (`tidepool bench --f16-weights`). Off by default: on the H200 the
    /// tensor-core kernels that read the copy ran 1-2% slower than those reading
    /// the f32 weights, and the f16 step 0.17 ms slower (docs/precision.md).
    pub f16_weights: bool,
    /// Under `Precision::F16`, attention on tensor cores where the device runs the
    /// tensor-core GEMMs (q, k, v, the weights and ds rounded to f16, the products
    /// summed in f32; `kernels::Attention::coop_runs`); `false` keeps it in f32.
    /// On by default: on an H100 the f16 step took 18.5 ms with it against 19.8
    /// without, and its held-out loss stayed as close to f32's as f16's without it
    /// (docs/precision.md; `tidepool bench --f16-attention false` measures without).
    pub f16_attention: bool,
    /// Every storage binding `read_write`, and an operand bound twice in a dispatch
    /// bound to a stand-in the second time, in every dispatch, whatever the policy;
    /// under the planned policy also arenas planned with no regard to which
    /// tensors a dispatch reads and writes ([`crate::planner::plan_apart`]).
    /// Benchmarks only, to time that binding
    /// rule apart from the arenas (`tidepool bench policies --bindings read-write`).
    pub read_write_bindings: bool,
}

impl Default for ContextOptions {
    fn default() -> Self {
        ContextOptions {
            pool: BufferPoolConfig::default(),
            pooling: true,
            precision: Precision::F32,
            submit_every: 0,
            time_dispatches: false,
            subgroups: true,
            kernels: None,
            f16_core: None,
            f16_weights: false,
            f16_attention: true,
            read_write_bindings: false,
        }
    }
}

/// A device, its queue and the pool under every kernel.
pub struct WgpuContext {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    /// The device's limits, read once: on the web `Device::limits` reads some fifty
    /// JS getters, and launchers ask for them every step.
    limits: wgpu::Limits,
    precision: Precision,
    /// The kernels' tuning and f16 core ([`ContextOptions::kernels`],
    /// [`ContextOptions::f16_core`]).
    kernel_target: Target,
    f16_core: Option<F16Core>,
    f16_weights: bool,
    f16_attention: bool,
    pub(super) submit_every: u32,
    pub(super) timer: Option<Mutex<DispatchTimer>>,
    /// Kernels joined after the prelude reduce by subgroups ([`Self::subgroups`]).
    subgroups: bool,
    /// Every storage binding `read_write` in every dispatch, repeats bound to
    /// stand-ins ([`ContextOptions::read_write_bindings`]). Under the planned policy
    /// without it, only dispatches that read from an arena they write bind so.
    pub(super) read_write_bindings: bool,
    /// The device has subgroups (natively `Features::SUBGROUP`; in the browser the
    /// `subgroups` feature, which wgpu 30 does not report: see web_subgroups.rs).
    device_subgroups: bool,
    /// What the adapter offers (the device has only what was asked for).
    adapter_features: wgpu::Features,
    /// The adapter's cooperative-matrix configurations (empty without any).
    cooperative_matrices: Vec<wgpu::CooperativeMatrixProperties>,
    /// Every buffer of this context, and the counters.
    pub(crate) memory: Arc<MemoryManager>,
    pipelines: Pipelines,
    pub(super) recorder: Mutex<Recorder>,
    pub(crate) errors: Arc<Mutex<Vec<String>>>,
    pub(crate) lost: Arc<Mutex<Option<String>>>,
    /// The latest submit's index: natively, a readback waits for it and no later one.
    pub(super) last_submit: Mutex<Option<wgpu::SubmissionIndex>>,
    /// Kept alive as long as the device: WebGPU implementations (Dawn) lose every
    /// device of an instance once its last reference is gone.
    _instance: wgpu::Instance,
}

impl WgpuContext {
    /// A context on the default adapter with a default pool.
    pub async fn new() -> Result<Self> {
        Self::with_options(ContextOptions::default()).await
    }

    /// A context on the default adapter. Natively, `WGPU_BACKEND` (vulkan, metal,
    /// dx12) and `WGPU_ADAPTER_NAME` (a substring of the adapter's name) choose it.
    pub async fn with_options(options: ContextOptions) -> Result<Self> {
        options.pool.validate().map_err(Error::Config)?;
        // In the browser the device asks for subgroups around wgpu, which cannot.
        #[cfg(target_arch = "wasm32")]
        let web_subgroups = super::web_subgroups::Shim::install();
        let (instance, adapter) = request_adapter().await?;
        let mut info = adapter.get_info();
        if info.name.is_empty() {
            info.name = fallback_adapter_name(&info).await;
        }
        // Ask for everything the adapter offers: the default limits (128 MiB storage
        // bindings, 8 storage buffers a stage) are too small for real models.
        let limits = adapter.limits();
        let adapter_features = adapter.features();
        let cooperative_matrices = adapter.cooperative_matrix_properties();
        let required_features = device_features(options.precision, adapter_features, &info)?
            | timing_features(options.time_dispatches, adapter_features, &info)?;
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("tidepool"),
                required_features,
                required_limits: limits.clone(),
                experimental_features: if required_features
                    .contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX)
                {
                    // SAFETY: wgpu's token for features it calls experimental. Only the
                    // f16 matmul core uses cooperative matrices, and its parity test
                    // (tests/matmul_f16.rs) checks it where they exist.
                    unsafe { wgpu::ExperimentalFeatures::enabled() }
                } else {
                    wgpu::ExperimentalFeatures::disabled()
                },
                ..Default::default()
            })
            .await
            .map_err(|e| Error::RequestDevice(e.to_string()))?;

        let errors: Arc<Mutex<Vec<String>>> = Arc::default();
        let sink = errors.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            lock(&sink).push(e.to_string());
        }));
        let lost: Arc<Mutex<Option<String>>> = Arc::default();
        let sink = lost.clone();
        device.set_device_lost_callback(move |reason, message| {
            *lock(&sink) = Some(format!("{reason:?}: {message}"));
        });

        // The pool never hands out more than one binding can address.
        let mut pool_config = options.pool;
        // u64 limits: a 4 GiB limit must not truncate to 0 in wasm32's usize.
        let binding_max = limits
            .max_storage_buffer_binding_size
            .min(limits.max_buffer_size);
        pool_config.max_buffer_size = pool_config
            .max_buffer_size
            .min(usize::try_from(binding_max).unwrap_or(usize::MAX));
        // wasm32 is single-threaded (wgpu types are not Send there); natively the
        // same Arc is shared across threads.
        #[allow(clippy::arc_with_non_send_sync)]
        let memory = Arc::new(MemoryManager::new(
            device.clone(),
            pool_config,
            options.pooling,
            &limits,
            !options.read_write_bindings,
        ));
        let timer = options
            .time_dispatches
            .then(|| Mutex::new(DispatchTimer::new(&device)));
        #[cfg(target_arch = "wasm32")]
        let device_subgroups = web_subgroups.is_some_and(|shim| shim.asked());
        #[cfg(not(target_arch = "wasm32"))]
        let device_subgroups = required_features.contains(wgpu::Features::SUBGROUP);
        let subgroups = options.subgroups && device_subgroups && subgroup_widths_fit(&info);
        let kernel_target = options
            .kernels
            .unwrap_or_else(|| Target::for_adapter(&info));
        // What the device got (the adapter's, asked for in full above).
        let limits = device.limits();
        let read_write_bindings = options.read_write_bindings;
        Ok(WgpuContext {
            device,
            queue,
            info,
            limits,
            precision: options.precision,
            kernel_target,
            f16_core: options.f16_core,
            f16_weights: options.f16_weights,
            f16_attention: options.f16_attention,
            submit_every: options.submit_every,
            timer,
            subgroups,
            read_write_bindings,
            device_subgroups,
            adapter_features,
            cooperative_matrices,
            memory,
            pipelines: Pipelines::default(),
            recorder: Mutex::default(),
            errors,
            lost,
            last_submit: Mutex::new(None),
            _instance: instance,
        })
    }

    /// The adapter's name, for display ("NVIDIA H200", "llvmpipe (LLVM ...)").
    pub fn adapter_name(&self) -> &str {
        &self.info.name
    }

    /// The backend, for display ("vulkan", "metal", "dx12", "webgpu").
    pub fn backend(&self) -> &'static str {
        match self.info.backend {
            wgpu::Backend::Vulkan => "vulkan",
            wgpu::Backend::Metal => "metal",
            wgpu::Backend::Dx12 => "dx12",
            wgpu::Backend::Gl => "gl",
            wgpu::Backend::BrowserWebGpu => "webgpu",
            _ => "other",
        }
    }

    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.info
    }

    /// Whether the kernels' block reductions use subgroup operations: asked for
    /// ([`ContextOptions::subgroups`]), offered by the device, and no wider than
    /// [`super::MAX_SUBGROUP_WIDTH`].
    pub fn subgroups(&self) -> bool {
        self.subgroups
    }

    /// Whether the device has subgroup operations, used or not (in the browser
    /// wgpu's feature sets never say so; this does).
    pub fn device_has_subgroups(&self) -> bool {
        self.device_subgroups
    }

    /// Operands of the matmuls on this context ([`ContextOptions::precision`]).
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The kernels' tuning on this context ([`ContextOptions::kernels`]).
    pub fn kernel_target(&self) -> Target {
        self.kernel_target
    }

    /// The f16 matmuls' core this context forces, if any
    /// ([`ContextOptions::f16_core`]).
    pub fn f16_core(&self) -> Option<F16Core> {
        self.f16_core
    }

    /// Whether the f16 matmuls may read an f16 copy of the weights
    /// ([`ContextOptions::f16_weights`]).
    pub fn f16_weights(&self) -> bool {
        self.f16_weights
    }

    /// Whether f16 attention may run on tensor cores
    /// ([`ContextOptions::f16_attention`]).
    pub fn f16_attention(&self) -> bool {
        self.f16_attention
    }

    /// Everything the adapter offers; [`wgpu::Device::features`] is what this
    /// context asked for.
    pub fn adapter_features(&self) -> wgpu::Features {
        self.adapter_features
    }

    /// The adapter's cooperative-matrix configurations (tensor cores), usable when
    /// the device has [`wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX`].
    pub fn cooperative_matrices(&self) -> &[wgpu::CooperativeMatrixProperties] {
        &self.cooperative_matrices
    }

    /// The device's limits.
    pub fn limits(&self) -> &wgpu::Limits {
        &self.limits
    }

    /// The pool under every `PooledBuffer` of this context.
    ///
    /// The buffers its `clear`, `trim` and `evict_idle` let go are destroyed by the
    /// context at its next flush, after the submit of any commands that may still
    /// bind them; [`WgpuContext::clear_pool`], [`WgpuContext::trim_pool`] and
    /// [`WgpuContext::evict_idle`] do the same and destroy at once outside a scope.
    pub fn pool(&self) -> &BufferPool {
        self.memory.pool()
    }

    /// Whether buffers return to the pool (`false` in `--no-pool` mode).
    pub fn pooling(&self) -> bool {
        self.memory.pooling()
    }

    pub fn pool_stats(&self) -> BufferPoolStats {
        self.memory.pool().stats()
    }

    pub fn counters(&self) -> ContextCounters {
        self.memory.counters.snapshot()
    }

    /// The largest buffer one kernel binding can address on this device.
    pub fn max_binding_size(&self) -> u64 {
        let l = &self.limits;
        l.max_storage_buffer_binding_size.min(l.max_buffer_size)
    }

    /// An error if a buffer of `bytes` would not fit this device (`what` names it).
    pub fn check_fits(&self, bytes: u64, what: &str) -> Result<()> {
        let max = self.max_binding_size();
        if bytes > max {
            return Err(Error::TooLarge(format!(
                "{what} needs a {} buffer; this device binds at most {}",
                crate::fmt_bytes(bytes),
                crate::fmt_bytes(max)
            )));
        }
        Ok(())
    }

    /// A storage buffer of at least `size` bytes: from the pool when its bucket has
    /// one, else newly created. Its contents are whatever the last user left (rule 2).
    ///
    /// Under the planned policy, inside a training step ([`WgpuContext::begin_step`])
    /// it may be a planned range of an arena instead ([`PooledBuffer::slice`]).
    pub fn create_pooled(&self, size: usize) -> PooledBuffer {
        self.storage(size, true)
    }

    /// A pooled storage buffer, or a planned range where `plannable`.
    pub(crate) fn storage(&self, size: usize, plannable: bool) -> PooledBuffer {
        let size = size.max(1);
        let storage = self.memory.storage(size, plannable);
        PooledBuffer::new(storage, size, true, self.memory.clone())
    }

    /// A storage buffer of at least `size` bytes, all zero when the commands recorded
    /// after this call run: the clear is recorded in the encoder, so it is ordered and
    /// the buffer may come from and return to the pool. Never a planned range: a
    /// plan places what every kernel writes whole (rule 2).
    pub fn create_zeroed(&self, size: usize) -> PooledBuffer {
        let buffer = self.storage(size, false);
        let s = buffer.slice();
        self.record(|encoder| encoder.clear_buffer(s.buffer(), s.offset(), Some(s.size())));
        buffer
    }

    /// A training step begins: under the planned policy, its storage requests are
    /// traced (the first step, or one after the step changed) or take their planned
    /// ranges. Nothing under the other policies.
    pub fn begin_step(&self) {
        self.memory.begin_step();
    }

    /// The training step begun by [`WgpuContext::begin_step`] ended (every tensor it
    /// made and did not keep dropped). A traced step is planned here and its arenas
    /// made; when the device cannot hold the plan the pool serves every later step
    /// and [`WgpuContext::plan_refused`] says why ([`crate::plan`] refuses such a
    /// config before any GPU work).
    pub fn end_step(&self) {
        self.memory.end_step();
    }

    /// Fills the planned policy's arenas with NaN (every byte 0xFF) at the start of
    /// the next submit, so that a test shows no tensor reads a byte it did not
    /// write (rule 2). Call between steps, with nothing recorded.
    #[doc(hidden)]
    pub fn poison_arenas(&self) {
        for arena in self.memory.arenas() {
            let bytes = vec![0xFFu8; arena.size() as usize];
            self.queue.write_buffer(&arena, 0, &bytes);
        }
    }

    /// Why the planned policy fell back to the pool for good, if it did.
    pub fn plan_refused(&self) -> Option<String> {
        self.memory.plan_refused()
    }

    /// Plans the planned policy made so far (0 under the other policies).
    pub fn plans_made(&self) -> u32 {
        self.memory.plans_made()
    }

    /// Starts the peak figures of [`WgpuContext::counters`] over from now, so that
    /// they measure what follows (a steady step) and not the warm-up before it.
    pub fn reset_peaks(&self) {
        self.memory
            .counters
            .reset_peaks(self.memory.reserved_now(0));
    }

    /// The plain upload: a new buffer holding `data`, never recycled (rule 3). Data
    /// is written at creation (mapped), so it is there before any command runs.
    pub fn upload<T: bytemuck::Pod>(&self, data: &[T]) -> PooledBuffer {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let (buffer, size, written) = self.memory.upload(bytes);
        if let Err(e) = written {
            self.report(e);
        }
        let storage = super::memory::Storage {
            buffer,
            offset: 0,
            class: size,
            tag: super::planned::Tag::Pooled,
        };
        PooledBuffer::new(storage, bytes.len(), false, self.memory.clone())
    }

    /// Keeps an error for the next [`WgpuContext::take_error`].
    pub(crate) fn report(&self, error: String) {
        lock(&self.errors).push(error);
    }

    /// The compiled pipeline of `kernel`, built on first use.
    pub fn pipeline(&self, kernel: &Kernel) -> wgpu::ComputePipeline {
        self.compiled(kernel, self.read_write_bindings)
            .pipeline
            .clone()
    }

    /// The pipeline of `kernel` and its bind group layout, built on first use.
    /// `read_write`: the variant binding every storage operand `read_write`.
    pub(super) fn compiled(&self, kernel: &Kernel, read_write: bool) -> Arc<Compiled> {
        let counters = &self.memory.counters;
        let before = counters.pipelines_created.load(Relaxed);
        let compiled = (self.pipelines).get(
            &self.device,
            kernel,
            (self.subgroups, read_write),
            &counters.pipelines_created,
        );
        if counters.pipelines_created.load(Relaxed) != before {
            counters.created(Object::Pipeline, None);
        }
        compiled
    }

    /// Counts what is created until the guard drops as made for `path` (the path
    /// before comes back then): the trainer marks its training, evaluation, sampling
    /// and checkpoint work, so the counters say which one made what.
    pub fn on_path(&self, path: Path) -> PathGuard {
        PathGuard {
            before: self.memory.counters.set_path(path),
            memory: self.memory.clone(),
        }
    }

    /// Destroys the pool's free buffers: at once outside a scope, after the scope's
    /// submit inside one (commands recorded there may still bind them).
    pub fn clear_pool(&self) {
        self.memory.clear_pool();
    }

    /// Destroys free buffers, least recently released first, until the pool holds at
    /// most `target_bytes`; returns how many. Deferred like [`WgpuContext::clear_pool`].
    pub fn trim_pool(&self, target_bytes: u64) -> usize {
        self.memory.trim_pool(target_bytes)
    }

    /// Destroys free buffers idle longer than the pool's `max_idle_ticks`; returns
    /// how many. Deferred like [`WgpuContext::clear_pool`].
    pub fn evict_idle(&self) -> usize {
        self.memory.evict_idle()
    }

    /// Errors wgpu reported since the last check, and a lost device, as one `Error`.
    pub fn take_error(&self) -> Result<()> {
        take_error(&self.lost, &self.errors)
    }
}

/// [`WgpuContext::take_error`] on its two sinks (a [`super::Reading`] holds them too).
pub(crate) fn take_error(lost: &Mutex<Option<String>>, errors: &Mutex<Vec<String>>) -> Result<()> {
    if let Some(lost) = lock(lost).clone() {
        return Err(Error::DeviceLost(lost));
    }
    let errors = std::mem::take(&mut *lock(errors));
    if let Some(first) = errors.first() {
        let more = if errors.len() > 1 {
            format!(" (and {} more)", errors.len() - 1)
        } else {
            String::new()
        };
        return Err(Error::Gpu(format!("{first}{more}")));
    }
    Ok(())
}

impl Drop for WgpuContext {
    fn drop(&mut self) {
        self.flush();
        self.memory.destroy_all();
    }
}

/// Restores the path before [`WgpuContext::on_path`] when dropped (it borrows no
/// context, so the trainer stays free to record while it lives).
pub struct PathGuard {
    memory: Arc<MemoryManager>,
    before: Path,
}

impl Drop for PathGuard {
    fn drop(&mut self) {
        self.memory.counters.set_path(self.before);
    }
}

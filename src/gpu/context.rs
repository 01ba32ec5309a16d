//! `WgpuContext`: one device and queue, the command recorder (the dispatch scope)
//! and the pipeline cache. Every buffer comes from its [`MemoryManager`].

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use rustc_hash::FxHashMap;

use super::kernel::Kernel;
use super::lock;
use super::memory::{ContextCounters, MemoryManager};
use super::pooled::PooledBuffer;
use super::slice::{Bindable, Slice};
use super::timing::{DispatchTimer, DispatchTimes};
use crate::config::Precision;
use crate::error::{Error, Result};
use crate::pool::{BufferPool, BufferPoolConfig, BufferPoolStats};
use crate::trace::{StepTrace, Trace};
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
    /// keeps the shared-memory ones (op parity runs both). Natively the environment
    /// variable `TIDEPOOL_NO_SUBGROUPS=1` also turns them off (for benchmarks).
    pub subgroups: bool,
    /// The kernels' tuning ([`Target`]): `None` picks it by adapter
    /// ([`Target::for_adapter`]); benchmarks compare both on one adapter.
    pub kernels: Option<Target>,
    /// The core of the f16 matmuls: `None` picks the tensor-core one where the
    /// device runs it. A tensor-core core named here where the device cannot run it
    /// makes the f16 matmuls panic: a test run there must not pass on the fallback.
    pub f16_core: Option<F16Core>,
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
        }
    }
}

/// The command encoder being recorded, the compute pass open in it, and how deeply
/// scopes are nested.
///
/// Consecutive dispatches share one compute pass: beginning and ending a pass per
/// dispatch is host work (several calls into the browser on the web) that buys
/// nothing, since WebGPU makes every dispatch its own synchronization scope, so a
/// dispatch sees what the previous one in the same pass wrote. The pass is ended
/// before any encoder command (copy, clear) and before the submit.
#[derive(Default)]
pub(crate) struct Recorder {
    pub encoder: Option<wgpu::CommandEncoder>,
    pub pass: Option<wgpu::ComputePass<'static>>,
    pub depth: u32,
    /// Dispatches recorded since the last submit.
    pub dispatches: u32,
    /// Parts of the open scope submitted so far (`submit_every`).
    pub parts: u32,
    /// The kernel whose pipeline the open pass has set, if any: a dispatch of the same
    /// kernel skips `set_pipeline` (a WebGPU call of 1-2 us through Dawn).
    pub pipeline_set: Option<&'static str>,
    /// The open outermost scope goes out in one submit, whatever `submit_every`
    /// ([`WgpuContext::scope_in_one_submit`]).
    pub whole: bool,
}

impl Recorder {
    /// Ends the open pass, if any, and hands over the encoder.
    fn take_encoder(&mut self) -> Option<wgpu::CommandEncoder> {
        self.pass = None;
        self.dispatches = 0;
        self.encoder.take()
    }
}

/// What follows a dispatch: outside any scope it is submitted at once; inside one,
/// the scope's work so far goes out in parts of up to `submit_every` dispatches.
enum AfterDispatch {
    Record,
    SubmitPart,
    Submit,
}

/// A kernel's pipeline and its bind group layout, shared by `Arc`: on the web a
/// clone of either copies a JS reference, and every dispatch needs both.
struct Compiled {
    pipeline: wgpu::ComputePipeline,
    layout: wgpu::BindGroupLayout,
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
    submit_every: u32,
    timer: Option<Mutex<DispatchTimer>>,
    /// Kernels joined after the prelude reduce by subgroups ([`Self::subgroups`]).
    subgroups: bool,
    /// The device has subgroups (natively `Features::SUBGROUP`; in the browser the
    /// `subgroups` feature, which wgpu 30 does not report: see web_subgroups.rs).
    device_subgroups: bool,
    /// What the adapter offers (the device has only what was asked for).
    adapter_features: wgpu::Features,
    /// The adapter's cooperative-matrix configurations (empty without any).
    cooperative_matrices: Vec<wgpu::CooperativeMatrixProperties>,
    /// Every buffer of this context, and the counters.
    pub(crate) memory: Arc<MemoryManager>,
    /// Pipelines by kernel name, with their bind group layout (asked for once: on the
    /// web each `getBindGroupLayout` call makes a new object).
    pipelines: Mutex<FxHashMap<&'static str, Arc<Compiled>>>,
    recorder: Mutex<Recorder>,
    pub(crate) errors: Arc<Mutex<Vec<String>>>,
    pub(crate) lost: Arc<Mutex<Option<String>>>,
    /// The latest submit's index: natively, a readback waits for it and no later one.
    last_submit: Mutex<Option<wgpu::SubmissionIndex>>,
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
            limits.min_uniform_buffer_offset_alignment as usize,
        ));
        let timer = options
            .time_dispatches
            .then(|| Mutex::new(DispatchTimer::new(&device)));
        #[cfg(target_arch = "wasm32")]
        let device_subgroups = web_subgroups.is_some_and(|shim| shim.asked());
        #[cfg(not(target_arch = "wasm32"))]
        let device_subgroups = required_features.contains(wgpu::Features::SUBGROUP);
        let subgroups = options.subgroups
            && device_subgroups
            && subgroup_widths_fit(&info)
            && !subgroups_off_by_env();
        let kernel_target = options
            .kernels
            .unwrap_or_else(|| Target::for_adapter(&info));
        // What the device got (the adapter's, asked for in full above).
        let limits = device.limits();
        Ok(WgpuContext {
            device,
            queue,
            info,
            limits,
            precision: options.precision,
            kernel_target,
            f16_core: options.f16_core,
            submit_every: options.submit_every,
            timer,
            subgroups,
            device_subgroups,
            adapter_features,
            cooperative_matrices,
            memory,
            pipelines: Mutex::default(),
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
    /// [`crate::kernels::MAX_SUBGROUP_WIDTH`].
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
    pub fn create_pooled(&self, size: usize) -> PooledBuffer {
        let size = size.max(1);
        let (buffer, class) = self.memory.storage(size);
        PooledBuffer::new(buffer, class, size, true, self.memory.clone())
    }

    /// A storage buffer of at least `size` bytes, all zero when the commands recorded
    /// after this call run: the clear is recorded in the encoder, so it is ordered and
    /// the buffer may come from and return to the pool.
    pub fn create_zeroed(&self, size: usize) -> PooledBuffer {
        let buffer = self.create_pooled(size);
        self.record(|encoder| encoder.clear_buffer(&buffer, 0, None));
        buffer
    }

    /// The seed's upload: a new buffer holding `data`, never recycled (rule 3). Data
    /// is written at creation (mapped), so it is there before any command runs.
    pub fn upload<T: bytemuck::Pod>(&self, data: &[T]) -> PooledBuffer {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let (buffer, size, written) = self.memory.upload(bytes);
        if let Err(e) = written {
            self.report(e);
        }
        PooledBuffer::new(buffer, size, bytes.len(), false, self.memory.clone())
    }

    // ---- the allocation trace (see `crate::trace`) ------------------------------

    /// Starts recording every allocation event (off by default; see [`crate::trace`]).
    /// Returns where the pool stands now, for [`WgpuContext::finish_trace`].
    pub fn start_trace(&self) -> StepTrace {
        let pool = self.pool_stats();
        let start = StepTrace {
            in_use_at_start: self.counters().bytes_in_use,
            held_at_start: pool.bytes_held,
            free_at_start: pool.buckets,
            ..Default::default()
        };
        self.memory.trace.start();
        start
    }

    /// Stops recording; `start` (from [`WgpuContext::start_trace`]) gets the events,
    /// the step number and a label.
    pub fn finish_trace(&self, start: StepTrace, step: u32, label: &str) -> StepTrace {
        StepTrace {
            step,
            label: label.into(),
            events: self.memory.trace.stop(),
            ..start
        }
    }

    /// Whether allocation events are being recorded.
    pub fn tracing(&self) -> bool {
        self.memory.trace.on()
    }

    /// The transformer block that the coming allocations belong to (`None`: outside
    /// the blocks), for the trace. One relaxed store: call it freely.
    pub fn set_trace_layer(&self, layer: Option<usize>) {
        self.memory
            .trace
            .set_layer(layer.map(|l| l.min(u32::MAX as usize - 1) as u32));
    }

    /// Runs `make`, whose buffers the allocation trace gives to `op` (made outside a
    /// kernel launcher, they would go to the next kernel dispatched).
    pub fn allocating_as<R>(&self, op: &'static str, make: impl FnOnce() -> R) -> R {
        if !self.memory.trace.on() {
            return make();
        }
        let mark = self.memory.trace.mark();
        let made = make();
        self.memory.trace.name_births_since(mark, op);
        made
    }

    /// An empty trace file for this context's adapter and pool.
    pub fn new_trace(&self) -> Trace {
        let config = self.pool().config();
        let mut trace = Trace::new(
            self.adapter_name(),
            &config.policy.label(),
            config.max_buffer_size as u64,
        );
        trace.fit_ratio = config.fit_ratio;
        trace
    }

    /// Keeps an error for the next [`WgpuContext::take_error`].
    pub(crate) fn report(&self, error: String) {
        lock(&self.errors).push(error);
    }

    // ---- recording -----------------------------------------------------------

    /// Runs `f` with every dispatch it records going into one encoder, submitted
    /// once at the end. Scopes nest; only the outermost submits. Without a scope each
    /// dispatch is submitted on its own.
    ///
    /// Panic-safe: if `f` panics, the scope's depth is restored and, for the
    /// outermost scope, what it recorded is dropped unsubmitted (its uniform slots
    /// freed, buffers let go during it destroyed), so the context stays usable.
    pub fn scope<R>(&self, f: impl FnOnce() -> R) -> R {
        self.scope_with(false, f)
    }

    /// [`Self::scope`], submitted once at its end even with `submit_every` (when it
    /// is the outermost scope). Parts let the GPU start on a scope before the host has
    /// recorded all of it; when the GPU is still busy with earlier work (a step
    /// recorded behind another, [`crate::train::Trainer::steps`]) they buy nothing, and
    /// through Dawn each submit costs the host as much as a dozen dispatches.
    pub fn scope_in_one_submit<R>(&self, f: impl FnOnce() -> R) -> R {
        self.scope_with(true, f)
    }

    fn scope_with<R>(&self, whole: bool, f: impl FnOnce() -> R) -> R {
        /// Undoes the scope when dropped during a panic.
        struct Unwind<'a> {
            ctx: &'a WgpuContext,
            outer_depth: u32,
        }
        impl Drop for Unwind<'_> {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    self.ctx.abandon_scope(self.outer_depth);
                }
            }
        }
        let outer_depth = {
            let mut rec = lock(&self.recorder);
            if rec.depth == 0 {
                rec.whole = whole;
            }
            rec.depth += 1;
            rec.depth - 1
        };
        let unwind = Unwind {
            ctx: self,
            outer_depth,
        };
        let result = f();
        std::mem::forget(unwind);
        self.end_scope();
        result
    }

    /// A scope ended by a panic: back to `outer_depth`; at the outermost, drop the
    /// encoder unsubmitted and let the memory manager catch up.
    fn abandon_scope(&self, outer_depth: u32) {
        let dropped = {
            let mut rec = lock(&self.recorder);
            rec.depth = outer_depth;
            if outer_depth == 0 {
                rec.parts = 0;
                rec.whole = false;
                rec.take_encoder()
            } else {
                None
            }
        };
        if outer_depth == 0 {
            drop(dropped);
            self.memory.abandon_recording();
        }
    }

    pub fn begin_scope(&self) {
        lock(&self.recorder).depth += 1;
    }

    pub fn end_scope(&self) {
        let submit = {
            let mut rec = lock(&self.recorder);
            rec.depth = rec.depth.saturating_sub(1);
            rec.depth == 0
        };
        if submit {
            self.flush();
        }
    }

    /// Records one command into the open encoder (opening one if needed) and, outside
    /// any scope, submits it at once.
    pub(crate) fn record(&self, f: impl FnOnce(&mut wgpu::CommandEncoder)) {
        let auto_submit = {
            let mut rec = lock(&self.recorder);
            rec.pass = None;
            let encoder = self.open_encoder(&mut rec);
            f(encoder);
            rec.depth == 0
        };
        if auto_submit {
            self.flush();
        }
    }

    fn open_encoder<'r>(&self, rec: &'r mut Recorder) -> &'r mut wgpu::CommandEncoder {
        rec.encoder.get_or_insert_with(|| {
            self.memory.begin_recording();
            self.memory.counters.encoders_created.fetch_add(1, Relaxed);
            self.device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None })
        })
    }

    /// Dispatches `kernel` with uniform `params` (binding 0) and `buffers` (bindings
    /// 1..), over `workgroups`.
    pub fn dispatch<P: bytemuck::Pod>(
        &self,
        kernel: &Kernel,
        params: &P,
        buffers: &[&wgpu::Buffer],
        workgroups: [u32; 3],
    ) {
        self.dispatch_bound(kernel, params, buffers, workgroups)
    }

    /// [`WgpuContext::dispatch`] binding `slices` (ranges of buffers, or whole
    /// ones) at bindings 1...
    pub fn dispatch_slices<P: bytemuck::Pod>(
        &self,
        kernel: &Kernel,
        params: &P,
        slices: &[Slice],
        workgroups: [u32; 3],
    ) {
        self.dispatch_bound(kernel, params, slices, workgroups)
    }

    fn dispatch_bound<P: bytemuck::Pod, B: Bindable>(
        &self,
        kernel: &Kernel,
        params: &P,
        bound: &[B],
        workgroups: [u32; 3],
    ) {
        let compiled = self.compiled(kernel);
        let slot = self.memory.uniform_slot(bytemuck::bytes_of(params));
        let bind_group = self
            .memory
            .bind_group(kernel.name, &compiled.layout, slot, bound);
        self.memory.counters.dispatches.fetch_add(1, Relaxed);
        if self.memory.trace.on() {
            // A specialized kernel (`name#flags`) is traced under its kernel's name.
            let op = kernel.name.split('#').next().unwrap_or(kernel.name);
            self.memory.trace.dispatched(op);
        }
        let mut timer = self.timer.as_ref().map(lock);
        let timed = timer.as_mut().and_then(|t| t.next(kernel.name));
        let next = {
            let mut rec = lock(&self.recorder);
            if timed.is_some() || rec.pass.is_none() {
                // A timed dispatch gets a pass of its own whose ends write timestamps.
                rec.pass = None;
                let timestamp_writes = timed.zip(timer.as_deref()).map(|(first, timer)| {
                    wgpu::ComputePassTimestampWrites {
                        query_set: &timer.queries,
                        beginning_of_pass_write_index: Some(first),
                        end_of_pass_write_index: Some(first + 1),
                    }
                });
                let pass = self
                    .open_encoder(&mut rec)
                    .begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: None,
                        timestamp_writes,
                    })
                    .forget_lifetime();
                rec.pass = Some(pass);
                rec.pipeline_set = None;
            }
            let same_pipeline = rec.pipeline_set == Some(kernel.name);
            rec.pipeline_set = Some(kernel.name);
            let pass = rec.pass.as_mut().expect("just opened");
            if !same_pipeline {
                pass.set_pipeline(&compiled.pipeline);
            }
            pass.set_bind_group(0, &*bind_group, &[]);
            pass.dispatch_workgroups(workgroups[0], workgroups[1], workgroups[2]);
            if timed.is_some() {
                rec.pass = None;
            }
            rec.dispatches += 1;
            if rec.depth == 0 {
                AfterDispatch::Submit
            } else if self.submit_every > 0
                && !rec.whole
                && rec.dispatches >= part_size(self.submit_every, rec.parts)
            {
                AfterDispatch::SubmitPart
            } else {
                AfterDispatch::Record
            }
        };
        drop(timer);
        match next {
            AfterDispatch::Submit => self.flush(),
            AfterDispatch::SubmitPart => self.submit_part(),
            AfterDispatch::Record => {}
        }
    }

    /// The GPU time of every dispatch recorded since the last call (a context made
    /// with `time_dispatches`), in order; starts the next count. Call it outside a
    /// scope, after the work ran (a download waits for it).
    pub async fn dispatch_times(&self) -> Result<DispatchTimes> {
        let Some(timer) = &self.timer else {
            return Err(Error::Config(
                "this context does not time dispatches (ContextOptions::time_dispatches)".into(),
            ));
        };
        let (names, untimed) = {
            let mut t = lock(timer);
            (std::mem::take(&mut t.names), std::mem::take(&mut t.untimed))
        };
        if names.is_empty() {
            return Ok(DispatchTimes {
                dispatches: Vec::new(),
                untimed,
            });
        }
        let count = 2 * names.len() as u32;
        let resolved = self.memory.timestamps_buffer(u64::from(count) * 8);
        self.record(|encoder| {
            encoder.resolve_query_set(&lock(timer).queries, 0..count, &resolved, 0)
        });
        let stamps = self.download::<u64>(&resolved, count as usize).await;
        self.memory
            .retire(resolved, super::memory::Purpose::Timestamps, false);
        let ns = f64::from(self.queue.get_timestamp_period());
        let dispatches = names
            .into_iter()
            .zip(stamps?.chunks_exact(2))
            .map(|(name, pair)| (name, pair[1].saturating_sub(pair[0]) as f64 * ns / 1e6))
            .collect();
        Ok(DispatchTimes {
            dispatches,
            untimed,
        })
    }

    /// Submits what a scope has recorded so far (`submit_every`). The uniform slots'
    /// bytes go out with it (they stay taken until the scope ends); the rest of the
    /// memory manager's catching up (destroys, staging, the pool's clock) waits for
    /// the scope's end, as it would with one submit.
    fn submit_part(&self) {
        let encoder = {
            let mut rec = lock(&self.recorder);
            rec.parts += 1;
            rec.take_encoder()
        };
        if let Some(encoder) = encoder {
            self.submit(encoder);
            self.memory.counters.submits.fetch_add(1, Relaxed);
        }
    }

    /// The compiled pipeline of `kernel`, built on first use.
    pub fn pipeline(&self, kernel: &Kernel) -> wgpu::ComputePipeline {
        self.compiled(kernel).pipeline.clone()
    }

    /// The pipeline of `kernel` and its bind group layout, built on first use.
    fn compiled(&self, kernel: &Kernel) -> Arc<Compiled> {
        let mut cache = lock(&self.pipelines);
        cache
            .entry(kernel.name)
            .or_insert_with(|| {
                self.memory.counters.pipelines_created.fetch_add(1, Relaxed);
                let desc = wgpu::ShaderModuleDescriptor {
                    label: Some(kernel.name),
                    source: wgpu::ShaderSource::Wgsl(crate::kernels::source_for(
                        kernel,
                        self.subgroups,
                    )),
                };
                let module = if kernel.unchecked {
                    // SAFETY: `unchecked` kernels guard every index themselves and
                    // their launchers check buffer sizes (see `Kernel::unchecked`).
                    unsafe {
                        self.device.create_shader_module_trusted(
                            desc,
                            wgpu::ShaderRuntimeChecks::unchecked(),
                        )
                    }
                } else {
                    self.device.create_shader_module(desc)
                };
                let pipeline =
                    self.device
                        .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                            label: Some(kernel.name),
                            layout: None,
                            module: &module,
                            entry_point: Some(kernel.entry),
                            compilation_options: Default::default(),
                            cache: None,
                        });
                let layout = pipeline.get_bind_group_layout(0);
                #[allow(clippy::arc_with_non_send_sync)] // wasm32's wgpu types are not Send
                Arc::new(Compiled { pipeline, layout })
            })
            .clone()
    }

    /// Submits what has been recorded, then lets the memory manager catch up:
    /// buffers let go during recording are destroyed, used staging chunks start
    /// mapping for their next use, the pool's clock ticks (idle eviction).
    pub fn flush(&self) {
        let encoder = {
            let mut rec = lock(&self.recorder);
            rec.parts = 0;
            if rec.depth == 0 {
                rec.whole = false;
            }
            rec.take_encoder()
        };
        let submitted = encoder.is_some();
        if let Some(encoder) = encoder {
            self.submit(encoder);
        }
        self.memory.after_submit(submitted);
    }

    /// Submits `encoder` after the uniform slots' writes, and keeps its index.
    fn submit(&self, encoder: wgpu::CommandEncoder) {
        self.memory.before_submit(&self.queue);
        let index = self.queue.submit([encoder.finish()]);
        *lock(&self.last_submit) = Some(index);
    }

    /// The index of the latest submit (None before any).
    pub(crate) fn last_submit(&self) -> Option<wgpu::SubmissionIndex> {
        lock(&self.last_submit).clone()
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

/// The device features `precision` needs from an adapter offering `offered`:
/// subgroups wherever offered (the block reductions); for f16 shader-f16 (refused
/// without it), plus cooperative matrices where the adapter has them with subgroups
/// (the tensor-core matmul core).
fn device_features(
    precision: Precision,
    offered: wgpu::Features,
    info: &wgpu::AdapterInfo,
) -> Result<wgpu::Features> {
    use wgpu::Features as F;
    let subgroups = offered & F::SUBGROUP;
    match precision {
        Precision::F32 => Ok(subgroups),
        Precision::F16 if !offered.contains(F::SHADER_F16) => Err(Error::Config(format!(
            "precision f16 needs the adapter feature shader-f16 (wgpu SHADER_F16), which {} \
             ({:?}) does not offer; use precision f32",
            info.name, info.backend
        ))),
        Precision::F16 => {
            let coop = F::SUBGROUP | F::EXPERIMENTAL_COOPERATIVE_MATRIX;
            Ok(F::SHADER_F16
                | subgroups
                | if offered.contains(coop) {
                    coop
                } else {
                    F::empty()
                })
        }
    }
}

/// Dispatches in the first part of a scope (`submit_every`): each later part is twice
/// the one before, up to `submit_every`. The GPU starts after a few dispatches instead
/// of a whole part, and the host, recording twice as much while the GPU runs each
/// part, stays ahead of it. Measured against equal parts of 32 on the H200
/// (BENCHMARKS.md, round six); 4 beat 8.
const FIRST_PART: u32 = 4;

/// How many dispatches part `part` (from 0) of a scope takes before it is submitted.
fn part_size(submit_every: u32, part: u32) -> u32 {
    // In u64, so that far parts saturate instead of shifting bits out.
    let size = u64::from(FIRST_PART) << part.min(32);
    size.min(u64::from(submit_every)) as u32
}

/// How many submits a scope of `dispatches` dispatches takes with `submit_every`
/// (0: one): its parts ([`ContextOptions::submit_every`]), the last holding the rest.
pub fn scope_submits(dispatches: u64, submit_every: u32) -> u64 {
    if submit_every == 0 {
        return 1;
    }
    let (mut left, mut parts) = (dispatches, 0u32);
    loop {
        let size = u64::from(part_size(submit_every, parts));
        parts += 1;
        if left <= size {
            return u64::from(parts);
        }
        left -= size;
    }
}

/// What `time_dispatches` needs: timestamp-query (refused without it).
fn timing_features(
    wanted: bool,
    offered: wgpu::Features,
    info: &wgpu::AdapterInfo,
) -> Result<wgpu::Features> {
    use wgpu::Features as F;
    match (wanted, offered.contains(F::TIMESTAMP_QUERY)) {
        (false, _) => Ok(F::empty()),
        (true, true) => Ok(F::TIMESTAMP_QUERY),
        (true, false) => Err(Error::Config(format!(
            "timing dispatches needs the adapter feature timestamp-query (wgpu \
             TIMESTAMP_QUERY), which {} ({:?}) does not offer",
            info.name, info.backend
        ))),
    }
}

/// Whether every subgroup width the adapter may pick suits the subgroup reductions:
/// a power of two no wider than [`crate::kernels::MAX_SUBGROUP_WIDTH`].
fn subgroup_widths_fit(info: &wgpu::AdapterInfo) -> bool {
    let (min, max) = (info.subgroup_min_size, info.subgroup_max_size);
    min.is_power_of_two()
        && max.is_power_of_two()
        && min <= max
        && max <= crate::kernels::MAX_SUBGROUP_WIDTH
}

/// `TIDEPOOL_NO_SUBGROUPS` set to anything but empty or `0`: the shared-memory
/// reductions, to measure a step without the subgroup ones (`tidepool bench step`).
fn subgroups_off_by_env() -> bool {
    #[cfg(not(target_arch = "wasm32"))]
    if let Some(v) = std::env::var_os("TIDEPOOL_NO_SUBGROUPS") {
        return !v.is_empty() && v != "0";
    }
    false
}

async fn request_adapter() -> Result<(wgpu::Instance, wgpu::Adapter)> {
    #[cfg(target_arch = "wasm32")]
    if !wgpu::util::is_browser_webgpu_supported().await {
        return Err(Error::NoAdapter(crate::NO_WEBGPU.into()));
    }
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    #[cfg(not(target_arch = "wasm32"))]
    if let Ok(wanted) = std::env::var("WGPU_ADAPTER_NAME") {
        let wanted = wanted.to_lowercase();
        let adapters = instance.enumerate_adapters(wgpu::Backends::all()).await;
        let names: Vec<String> = adapters.iter().map(|a| a.get_info().name).collect();
        let adapter = adapters
            .into_iter()
            .find(|a| a.get_info().name.to_lowercase().contains(&wanted))
            .ok_or_else(|| {
                Error::NoAdapter(format!(
                    "WGPU_ADAPTER_NAME={wanted:?} matches none of {names:?}"
                ))
            })?;
        return Ok((instance, adapter));
    }
    let adapter = instance
        .request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            ..Default::default()
        })
        .await
        .map_err(|e| {
            #[cfg(target_arch = "wasm32")]
            let hint = crate::NO_WEBGPU;
            #[cfg(not(target_arch = "wasm32"))]
            let hint = "install a Vulkan, Metal or DX12 driver (on Linux without a GPU: mesa-vulkan-drivers gives lavapipe)";
            Error::NoAdapter(format!("{e}. {hint}"))
        })?;
    Ok((instance, adapter))
}

/// A display name for an adapter that reports none. Browsers leave `description`
/// empty; vendor and architecture say enough.
async fn fallback_adapter_name(info: &wgpu::AdapterInfo) -> String {
    #[cfg(target_arch = "wasm32")]
    if let Some(label) = web_adapter_label().await {
        return label;
    }
    format!("{:?} adapter", info.device_type)
}

/// "google swiftshader" and the like, from `GPUAdapterInfo` (wgpu maps only the
/// description, which browsers usually leave empty).
#[cfg(target_arch = "wasm32")]
async fn web_adapter_label() -> Option<String> {
    use js_sys::Reflect;
    use wasm_bindgen::JsCast;
    let get = |target: &wasm_bindgen::JsValue, key: &str| Reflect::get(target, &key.into()).ok();
    let gpu = get(&get(&js_sys::global(), "navigator")?, "gpu")?;
    let request: js_sys::Function = get(&gpu, "requestAdapter")?.dyn_into().ok()?;
    let promise: js_sys::Promise = request.call0(&gpu).ok()?.dyn_into().ok()?;
    let adapter = wasm_bindgen_futures::JsFuture::from(promise).await.ok()?;
    let info = get(&adapter, "info")?;
    let parts: Vec<String> = ["vendor", "architecture", "device", "description"]
        .iter()
        .filter_map(|key| get(&info, key)?.as_string())
        .filter(|s| !s.is_empty())
        .collect();
    (!parts.is_empty()).then(|| parts.join(" "))
}

#[cfg(test)]
mod tests {
    use super::{device_features, part_size, Precision};
    use wgpu::Features as F;

    #[test]
    fn parts_start_at_four_dispatches_and_double_up_to_submit_every() {
        let sizes = |every| {
            (0..8)
                .map(|part| part_size(every, part))
                .collect::<Vec<_>>()
        };
        assert_eq!(sizes(32), [4, 8, 16, 32, 32, 32, 32, 32]);
        assert_eq!(sizes(20), [4, 8, 16, 20, 20, 20, 20, 20]);
        assert_eq!(sizes(3), [3; 8]);
        assert_eq!(sizes(1), [1; 8]);
        // Far parts of a huge submit_every neither overflow nor pass it.
        assert_eq!(part_size(u32::MAX, 40), u32::MAX);
        assert_eq!(part_size(1 << 20, 31), 1 << 20);
    }

    #[test]
    fn a_scope_is_submitted_in_as_many_parts_as_its_sizes_take() {
        use super::scope_submits;
        assert_eq!(scope_submits(0, 32), 1);
        assert_eq!(scope_submits(4, 32), 1);
        assert_eq!(scope_submits(5, 32), 2);
        assert_eq!(scope_submits(28, 32), 3);
        assert_eq!(scope_submits(29, 32), 4);
        assert_eq!(scope_submits(60, 32), 4);
        assert_eq!(scope_submits(61, 32), 5);
        assert_eq!(scope_submits(40, 3), 14);
        assert_eq!(scope_submits(1_000, 0), 1);
    }

    fn adapter() -> wgpu::AdapterInfo {
        wgpu::AdapterInfo {
            name: "some gpu".into(),
            vendor: 0,
            device: 0,
            device_type: wgpu::DeviceType::DiscreteGpu,
            device_pci_bus_id: String::new(),
            driver: String::new(),
            driver_info: String::new(),
            backend: wgpu::Backend::Vulkan,
            subgroup_min_size: 32,
            subgroup_max_size: 32,
            transient_saves_memory: None,
            limit_bucket: None,
        }
    }

    #[test]
    fn f16_asks_for_what_the_adapter_has_and_is_refused_without_shader_f16() {
        let info = adapter();
        let coop = F::SUBGROUP | F::EXPERIMENTAL_COOPERATIVE_MATRIX;
        let all = F::SHADER_F16 | coop;
        assert_eq!(device_features(Precision::F16, all, &info).unwrap(), all);
        assert_eq!(
            device_features(Precision::F16, F::SHADER_F16 | F::SUBGROUP, &info).unwrap(),
            F::SHADER_F16 | F::SUBGROUP
        );
        assert_eq!(
            device_features(
                Precision::F16,
                F::SHADER_F16 | F::EXPERIMENTAL_COOPERATIVE_MATRIX,
                &info
            )
            .unwrap(),
            F::SHADER_F16
        );
        for offered in [F::empty(), coop] {
            let e = device_features(Precision::F16, offered, &info).unwrap_err();
            assert_eq!(e.kind(), "config");
            let text = e.to_string();
            assert!(
                text.contains("shader-f16") && text.contains("some gpu"),
                "{text}"
            );
        }
    }

    #[test]
    fn subgroups_are_asked_for_wherever_offered() {
        let info = adapter();
        for precision in [Precision::F32, Precision::F16] {
            let offered = F::SHADER_F16 | F::SUBGROUP;
            let got = device_features(precision, offered, &info).unwrap();
            assert!(got.contains(F::SUBGROUP), "{precision:?}: {got:?}");
            let got = device_features(precision, F::SHADER_F16, &info).unwrap();
            assert!(!got.contains(F::SUBGROUP), "{precision:?}: {got:?}");
        }
        assert_eq!(
            device_features(Precision::F32, F::EXPERIMENTAL_COOPERATIVE_MATRIX, &info).unwrap(),
            F::empty()
        );
    }

    #[test]
    fn subgroup_reductions_need_power_of_two_widths_up_to_the_smallest_workgroup() {
        let widths = |min, max| {
            super::subgroup_widths_fit(&wgpu::AdapterInfo {
                subgroup_min_size: min,
                subgroup_max_size: max,
                ..adapter()
            })
        };
        assert!(widths(32, 32) && widths(4, 128) && widths(8, 8) && widths(1, 64));
        assert!(!widths(0, 0) && !widths(32, 256) && !widths(24, 24) && !widths(64, 32));
    }
}

//! `WgpuContext`: one device and queue, the buffer pool under every kernel, a
//! pipeline cache, the dispatch scope and the counters that show what the pool saved.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

use super::kernel::{Kernel, ParamsArena};
use super::pooled::PooledBuffer;
use super::transfer::{Readback, StagingBelt};
use crate::error::{Error, Result};
use crate::pool::{BufferPool, BufferPoolConfig, BufferPoolStats};

/// Usage of every pooled buffer: bound as storage, copied in and out, cleared.
pub(crate) const POOLED_USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);

/// How to build a context.
#[derive(Clone, Debug)]
pub struct ContextOptions {
    /// Limits and size policy of the pool.
    pub pool: BufferPoolConfig,
    /// `false`: every buffer is created fresh and destroyed after the submit that
    /// used it (`--no-pool`), for comparison.
    pub pooling: bool,
}

impl Default for ContextOptions {
    fn default() -> Self {
        ContextOptions {
            pool: BufferPoolConfig::default(),
            pooling: true,
        }
    }
}

/// The context's own counters, next to the pool's [`BufferPoolStats`].
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct ContextCounters {
    /// Compute dispatches recorded.
    pub dispatches: u64,
    /// Queue submits.
    pub submits: u64,
    /// GPU buffers this context created, of every kind (pooled, uploads, staging,
    /// kernel parameters). Flat in steady state means the pool is doing its job.
    pub buffers_created: u64,
    /// Their bytes.
    pub bytes_created: u64,
    /// Buffers the context destroyed (not pooled, or rejected by the pool).
    pub buffers_destroyed: u64,
    /// Bytes of live `PooledBuffer`s (their size classes) now.
    pub bytes_in_use: u64,
    /// The most `bytes_in_use` has been.
    pub peak_bytes_in_use: u64,
    /// Bytes the live `PooledBuffer`s asked for (before rounding) now.
    pub bytes_requested_in_use: u64,
    /// The most `bytes_requested_in_use` has been.
    pub peak_bytes_requested_in_use: u64,
    /// The most GPU memory the pooled buffers have taken at once: in use plus held
    /// free by the pool. `peak_bytes_reserved / peak_bytes_requested_in_use` is what a
    /// size policy costs.
    pub peak_bytes_reserved: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub dispatches: AtomicU64,
    pub submits: AtomicU64,
    pub buffers_created: AtomicU64,
    pub bytes_created: AtomicU64,
    pub buffers_destroyed: AtomicU64,
    pub bytes_in_use: AtomicU64,
    pub peak_bytes_in_use: AtomicU64,
    pub bytes_requested_in_use: AtomicU64,
    pub peak_bytes_requested_in_use: AtomicU64,
    pub peak_bytes_reserved: AtomicU64,
}

/// What a `PooledBuffer` needs to find its way home: the pool, the counters, and
/// the list of buffers to destroy once the commands that use them are submitted.
pub(crate) struct Shared {
    pub pool: BufferPool,
    pub pooling: bool,
    pub counters: Counters,
    /// Set while an encoder is open: buffers let go then may still be referenced by
    /// its commands, so their `destroy` waits for the submit.
    pub recording: AtomicBool,
    pub graveyard: Mutex<Vec<wgpu::Buffer>>,
}

impl Shared {
    /// Lets a buffer go for good (rule 4): destroy now, or after the open encoder's submit.
    pub fn retire(&self, buffer: wgpu::Buffer) {
        self.counters.buffers_destroyed.fetch_add(1, Relaxed);
        if self.recording.load(Relaxed) {
            lock(&self.graveyard).push(buffer);
        } else {
            buffer.destroy();
        }
    }

    pub fn note_in_use(&self, class: usize, requested: usize) {
        let c = &self.counters;
        let now = c.bytes_in_use.fetch_add(class as u64, Relaxed) + class as u64;
        c.peak_bytes_in_use.fetch_max(now, Relaxed);
        let now = c
            .bytes_requested_in_use
            .fetch_add(requested as u64, Relaxed)
            + requested as u64;
        c.peak_bytes_requested_in_use.fetch_max(now, Relaxed);
    }

    pub fn note_released(&self, class: usize, requested: usize) {
        let c = &self.counters;
        c.bytes_in_use.fetch_sub(class as u64, Relaxed);
        c.bytes_requested_in_use
            .fetch_sub(requested as u64, Relaxed);
    }

    pub fn note_created(&self, bytes: u64) {
        self.counters.buffers_created.fetch_add(1, Relaxed);
        self.counters.bytes_created.fetch_add(bytes, Relaxed);
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The command encoder being recorded, and how deeply scopes are nested.
#[derive(Default)]
pub(crate) struct Recorder {
    pub encoder: Option<wgpu::CommandEncoder>,
    pub depth: u32,
}

/// A device, its queue and the pool under every kernel.
pub struct WgpuContext {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    pub(crate) shared: Arc<Shared>,
    /// Pipelines by kernel name, with their bind group layout (asked for once: on the
    /// web each `getBindGroupLayout` call makes a new object).
    pipelines: Mutex<HashMap<&'static str, (wgpu::ComputePipeline, wgpu::BindGroupLayout)>>,
    pub(crate) recorder: Mutex<Recorder>,
    pub(crate) params: Mutex<ParamsArena>,
    pub(crate) belt: StagingBelt,
    pub(crate) readback: Readback,
    errors: Arc<Mutex<Vec<String>>>,
    lost: Arc<Mutex<Option<String>>>,
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
        let (instance, adapter) = request_adapter().await?;
        let mut info = adapter.get_info();
        if info.name.is_empty() {
            info.name = fallback_adapter_name(&info).await;
        }
        // Ask for everything the adapter offers: the default limits (128 MiB storage
        // bindings, 8 storage buffers a stage) are too small for real models.
        let limits = adapter.limits();
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("tidepool"),
                required_features: wgpu::Features::empty(),
                required_limits: limits.clone(),
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
        let shared = Arc::new(Shared {
            pool: BufferPool::new(pool_config),
            pooling: options.pooling,
            counters: Counters::default(),
            recording: AtomicBool::new(false),
            graveyard: Mutex::default(),
        });
        let params = ParamsArena::new(limits.min_uniform_buffer_offset_alignment as usize);
        Ok(WgpuContext {
            device,
            queue,
            info,
            belt: StagingBelt::default(),
            readback: Readback::default(),
            shared,
            pipelines: Mutex::default(),
            recorder: Mutex::default(),
            params: Mutex::new(params),
            errors,
            lost,
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

    pub fn limits(&self) -> wgpu::Limits {
        self.device.limits()
    }

    /// The pool under every `PooledBuffer` of this context.
    pub fn pool(&self) -> &BufferPool {
        &self.shared.pool
    }

    /// Whether buffers return to the pool (`false` in `--no-pool` mode).
    pub fn pooling(&self) -> bool {
        self.shared.pooling
    }

    pub fn pool_stats(&self) -> BufferPoolStats {
        self.shared.pool.stats()
    }

    pub fn counters(&self) -> ContextCounters {
        let c = &self.shared.counters;
        ContextCounters {
            dispatches: c.dispatches.load(Relaxed),
            submits: c.submits.load(Relaxed),
            buffers_created: c.buffers_created.load(Relaxed),
            bytes_created: c.bytes_created.load(Relaxed),
            buffers_destroyed: c.buffers_destroyed.load(Relaxed),
            bytes_in_use: c.bytes_in_use.load(Relaxed),
            peak_bytes_in_use: c.peak_bytes_in_use.load(Relaxed),
            bytes_requested_in_use: c.bytes_requested_in_use.load(Relaxed),
            peak_bytes_requested_in_use: c.peak_bytes_requested_in_use.load(Relaxed),
            peak_bytes_reserved: c.peak_bytes_reserved.load(Relaxed),
        }
    }

    /// The largest buffer one kernel binding can address on this device.
    pub fn max_binding_size(&self) -> u64 {
        let l = self.device.limits();
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
        let shared = &self.shared;
        let class = shared.pool.size_class(size);
        let reused = if shared.pooling {
            shared.pool.acquire(size)
        } else {
            None
        };
        let created = reused.is_none();
        let buffer = reused.unwrap_or_else(|| self.create_buffer(class as u64, POOLED_USAGE));
        let buffer = PooledBuffer::new(buffer, class, size, true, shared.clone());
        if created {
            // Memory reserved (in use + held free) only grows when a buffer is made.
            let reserved = shared.counters.bytes_in_use.load(Relaxed) + shared.pool.bytes_held();
            shared
                .counters
                .peak_bytes_reserved
                .fetch_max(reserved, Relaxed);
        }
        buffer
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
        let size = bytes.len().max(4).div_ceil(4) * 4;
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tidepool upload"),
            size: size as u64,
            usage: POOLED_USAGE,
            mapped_at_creation: true,
        });
        self.shared.note_created(size as u64);
        self.write_mapped(&buffer, size as u64, bytes);
        PooledBuffer::new(buffer, size, bytes.len(), false, self.shared.clone())
    }

    /// Copies `bytes` into a buffer mapped for writing (its first `len` bytes) and
    /// unmaps it. `false` (and an error for the next [`WgpuContext::take_error`])
    /// when it cannot be mapped, which happens once the device is lost.
    pub(crate) fn write_mapped(&self, buffer: &wgpu::Buffer, len: u64, bytes: &[u8]) -> bool {
        match buffer.slice(..len).get_mapped_range_mut() {
            Ok(mut view) => view.slice(..bytes.len()).copy_from_slice(bytes),
            Err(e) => {
                lock(&self.errors).push(format!("could not write an upload: {e}"));
                return false;
            }
        }
        buffer.unmap();
        true
    }

    pub(crate) fn create_buffer(&self, size: u64, usage: wgpu::BufferUsages) -> wgpu::Buffer {
        self.shared.note_created(size);
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tidepool"),
            size,
            usage,
            mapped_at_creation: false,
        })
    }

    // ---- recording -----------------------------------------------------------

    /// Runs `f` with every dispatch it records going into one encoder, submitted
    /// once at the end. Scopes nest; only the outermost submits. Without a scope each
    /// dispatch is submitted on its own.
    pub fn scope<R>(&self, f: impl FnOnce() -> R) -> R {
        self.begin_scope();
        let result = f();
        self.end_scope();
        result
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
            let encoder = rec.encoder.get_or_insert_with(|| {
                self.shared.recording.store(true, Relaxed);
                self.device
                    .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None })
            });
            f(encoder);
            rec.depth == 0
        };
        if auto_submit {
            self.flush();
        }
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
        let (pipeline, layout) = self.compiled(kernel);
        let (params_buffer, offset, size) =
            lock(&self.params).push(self, bytemuck::bytes_of(params));
        let mut entries = Vec::with_capacity(buffers.len() + 1);
        entries.push(wgpu::BindGroupEntry {
            binding: 0,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: &params_buffer,
                offset,
                size: Some(size),
            }),
        });
        for (i, buffer) in buffers.iter().enumerate() {
            entries.push(wgpu::BindGroupEntry {
                binding: i as u32 + 1,
                resource: buffer.as_entire_binding(),
            });
        }
        let bind_group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(kernel.name),
            layout: &layout,
            entries: &entries,
        });
        self.shared.counters.dispatches.fetch_add(1, Relaxed);
        self.record(|encoder| {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some(kernel.name),
                timestamp_writes: None,
            });
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &bind_group, &[]);
            pass.dispatch_workgroups(workgroups[0], workgroups[1], workgroups[2]);
        });
    }

    /// The compiled pipeline of `kernel`, built on first use.
    pub fn pipeline(&self, kernel: &Kernel) -> wgpu::ComputePipeline {
        self.compiled(kernel).0
    }

    /// The pipeline of `kernel` and its bind group layout, built on first use.
    fn compiled(&self, kernel: &Kernel) -> (wgpu::ComputePipeline, wgpu::BindGroupLayout) {
        let mut cache = lock(&self.pipelines);
        cache
            .entry(kernel.name)
            .or_insert_with(|| {
                let desc = wgpu::ShaderModuleDescriptor {
                    label: Some(kernel.name),
                    source: wgpu::ShaderSource::Wgsl(kernel.source.into()),
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
                (pipeline, layout)
            })
            .clone()
    }

    /// Submits what has been recorded, then lets the pool and the belt catch up:
    /// the pool's clock ticks (idle eviction), buffers let go during recording are
    /// destroyed, and used staging chunks start mapping for their next use.
    pub fn flush(&self) {
        let encoder = {
            let mut rec = lock(&self.recorder);
            let encoder = rec.encoder.take();
            self.shared.recording.store(false, Relaxed);
            encoder
        };
        let Some(encoder) = encoder else { return };
        lock(&self.params).write(&self.queue);
        self.queue.submit([encoder.finish()]);
        self.shared.counters.submits.fetch_add(1, Relaxed);
        for buffer in std::mem::take(&mut *lock(&self.shared.graveyard)) {
            buffer.destroy();
        }
        self.belt.recall();
        self.shared.pool.tick();
        self.shared.pool.evict_idle();
    }

    /// Destroys the pool's free buffers now. Submits first, since buffers released
    /// during recording may still be used by the open encoder.
    pub fn clear_pool(&self) {
        self.flush();
        self.shared.pool.clear();
    }

    /// Waits for the GPU natively; the browser needs no polling.
    pub(crate) fn poll_wait(&self) {
        #[cfg(not(target_arch = "wasm32"))]
        {
            let _ = self.device.poll(wgpu::PollType::wait_indefinitely());
        }
    }

    /// Errors wgpu reported since the last check, and a lost device, as one `Error`.
    pub fn take_error(&self) -> Result<()> {
        if let Some(lost) = lock(&self.lost).clone() {
            return Err(Error::DeviceLost(lost));
        }
        let errors = std::mem::take(&mut *lock(&self.errors));
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
}

impl Drop for WgpuContext {
    fn drop(&mut self) {
        self.flush();
        self.shared.pool.clear();
    }
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

//! The memory manager: the one component under every GPU buffer of a context.
//!
//! It owns the pool (pooled storage), the staging belt and readback buffers, the
//! uniform-parameter arena, the counters, and the list of buffers waiting for a
//! submit before they are destroyed. Every buffer is made by [`MemoryManager::create`]
//! and let go by [`MemoryManager::retire`], so "created" and "destroyed" are counted
//! by construction, whatever path asked.

use std::sync::atomic::AtomicU64 as IdCounter;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use rustc_hash::FxHashMap;

use super::bind_groups::BindGroupCache;
use super::counters::{Counters, Object};
use super::lock;
use super::planned::{StepPlans, Tag};
pub(crate) use super::purpose::Purpose;
use super::slice::Bindable;
use super::staging::{Readback, StagingBelt};
use super::uniforms::{UniformArena, CHUNK_BYTES};
use crate::pool::{BufferPool, BufferPoolConfig, LetGo, Rejection};
use crate::trace::{EventKind, Fields, Recorder};

/// Bytes of one stand-in range (WebGPU's largest `minStorageBufferOffsetAlignment`),
/// and ranges in the stand-in buffer (more than a kernel has bindings): see
/// [`MemoryManager::stand_in`].
pub(super) const STAND_IN_SLOT: u64 = 256;
pub(super) const STAND_IN_SLOTS: u64 = 32;

/// Owns every GPU buffer of a context; see the module docs.
pub(crate) struct MemoryManager {
    device: wgpu::Device,
    pub(super) pool: BufferPool,
    pooling: bool,
    pub counters: Counters,
    /// Set while an encoder is open: buffers let go then may still be referenced by
    /// its commands, so their `destroy` waits for the submit.
    recording: AtomicBool,
    graveyard: Mutex<Vec<wgpu::Buffer>>,
    belt: StagingBelt,
    readback: Readback,
    uniforms: Mutex<UniformArena>,
    bind_groups: Mutex<BindGroupCache>,
    /// Stable ids of the live GPU buffers, from 1 in creation order (for the trace).
    ids: Mutex<FxHashMap<wgpu::Buffer, u64>>,
    next_id: IdCounter,
    pub trace: Recorder,
    /// What a dispatch binds for a repeated operand under the planned policy (made on
    /// first use; see `recording.rs`).
    stand_in: std::sync::OnceLock<wgpu::Buffer>,
    /// The planned policy's plans (`None` under the other policies; memory_plans.rs).
    pub(super) plans: Option<StepPlans>,
}

/// A storage request served: the buffer (an arena for a planned one), the range of
/// it the tensor holds (its size: the size class, or the planned range's bytes),
/// and what its drop reports.
pub(crate) struct Storage {
    pub buffer: wgpu::Buffer,
    pub offset: u64,
    pub class: usize,
    pub tag: Tag,
}

impl MemoryManager {
    pub fn new(
        device: wgpu::Device,
        pool: BufferPoolConfig,
        pooling: bool,
        limits: &wgpu::Limits,
        plans_apart: bool,
    ) -> Self {
        let uniform_align = limits.min_uniform_buffer_offset_alignment as usize;
        let plans = (pooling && pool.policy == crate::pool::SizePolicy::Planned).then(|| {
            let limits = crate::planner::Limits {
                offset_alignment: u64::from(limits.min_storage_buffer_offset_alignment).max(4),
                max_arena_bytes: limits
                    .max_storage_buffer_binding_size
                    .min(limits.max_buffer_size),
            };
            StepPlans::new(limits, plans_apart)
        });
        let pool = BufferPool::new(pool);
        // Everything the pool lets go comes back here to be destroyed at a safe time.
        pool.hold_destroys(true);
        MemoryManager {
            device,
            pool,
            pooling,
            counters: Counters::default(),
            recording: AtomicBool::new(false),
            graveyard: Mutex::default(),
            belt: StagingBelt::default(),
            readback: Readback::default(),
            uniforms: Mutex::new(UniformArena::new(uniform_align)),
            bind_groups: Mutex::default(),
            ids: Mutex::default(),
            next_id: IdCounter::new(1),
            trace: Recorder::default(),
            stand_in: std::sync::OnceLock::new(),
            plans,
        }
    }

    /// A small storage buffer bound where a dispatch that binds everything
    /// `read_write` repeats an operand it does not read.
    pub fn stand_in(&self) -> &wgpu::Buffer {
        self.stand_in.get_or_init(|| {
            let bytes = STAND_IN_SLOT * STAND_IN_SLOTS;
            self.create(bytes, Purpose::Storage)
        })
    }

    /// A range of the stand-in buffer for a binding its kernel checks before reading
    /// (a vec4 view of an operand too small to hold one vec4): the last range, which
    /// repeats replaced by stand-ins (fewer than a kernel has bindings) never reach.
    pub fn unread_range(&self) -> super::Slice<'_> {
        let size = std::num::NonZeroU64::new(STAND_IN_SLOT).expect("non-zero");
        super::Slice::range(self.stand_in(), (STAND_IN_SLOTS - 1) * STAND_IN_SLOT, size)
    }

    /// Whether storage requests of training steps take planned ranges.
    pub fn planned(&self) -> bool {
        self.plans.is_some()
    }

    pub fn pool(&self) -> &BufferPool {
        &self.pool
    }

    pub fn pooling(&self) -> bool {
        self.pooling
    }

    /// A buffer to resolve `size` bytes of timestamp queries into; the caller
    /// retires it (`retire(.., Purpose::Timestamps, false)`) once read.
    pub fn timestamps_buffer(&self, size: u64) -> wgpu::Buffer {
        self.create(size, Purpose::Timestamps)
    }

    /// The one place a GPU buffer is created, and counted.
    pub(super) fn create(&self, size: u64, purpose: Purpose) -> wgpu::Buffer {
        self.counters.buffers_created.fetch_add(1, Relaxed);
        (self.counters).created(Object::Buffer, Some(purpose as usize));
        self.counters.bytes_created.fetch_add(size, Relaxed);
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(purpose.label()),
            size,
            usage: purpose.usage(),
            mapped_at_creation: purpose.mapped(),
        });
        let id = self.next_id.fetch_add(1, Relaxed);
        lock(&self.ids).insert(buffer.clone(), id);
        self.event((EventKind::Create, purpose), (size, size), &buffer, None, 0);
        buffer
    }

    /// The buffer's stable id (0 for one this manager did not make).
    pub(super) fn id(&self, buffer: &wgpu::Buffer) -> u64 {
        lock(&self.ids).get(buffer).copied().unwrap_or(0)
    }

    /// Records a trace event when tracing: `sizes` is the bytes requested and the
    /// size class; `pending` is added to `in_use` (a birth recorded before its
    /// `PooledBuffer` counts itself).
    pub(super) fn event(
        &self,
        (kind, purpose): (EventKind, Purpose),
        (requested, class): (u64, u64),
        buffer: &wgpu::Buffer,
        cause: Option<Rejection>,
        pending: u64,
    ) {
        self.record_event(
            (kind, purpose),
            (requested, class),
            (buffer, None),
            cause,
            pending,
        );
    }

    /// [`MemoryManager::event`] of a tensor at a planned range: `offset` bytes into
    /// the arena `buffer`.
    pub(super) fn event_in_arena(
        &self,
        kind: EventKind,
        sizes: (u64, u64),
        (arena, offset): (&wgpu::Buffer, u64),
        pending: u64,
    ) {
        let kind = (kind, Purpose::Storage);
        self.record_event(kind, sizes, (arena, Some(offset)), None, pending);
    }

    fn record_event(
        &self,
        (kind, purpose): (EventKind, Purpose),
        (requested, class): (u64, u64),
        (buffer, offset): (&wgpu::Buffer, Option<u64>),
        cause: Option<Rejection>,
        pending: u64,
    ) {
        if !self.trace.on() {
            return;
        }
        self.trace.record(Fields {
            kind,
            purpose: purpose.label(),
            requested,
            class,
            buffer: self.id(buffer),
            offset,
            cause,
            in_use: self.counters.bytes_in_use.load(Relaxed) + pending,
            held: self.pool.bytes_held(),
        });
    }

    /// Lets a buffer go for good (rule 4): destroy now, or after the open encoder's
    /// submit.
    pub fn retire(&self, buffer: wgpu::Buffer, purpose: Purpose, evicted: bool) {
        self.counters.buffers_destroyed.fetch_add(1, Relaxed);
        let kind = if evicted {
            EventKind::Evict
        } else {
            EventKind::Destroy
        };
        let size = buffer.size();
        if purpose == Purpose::Readback {
            self.readback.note_gone(size);
        }
        self.event((kind, purpose), (size, size), &buffer, None, 0);
        lock(&self.ids).remove(&buffer);
        lock(&self.bind_groups).forget(&buffer);
        if self.recording.load(Relaxed) {
            lock(&self.graveyard).push(buffer);
        } else {
            buffer.destroy();
        }
    }

    /// Retires what the pool let go (clear, trim, idle eviction).
    fn retire_let_go(&self) {
        for LetGo {
            buffer, evicted, ..
        } in self.pool.take_held()
        {
            self.retire(buffer, Purpose::Storage, evicted);
        }
    }

    // ---- pooled storage --------------------------------------------------------

    /// A storage buffer for a request of `size` bytes (at least 1) and its size:
    /// from the pool when it has a free one of the request's class, or of a larger
    /// class within the pool's `fit_ratio` ([`BufferPool::take`]), else newly created
    /// at the request's class. The caller wraps it in a `PooledBuffer`, which counts
    /// its whole size in use (a fitted buffer counts as the larger size it is).
    pub(super) fn pooled_storage(&self, size: usize) -> (wgpu::Buffer, usize) {
        let (reused, class) = if self.pooling {
            // By creation order (see `take_ranked`): the bind groups a step caches
            // name the buffers it is handed.
            let ids = lock(&self.ids);
            let rank = |b: &wgpu::Buffer| ids.get(b).copied().unwrap_or(u64::MAX);
            match self.pool.take_ranked(size, rank) {
                Ok((buffer, class)) => (Some(buffer), class),
                Err(class) => (None, class),
            }
        } else {
            (None, self.pool.size_class(size))
        };
        let created = reused.is_none();
        let buffer = reused.unwrap_or_else(|| self.create(class as u64, Purpose::Storage));
        if self.trace.on() {
            let kind = if !self.pooling {
                EventKind::Unpooled
            } else if !created {
                EventKind::Hit
            } else if class > self.pool.config().max_buffer_size {
                EventKind::Oversize
            } else {
                EventKind::Miss
            };
            let (req, cls) = (size as u64, class as u64);
            self.event((kind, Purpose::Storage), (req, cls), &buffer, None, cls);
        }
        if created {
            // Memory reserved (in use + held free) only grows when a buffer is made.
            self.counters.note_reserved(self.reserved_now(class as u64));
        }
        (buffer, class)
    }

    /// A new storage buffer of `bytes.len()` rounded up to 4, holding `bytes`
    /// (written while mapped at creation), and its size; for a `PooledBuffer` that is
    /// never recycled (rule 3). `Err` when it cannot be mapped, which happens once
    /// the device is lost.
    pub fn upload(&self, bytes: &[u8]) -> (wgpu::Buffer, usize, Result<(), String>) {
        let size = bytes.len().max(4).div_ceil(4) * 4;
        let buffer = self.create(size as u64, Purpose::Upload);
        let (req, cls) = (bytes.len() as u64, size as u64);
        let kind = (EventKind::Unpooled, Purpose::Upload);
        self.event(kind, (req, cls), &buffer, None, cls);
        let written = write_mapped(&buffer, size as u64, bytes);
        (buffer, size, written)
    }

    /// A `PooledBuffer` came home: its planned range free again, or back to the
    /// pool, or destroyed.
    pub fn release(
        &self,
        (buffer, offset): (wgpu::Buffer, u64),
        (class, len): (usize, usize),
        recycle: bool,
        tag: Tag,
    ) {
        self.note_released(class, len);
        if let Some(plans) = &self.plans {
            if let Tag::Planned { .. } = tag {
                self.counters
                    .planned_bytes_in_use
                    .fetch_sub(class as u64, Relaxed);
                let (req, cls) = (len as u64, class as u64);
                self.event_in_arena(EventKind::Release, (req, cls), (&buffer, offset), 0);
                let retired = plans.release(tag, &buffer);
                self.retire_arenas(retired);
                return;
            }
            plans.release(tag, &buffer);
        }
        let (req, cls) = (len as u64, class as u64);
        let purpose = if recycle {
            Purpose::Storage
        } else {
            Purpose::Upload
        };
        if recycle && self.pooling {
            let id = self.trace.on().then(|| buffer.clone());
            match self.pool.offer(buffer, class) {
                Ok(()) => {
                    if let Some(b) = id {
                        self.event((EventKind::Release, purpose), (req, cls), &b, None, 0);
                    }
                }
                Err((buffer, cause)) => {
                    let kind = (EventKind::Reject, purpose);
                    self.event(kind, (req, cls), &buffer, Some(cause), 0);
                    self.retire(buffer, purpose, false);
                }
            }
        } else {
            self.event((EventKind::Discard, purpose), (req, cls), &buffer, None, 0);
            self.retire(buffer, purpose, false);
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

    fn note_released(&self, class: usize, requested: usize) {
        let c = &self.counters;
        c.bytes_in_use.fetch_sub(class as u64, Relaxed);
        c.bytes_requested_in_use
            .fetch_sub(requested as u64, Relaxed);
    }

    // ---- staging, readback, uniforms ---------------------------------------------

    /// A mapped upload staging chunk of `class` bytes (see `staging_class`).
    pub fn staging_chunk(&self, class: u64) -> wgpu::Buffer {
        self.belt
            .take(class)
            .unwrap_or_else(|| self.create(class, Purpose::Staging))
    }

    /// `chunk` is copied from by the encoder being recorded; it is reused after
    /// the submit.
    pub fn staging_in_flight(&self, chunk: wgpu::Buffer) {
        self.belt.in_flight(chunk);
    }

    /// An unmapped readback buffer of `class` bytes.
    pub fn readback_buffer(&self, class: u64) -> wgpu::Buffer {
        self.readback.take(class).unwrap_or_else(|| {
            let buffer = self.create(class, Purpose::Readback);
            self.readback.note_made(class);
            buffer
        })
    }

    /// Readback buffers of `class` bytes made until `count` exist (free or out).
    pub fn reserve_readbacks(&self, class: u64, count: usize) {
        while self.readback.made(class) < count {
            let buffer = self.create(class, Purpose::Readback);
            self.readback.note_made(class);
            self.readback.give_back(buffer);
        }
    }

    /// A readback buffer read and unmapped, free for the next download.
    pub fn readback_done(&self, buffer: wgpu::Buffer) {
        self.readback.give_back(buffer);
    }

    /// A uniform slot holding `bytes`: chunk index, offset, binding size.
    pub fn uniform_slot(&self, bytes: &[u8]) -> (usize, u64, std::num::NonZeroU64) {
        lock(&self.uniforms).push(bytes, || self.create(CHUNK_BYTES as u64, Purpose::Uniform))
    }

    /// The bind group of `kernel` (whose pipeline's group 0 is `layout`) binding the
    /// uniform slot and `bound` (buffers or ranges of them): cached across steps (see
    /// `bind_groups`).
    pub fn bind_group<B: Bindable>(
        &self,
        (kernel, read_write): (&'static str, bool),
        layout: &wgpu::BindGroupLayout,
        uniform: (usize, u64, std::num::NonZeroU64),
        bound: &[B],
    ) -> Arc<wgpu::BindGroup> {
        let (chunk, offset, size) = uniform;
        let create = |chunk: &wgpu::Buffer| {
            let mut entries = Vec::with_capacity(bound.len() + 1);
            entries.push(wgpu::BindGroupEntry {
                binding: 0,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: chunk,
                    offset,
                    size: Some(size),
                }),
            });
            for (i, b) in bound.iter().enumerate() {
                entries.push(wgpu::BindGroupEntry {
                    binding: i as u32 + 1,
                    resource: wgpu::BindingResource::Buffer(b.slice().binding()),
                });
            }
            self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some(kernel),
                layout,
                entries: &entries,
            })
        };
        let chunk_buffer = || lock(&self.uniforms).chunk(chunk).clone();
        let (group, created) = lock(&self.bind_groups).get(
            (kernel, read_write),
            (chunk, offset, size.get()),
            bound,
            chunk_buffer,
            create,
        );
        if created {
            self.counters.bind_groups_created.fetch_add(1, Relaxed);
            self.counters.created(Object::BindGroup, None);
        }
        group
    }

    // ---- the submit cycle ----------------------------------------------------------

    /// An encoder was opened: from now until the submit, nothing is destroyed.
    pub fn begin_recording(&self) {
        self.recording.store(true, Relaxed);
    }

    /// Just before the submit: the uniform slots' changed bytes go out.
    pub fn before_submit(&self, queue: &wgpu::Queue) {
        let writes = lock(&self.uniforms).write(queue);
        self.counters
            .uniform_writes
            .fetch_add(writes as u64, Relaxed);
    }

    /// After a submit (or when nothing was recorded): buffers let go during recording
    /// are destroyed, used staging chunks start mapping for their next use, the
    /// pool's clock ticks and idle buffers are evicted.
    pub fn after_submit(&self, submitted: bool) {
        self.recording.store(false, Relaxed);
        lock(&self.uniforms).reset();
        if submitted {
            self.counters.submits.fetch_add(1, Relaxed);
            self.belt.recall();
            self.pool.tick();
            self.pool.evict_idle();
            self.pool.settle();
        }
        for buffer in std::mem::take(&mut *lock(&self.graveyard)) {
            buffer.destroy();
        }
        self.retire_let_go();
    }

    /// The open encoder was dropped unsubmitted (a panic in a scope): its uniform
    /// slots are free again and what waited for its submit can go now.
    pub fn abandon_recording(&self) {
        self.after_submit(false);
    }

    /// The context is going: destroy every buffer the manager still keeps (pool,
    /// staging, readback, uniforms), so that on the web their memory goes now, not
    /// at the next garbage collection (rule 4). Call after the last submit.
    pub fn destroy_all(&self) {
        self.clear_pool();
        if let Some(plans) = &self.plans {
            self.retire_arenas(plans.drain());
        }
        if let Some(stand_in) = self.stand_in.get() {
            self.retire(stand_in.clone(), Purpose::Storage, false);
        }
        let kept = self
            .belt
            .drain()
            .into_iter()
            .map(|b| (b, Purpose::Staging))
            .chain(
                self.readback
                    .drain()
                    .into_iter()
                    .map(|b| (b, Purpose::Readback)),
            )
            .chain(
                lock(&self.uniforms)
                    .drain()
                    .into_iter()
                    .map(|b| (b, Purpose::Uniform)),
            );
        for (buffer, purpose) in kept.collect::<Vec<_>>() {
            self.retire(buffer, purpose, false);
        }
    }

    /// Destroys the pool's free buffers (after the submit when recording).
    pub fn clear_pool(&self) {
        self.pool.clear();
        self.retire_let_go();
    }

    /// Destroys free buffers, oldest first, until at most `target_bytes` are held.
    pub fn trim_pool(&self, target_bytes: u64) -> usize {
        let n = self.pool.trim(target_bytes);
        self.retire_let_go();
        n
    }

    /// Destroys free buffers idle for longer than the pool's `max_idle_ticks`.
    pub fn evict_idle(&self) -> usize {
        let n = self.pool.evict_idle();
        self.retire_let_go();
        n
    }
}

/// Copies `bytes` into a buffer mapped for writing (its first `len` bytes) and
/// unmaps it.
pub(crate) fn write_mapped(buffer: &wgpu::Buffer, len: u64, bytes: &[u8]) -> Result<(), String> {
    // On the web, wgpu's writable view first copies the whole mapped range into wasm
    // memory and copies it all back when dropped. Reading a mapped staging buffer
    // can be very slow (Dawn on a discrete GPU may place it in memory the CPU reads
    // across the bus, as measured on the H200 in BENCHMARKS.md), so the bytes go straight into the
    // browser's own array over the mapping, which is writable for a MAP_WRITE map
    // and for one mapped at creation; nothing is read.
    #[cfg(target_arch = "wasm32")]
    {
        let view = buffer
            .slice(..len)
            .get_mapped_range()
            .map_err(|e| format!("could not write an upload: {e}"))?;
        view.as_uint8array()
            .subarray(0, bytes.len() as u32)
            .copy_from(bytes);
        drop(view);
        buffer.unmap();
        Ok(())
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let mut view = buffer
            .slice(..len)
            .get_mapped_range_mut()
            .map_err(|e| format!("could not write an upload: {e}"))?;
        view.slice(..bytes.len()).copy_from_slice(bytes);
        drop(view);
        buffer.unmap();
        Ok(())
    }
}

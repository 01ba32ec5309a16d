//! The GPU side: [`WgpuContext`] (device, queue, pool, pipelines, counters) and
//! [`PooledBuffer`] (a storage buffer that goes back to the pool when dropped).
//!
//! # Why recycling GPU buffers is safe here
//!
//! A pooled buffer's memory is handed from one tensor to the next while the GPU may
//! still be working through commands that touched it. Four rules keep that correct;
//! each has a test.
//!
//! 1. **Only later work sees a recycled buffer.** A buffer joins the free list when
//!    its last host handle (`PooledBuffer`) drops, and the pool gives it only to
//!    work recorded after that. One queue executes in submission order and commands
//!    in one encoder execute in recording order, so a new write to the buffer always
//!    runs after every earlier read of its old contents.
//! 2. **Recycled buffers hold garbage.** The pool does not zero. Every kernel writes
//!    every element of its output before anything reads it. A kernel that writes only
//!    part of its output takes [`WgpuContext::create_zeroed`], whose zeroing is a
//!    `clear_buffer` recorded in the encoder, ordered like any dispatch. The parity
//!    tests draw outputs from a pool filled with NaN, so an unwritten element fails.
//! 3. **`queue.write_buffer` jumps the queue.** Its bytes land at the start of the
//!    next submit, before every command of that submit, including commands recorded
//!    earlier that read the buffer's previous contents. So a buffer filled by
//!    `write_buffer` must never be one that the pool could have handed out mid-encoder:
//!    [`WgpuContext::upload`] makes a fresh buffer that never joins the pool
//!    (`recycle: false`). [`WgpuContext::upload_pooled`] goes further: it copies from
//!    a staging buffer with a command recorded in the encoder, which is ordered, so
//!    its destination may come from and return to the pool.
//! 4. **On the web, dropping is not freeing.** A dropped `wgpu::Buffer` keeps its GPU
//!    memory until JavaScript collects it. Everything that lets a buffer go for good
//!    (pool `clear`, eviction, rejected releases, `--no-pool` mode) calls `destroy()`,
//!    deferred until after the next submit when the buffer may still be referenced by
//!    recorded commands.
//!
//! # Layout
//!
//! Imports run one way. Leaves: `kernel` (what a kernel is), `prelude` (the WGSL
//! every kernel may build on, and its subgroup variant), `slice`, `uniforms`,
//! `staging`, `counters`, `timing`, `recorder` (the encoder's state) and `device`
//! (adapter and feature negotiation). `bind_groups` uses `slice`; `pipelines` compiles
//! kernels through `prelude`; `memory` (the memory manager under every buffer: pool,
//! staging belt, readback buffers, uniform arena, counters, deferred destroys) uses
//! the leaves and `planned` (the planned policy's plans; `memory_plans` is the
//! manager's side of it); `pooled` returns buffers to `memory`. `context` (the
//! [`WgpuContext`] and its [`ContextOptions`]) builds on all of them; `recording`
//! (scopes, dispatches, submits), `transfer` (uploads and downloads),
//! `allocation_trace`, `plan_layout` (the active plan as the trace names it) and
//! `dispatch_times` add to it.

mod allocation_trace;
mod bind_groups;
mod binding_access;
mod context;
mod counters;
mod device;
mod dispatch_times;
mod kernel;
mod memory;
mod memory_plans;
mod pipelines;
mod plan_layout;
mod planned;
mod pooled;
mod prelude;
mod purpose;
mod recorder;
mod recording;
mod slice;
mod staging;
mod timing;
mod transfer;
mod uniforms;
#[cfg(target_arch = "wasm32")]
mod web_subgroups;

pub use binding_access::read_only_bindings;
pub use context::{ContextOptions, PathGuard, WgpuContext};
pub use counters::{BuffersByPurpose, ContextCounters, Created, CreatedByPath, Path};
pub use kernel::{grid_1d, Kernel};
pub use plan_layout::{ArenaLayout, PlanLayout, RangeLayout};
pub use pooled::PooledBuffer;
/// The WGSL compiled for a kernel (the shader tests compile each variant).
#[doc(hidden)]
pub use prelude::source_for;
pub use prelude::MAX_SUBGROUP_WIDTH;
pub(crate) use prelude::{ENABLE_SUBGROUPS, PRELUDE};
/// How many submits a scope of so many dispatches takes (the tests count them).
#[doc(hidden)]
pub use recorder::scope_submits;
pub use slice::{Bindable, Slice};
pub use timing::{DispatchTimes, CAPACITY as TIMED_DISPATCHES};
pub use transfer::{PendingRead, Reading};

/// Locks a mutex, ignoring poisoning: a panic elsewhere leaves these lists valid.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

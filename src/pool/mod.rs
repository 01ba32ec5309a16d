//! `BufferPool`: a size-bucketed free list of GPU buffers.
//!
//! The pool is pure bookkeeping. It never creates a buffer: [`crate::gpu::WgpuContext`]
//! creates one when [`BufferPool::acquire`] misses, and [`crate::gpu::PooledBuffer`]
//! hands it back through [`BufferPool::release`] when its last handle drops. Because
//! the logic is generic over the buffer type ([`Poolable`]), every rule here is
//! tested without a device (`tests/pool.rs`); `wgpu::Buffer` is the default type.
//!
//! Sizes are rounded up to a *size class* so that buffers in one bucket are
//! interchangeable. Powers of two, the policy `BufferPool` documents, is the default
//! ([`SizePolicy::PowerOfTwo`]); finer policies trade fewer wasted bytes for more
//! buckets (see [`SizePolicy`]).
//!
//! [`BufferPool::acquire`] serves a request from its own class only (as
//! documented). [`BufferPool::take`], which the context uses, also serves a request whose
//! class is empty from the smallest free buffer of a larger class, up to
//! [`BufferPoolConfig::fit_ratio`] times its own (classes of [`FIT_MIN_BYTES`] and
//! up), before the caller creates one:
//! buffers freed by tensors of one shape then serve tensors of another, instead of
//! sitting idle while new buffers are created beside them. Kernels may be handed
//! buffers larger than they asked for under any policy (they never read a buffer's
//! length), and bind groups bind whole buffers, so fitting changes nothing for them.
//!
//! Every operation takes one `Mutex`, so the pool is `Send + Sync` whenever its
//! buffer type is, and safe to share between threads natively.
//!
//! - free_list.rs: [`BufferPool`] itself, its buckets and its clock
//! - policy.rs: [`SizePolicy`], how a request is rounded to a size class
//! - config.rs: [`BufferPoolConfig`], the limits on what the pool keeps
//! - stats.rs: [`BufferPoolStats`], its counters and gauges

mod config;
mod free_list;
mod policy;
mod stats;

pub use config::{BufferPoolConfig, DEFAULT_FIT_RATIO, FIT_MIN_BYTES, MAX_FIT_RATIO};
pub use free_list::{BufferPool, LetGo, Rejection};
pub use policy::{SizePolicy, MAX_SUBDIVISIONS, SIZE_ALIGNMENT};
pub use stats::{BucketStats, BufferPoolStats};

/// What the pool needs from a buffer: how to free its memory now.
///
/// On the web, dropping a `wgpu::Buffer` only frees GPU memory when JavaScript's
/// garbage collector runs, so the pool calls `destroy` whenever it lets a buffer go.
pub trait Poolable {
    fn destroy(&self);
}

impl Poolable for wgpu::Buffer {
    fn destroy(&self) {
        wgpu::Buffer::destroy(self)
    }
}

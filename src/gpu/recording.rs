//! Recording work: scopes (one encoder, submitted at the outermost scope's end or in
//! parts), dispatches into the open compute pass, and submits.

use std::sync::atomic::Ordering::Relaxed;

use super::binding_access::MAX_BINDINGS;
use super::context::WgpuContext;
use super::kernel::Kernel;
use super::lock;
use super::memory::{STAND_IN_SLOT, STAND_IN_SLOTS};
use super::recorder::{AfterDispatch, Recorder};
use super::slice::{Bindable, Slice};

impl WgpuContext {
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

    /// Whether [`Self::dispatch_slices`] would bind `bound` for `kernel` all
    /// read_write, each repeated binding then replaced by a stand-in: a launcher
    /// whose kernel reads a repeat (the GEMMs' vec4 views) asks before it relies on it.
    pub(crate) fn binds_read_write(&self, kernel: &Kernel, bound: &[Slice]) -> bool {
        self.read_write_bindings
            || (self.memory.planned()
                && reads_what_it_writes(self.compiled(kernel, false).read_only, bound))
    }

    /// Dispatches `kernel` with uniform `params` (binding 0) and `buffers` (bindings
    /// 1..), over `workgroups`.
    pub fn dispatch<P: bytemuck::Pod, B: Bindable>(
        &self,
        kernel: &Kernel,
        params: &P,
        buffers: &[B],
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
        let declared = self.compiled(kernel, self.read_write_bindings);
        let read_write = self.read_write_bindings
            || (self.memory.planned() && reads_what_it_writes(declared.read_only, bound));
        let compiled = if read_write && !self.read_write_bindings {
            self.compiled(kernel, true)
        } else {
            declared
        };
        let slot = self.memory.uniform_slot(bytemuck::bytes_of(params));
        let key = (kernel.name, read_write);
        let bind_group = if read_write {
            (self.memory.counters)
                .read_write_dispatches
                .fetch_add(1, Relaxed);
            let stand_in = self.memory.stand_in();
            let slices = without_repeats(bound, stand_in);
            self.memory.bind_group(key, &compiled.layout, slot, &slices)
        } else {
            self.memory
                .dispatched(bound.iter().enumerate().map(|(i, b)| {
                    let read_only = is_read_only(compiled.read_only, i);
                    (b.slice().buffer(), !read_only)
                }));
            self.memory.bind_group(key, &compiled.layout, slot, bound)
        };
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
            let same_pipeline = rec.pipeline_set == Some(key);
            rec.pipeline_set = Some(key);
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
            rec.after_dispatch(self.submit_every)
        };
        drop(timer);
        match next {
            AfterDispatch::Submit => self.flush(),
            AfterDispatch::SubmitPart => self.submit_part(),
            AfterDispatch::Record => {}
        }
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
}

/// Whether a dispatch binding `bound` at bindings 1... (bit i of `read_only`:
/// binding i is read-only) reads from a buffer it also binds writable, which WebGPU
/// refuses even on disjoint ranges: then the dispatch binds everything
/// `read_write`. Under the planned policy only arenas are shared like that; the
/// plan keeps a dispatch's rivals in different arenas
/// ([`crate::planner::plan_step`]), so a step that goes as traced never does.
fn reads_what_it_writes<B: Bindable>(read_only: u128, bound: &[B]) -> bool {
    if bound.len() >= MAX_BINDINGS {
        // Past the mask: bind read_write, legal whatever the operands.
        return true;
    }
    let read = |i: usize| is_read_only(read_only, i);
    bound
        .iter()
        .enumerate()
        .filter(|&(i, _)| read(i))
        .any(|(i, r)| {
            bound
                .iter()
                .enumerate()
                .any(|(j, w)| j != i && !read(j) && w.slice().buffer() == r.slice().buffer())
        })
}

/// Whether the operand at index `i` (binding `i + 1`) is read-only in `read_only`.
fn is_read_only(read_only: u128, i: usize) -> bool {
    i + 1 < MAX_BINDINGS && read_only & (1u128 << (i + 1)) != 0
}

/// `bound` with every range bound a second time replaced by a range of `stand_in`
/// of its own ([`STAND_IN_SLOT`] bytes each, so that two repeats do not alias either).
///
/// Launchers bind an operand again where a kernel has a binding it does not read
/// (an absent bias, residual or mask needs some buffer). Under the planned policy
/// every binding is `read_write`, and WebGPU refuses two writable bindings of
/// overlapping ranges in one dispatch, read or not; so the repeat binds a small
/// buffer of its own instead. Bit-identical training against the pool
/// (tests/planned.rs) shows no kernel reads such a binding.
fn without_repeats<'a, B: Bindable>(bound: &'a [B], stand_in: &'a wgpu::Buffer) -> Vec<Slice<'a>> {
    let mut slices: Vec<Slice<'a>> = Vec::with_capacity(bound.len());
    let mut repeats = 0u64;
    for b in bound {
        let s = b.slice();
        let repeat = slices
            .iter()
            .any(|t| t.buffer() == s.buffer() && t.offset() == s.offset() && t.size() == s.size());
        slices.push(if repeat {
            // WebGPU's largest minStorageBufferOffsetAlignment is the slot size.
            let slot = repeats % STAND_IN_SLOTS;
            repeats += 1;
            let size = std::num::NonZeroU64::new(STAND_IN_SLOT).expect("non-zero");
            Slice::range(stand_in, slot * STAND_IN_SLOT, size)
        } else {
            s
        });
    }
    slices
}

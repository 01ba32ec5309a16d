//! Moving bytes between host and GPU: uploads through a staging belt recorded in the
//! encoder (ordered, so pooled: rule 3), and asynchronous downloads.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use super::context::take_error;
use super::context::WgpuContext;
use super::memory::{write_mapped, MemoryManager, Purpose};
use super::pooled::PooledBuffer;
use super::slice::Slice;
use super::staging::staging_class;
use crate::error::{Error, Result};

impl WgpuContext {
    /// Uploads `data` into a pooled buffer through the staging belt. The copy is a
    /// command recorded in the encoder, so it is ordered with the dispatches around
    /// it: the destination may be a recycled buffer, and returns to the pool on drop.
    /// After the first steps this creates no buffers at all.
    pub fn upload_pooled<T: bytemuck::Pod>(&self, data: &[T]) -> PooledBuffer {
        let mut one = self.upload_pooled_all(&[bytemuck::cast_slice(data)]);
        one.pop().expect("one array in, one buffer out")
    }

    /// [`WgpuContext::upload_pooled`] for several arrays at once, through one staging
    /// chunk: one map, one unmap and one remap for all of them instead of one each
    /// (through Dawn each costs the host 3-10 us; a training step uploads four).
    pub fn upload_pooled_all(&self, arrays: &[&[u8]]) -> Vec<PooledBuffer> {
        // Copies move whole 4-byte words (COPY_BUFFER_ALIGNMENT): each array takes
        // its length rounded up, and at least one word.
        let lens: Vec<usize> = arrays
            .iter()
            .map(|a| a.len().max(4).div_ceil(4) * 4)
            .collect();
        let total: usize = lens.iter().sum();
        // Never planned ranges: the batch's arrays of a call's later steps are uploaded
        // ahead with the first one, so they outlive a step.
        let dsts: Vec<PooledBuffer> = lens.iter().map(|&len| self.storage(len, false)).collect();
        let chunk = self.memory.staging_chunk(staging_class(total as u64));
        let mut bytes = Vec::with_capacity(total);
        for (array, &len) in arrays.iter().zip(&lens) {
            bytes.extend_from_slice(array);
            bytes.resize(bytes.len() + len - array.len(), 0);
        }
        // A chunk that cannot be mapped means the device is gone: report it at the
        // next download instead of panicking, and leave the destinations unwritten.
        if let Err(e) = write_mapped(&chunk, total as u64, &bytes) {
            self.report(e);
            return dsts;
        }
        self.memory.staging_in_flight(chunk.clone());
        self.record(|encoder| {
            let mut at = 0;
            for (dst, &len) in dsts.iter().zip(&lens) {
                let d = dst.slice();
                encoder.copy_buffer_to_buffer(
                    &chunk,
                    at as u64,
                    d.buffer(),
                    d.offset(),
                    len as u64,
                );
                at += len;
            }
        });
        dsts
    }

    /// Writes `bytes` (a multiple of 4, at most its length) at the start of `dst`, a
    /// buffer kept across submits and never pooled (rule 3: made by
    /// [`WgpuContext::upload`]), through the queue: no staging chunk, nothing
    /// created. A queue write lands ahead of the next submit, after every earlier
    /// one; so what is recorded now (and may read the old bytes) is submitted first.
    pub fn write_pooled(&self, dst: &PooledBuffer, bytes: &[u8]) {
        debug_assert!(bytes.len() <= dst.len() && bytes.len().is_multiple_of(4));
        debug_assert!(!dst.recycle(), "a queue-written buffer is never pooled");
        self.flush();
        self.queue.write_buffer(dst, 0, bytes);
        self.memory.counters.queue_writes.fetch_add(1, Relaxed);
    }

    /// Copies `bytes` bytes between buffers, recorded in the encoder (ordered).
    pub fn copy_buffer(
        &self,
        src: &wgpu::Buffer,
        src_offset: u64,
        dst: &wgpu::Buffer,
        dst_offset: u64,
        bytes: u64,
    ) {
        self.record(|encoder| {
            encoder.copy_buffer_to_buffer(src, src_offset, dst, dst_offset, bytes)
        });
    }

    /// Reads the first `count` elements of `buffer` (a buffer, a [`PooledBuffer`]:
    /// its own range, or a [`super::Slice`]) back to the host. Submits what is
    /// recorded (even inside a scope), then awaits the map: natively by polling the
    /// device, on the web without blocking. Also reports any GPU error since the last
    /// check.
    pub async fn download<'b, T: bytemuck::Pod>(
        &self,
        buffer: impl Into<Slice<'b>>,
        count: usize,
    ) -> Result<Vec<T>> {
        self.download_at(buffer, 0, count).await
    }

    /// Like [`WgpuContext::download`], for `count` elements starting at element `first`.
    pub async fn download_at<'b, T: bytemuck::Pod>(
        &self,
        buffer: impl Into<Slice<'b>>,
        first: usize,
        count: usize,
    ) -> Result<Vec<T>> {
        let slice: Slice = buffer.into();
        let size = std::mem::size_of::<T>();
        let bytes = count * size;
        if bytes == 0 {
            return Ok(Vec::new());
        }
        let offset = (first * size) as u64;
        let padded = (bytes.div_ceil(4) * 4) as u64;
        if !offset.is_multiple_of(4) || offset + padded > slice.size() {
            return Err(Error::Map(format!(
                "asked for bytes {offset}..{} of a {}-byte buffer",
                offset + padded,
                slice.size()
            )));
        }
        let pending = self.pending_read(padded);
        self.copy_to_read(slice, offset, &pending, 0, padded);
        self.read::<T>(pending, count).await
    }

    /// A readback buffer of at least `bytes` bytes for copies recorded now (in a
    /// scope, they go out with its submits) and read later by
    /// [`WgpuContext::read`]: a step reads its loss without a submit of its own.
    pub fn pending_read(&self, bytes: u64) -> PendingRead {
        let class = staging_class(bytes.max(4));
        PendingRead {
            buffer: Some(self.memory.readback_buffer(class)),
            home: self.memory.clone(),
        }
    }

    /// Makes readback buffers of the class of `bytes` until `count` exist: a caller
    /// that will keep `count` reads of this size in flight makes them at its first
    /// use instead of at its first overlap.
    pub fn reserve_readbacks(&self, bytes: u64, count: usize) {
        self.memory
            .reserve_readbacks(staging_class(bytes.max(4)), count);
    }

    /// Records a copy of `bytes` bytes of `src` (a buffer, a [`PooledBuffer`]'s
    /// range or a [`super::Slice`]) from `src_offset` within it into `dst` at
    /// `dst_offset` (all multiples of 4).
    pub fn copy_to_read<'b>(
        &self,
        src: impl Into<Slice<'b>>,
        src_offset: u64,
        dst: &PendingRead,
        dst_offset: u64,
        bytes: u64,
    ) {
        let src: Slice = src.into();
        let at = src.offset() + src_offset;
        self.copy_buffer(src.buffer(), at, dst.buffer(), dst_offset, bytes);
    }

    /// The first `count` elements copied into `pending`: submits what is recorded
    /// (even inside a scope), then awaits the map. Also reports any GPU error since
    /// the last check.
    pub async fn read<T: bytemuck::Pod>(
        &self,
        pending: PendingRead,
        count: usize,
    ) -> Result<Vec<T>> {
        self.start_read(pending, count)?.values().await
    }

    /// [`WgpuContext::read`]'s first half: submits what is recorded and asks for the
    /// map. The [`Reading`] it returns is awaited without the context, so more work
    /// can be recorded and submitted while it is on its way back.
    pub fn start_read<T: bytemuck::Pod>(
        &self,
        mut pending: PendingRead,
        count: usize,
    ) -> Result<Reading<T>> {
        let staging = pending.buffer.take().expect("present until read or drop");
        let bytes = count * std::mem::size_of::<T>();
        let padded = (bytes.div_ceil(4) * 4) as u64;
        if padded > staging.size() {
            let size = staging.size();
            self.memory.readback_done(staging);
            return Err(Error::Map(format!(
                "asked for {padded} bytes of a {size}-byte readback"
            )));
        }
        self.flush();
        let submission = self.last_submit();
        let (tx, rx) = futures_channel::oneshot::channel();
        if bytes > 0 {
            staging
                .slice(..padded)
                .map_async(wgpu::MapMode::Read, move |result| {
                    let _ = tx.send(result);
                });
        }
        Ok(Reading {
            staging: Some(staging),
            bytes,
            padded,
            mapped: rx,
            submission,
            device: self.device.clone(),
            home: self.memory.clone(),
            errors: self.errors.clone(),
            lost: self.lost.clone(),
            _values: std::marker::PhantomData,
        })
    }
}

/// A readback submitted and asked to map ([`WgpuContext::start_read`]). It holds what
/// it needs (no borrow of the context), so two may be in flight: the page records the
/// next steps while the last ones' figures come back. Dropped unread, its buffer is
/// destroyed (a map may be pending on it).
pub struct Reading<T> {
    staging: Option<wgpu::Buffer>,
    bytes: usize,
    padded: u64,
    mapped: futures_channel::oneshot::Receiver<std::result::Result<(), wgpu::BufferAsyncError>>,
    /// The submit that copies into it: natively, what to wait for (not later ones;
    /// the browser needs no polling).
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    submission: Option<wgpu::SubmissionIndex>,
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    device: wgpu::Device,
    home: Arc<MemoryManager>,
    errors: Arc<std::sync::Mutex<Vec<String>>>,
    lost: Arc<std::sync::Mutex<Option<String>>>,
    _values: std::marker::PhantomData<T>,
}

impl<T: bytemuck::Pod> Reading<T> {
    /// The values, once the GPU has written them; also any GPU error since the last
    /// check (as [`WgpuContext::take_error`]).
    pub async fn values(mut self) -> Result<Vec<T>> {
        let staging = self.staging.take().expect("present until read or drop");
        if self.bytes == 0 {
            self.home.readback_done(staging);
            return Ok(Vec::new());
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            let _ = self.device.poll(wgpu::PollType::Wait {
                submission_index: self.submission.take(),
                timeout: None,
            });
        }
        let mapped = (&mut self.mapped).await;
        if let Err(e) = take_error(&self.lost, &self.errors) {
            self.home.retire(staging, Purpose::Readback, false);
            return Err(e);
        }
        match mapped {
            Ok(Ok(())) => {}
            failed => {
                self.home.retire(staging, Purpose::Readback, false);
                return Err(Error::Map(match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => "the map callback never ran".into(),
                }));
            }
        }
        let data = {
            let view = staging
                .slice(..self.padded)
                .get_mapped_range()
                .map_err(|e| Error::Map(e.to_string()))?;
            bytemuck::pod_collect_to_vec(&view[..self.bytes])
        };
        staging.unmap();
        self.home.readback_done(staging);
        Ok(data)
    }
}

impl<T> Drop for Reading<T> {
    fn drop(&mut self) {
        if let Some(buffer) = self.staging.take() {
            self.home.retire(buffer, Purpose::Readback, false);
        }
    }
}

/// A readback buffer that copies are recorded into, read once by
/// [`WgpuContext::read`]. Dropped unread, it goes back to the memory manager's
/// readback buffers (unmapped: nothing mapped it).
pub struct PendingRead {
    buffer: Option<wgpu::Buffer>,
    home: Arc<MemoryManager>,
}

impl PendingRead {
    fn buffer(&self) -> &wgpu::Buffer {
        self.buffer.as_ref().expect("present until read or drop")
    }

    /// Its size in bytes (a power of two, at least 256).
    pub fn size(&self) -> u64 {
        self.buffer().size()
    }
}

impl Drop for PendingRead {
    fn drop(&mut self) {
        if let Some(buffer) = self.buffer.take() {
            self.home.readback_done(buffer);
        }
    }
}

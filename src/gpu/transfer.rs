//! Moving bytes between host and GPU: uploads through a staging belt recorded in the
//! encoder (ordered, so pooled: rule 3), and asynchronous downloads.

use std::sync::{Arc, Mutex};

use super::context::{lock, WgpuContext};
use super::pooled::PooledBuffer;
use crate::error::{Error, Result};

/// Staging chunks are pooled by power-of-two size, at least this big.
const MIN_STAGING: u64 = 256;

fn staging_class(bytes: u64) -> u64 {
    bytes.max(MIN_STAGING).next_power_of_two()
}

/// Upload staging chunks (MAP_WRITE | COPY_SRC). A chunk is written while mapped,
/// unmapped, copied from by a command in the encoder, and after that submit starts
/// mapping again; when its map callback fires the GPU is done with it and it is
/// ready for the next upload.
#[derive(Default)]
pub(crate) struct StagingBelt {
    /// Mapped and free.
    ready: Arc<Mutex<Vec<wgpu::Buffer>>>,
    /// Copied from by the encoder being recorded.
    in_flight: Mutex<Vec<wgpu::Buffer>>,
}

impl StagingBelt {
    fn take(&self, ctx: &WgpuContext, class: u64) -> wgpu::Buffer {
        let mut ready = lock(&self.ready);
        if let Some(i) = ready.iter().position(|b| b.size() == class) {
            return ready.swap_remove(i);
        }
        drop(ready);
        ctx.shared.note_created(class);
        ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tidepool staging"),
            size: class,
            usage: wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: true,
        })
    }

    /// After a submit: every chunk it copied from starts mapping for reuse.
    pub fn recall(&self) {
        for chunk in std::mem::take(&mut *lock(&self.in_flight)) {
            let ready = self.ready.clone();
            let handle = chunk.clone();
            chunk
                .slice(..)
                .map_async(wgpu::MapMode::Write, move |result| {
                    // A failed map means the device is gone; the chunk is dropped.
                    if result.is_ok() {
                        lock(&ready).push(handle);
                    }
                });
        }
    }
}

/// Readback staging buffers (MAP_READ | COPY_DST), reused by size.
#[derive(Default)]
pub(crate) struct Readback {
    free: Mutex<Vec<wgpu::Buffer>>,
}

impl WgpuContext {
    /// Uploads `data` into a pooled buffer through the staging belt. The copy is a
    /// command recorded in the encoder, so it is ordered with the dispatches around
    /// it: the destination may be a recycled buffer, and returns to the pool on drop.
    /// After the first steps this creates no buffers at all.
    pub fn upload_pooled<T: bytemuck::Pod>(&self, data: &[T]) -> PooledBuffer {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let len = bytes.len().max(4).div_ceil(4) * 4;
        let dst = self.create_pooled(len);
        let chunk = self.belt.take(self, staging_class(len as u64));
        // A chunk that cannot be mapped means the device is gone: report it at the
        // next download instead of panicking, and leave the destination unwritten.
        if !self.write_mapped(&chunk, len as u64, bytes) {
            return dst;
        }
        lock(&self.belt.in_flight).push(chunk.clone());
        self.record(|encoder| encoder.copy_buffer_to_buffer(&chunk, 0, &dst, 0, len as u64));
        dst
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

    /// Reads the first `count` elements of `buffer` back to the host. Submits what is
    /// recorded (even inside a scope), then awaits the map: natively by polling the
    /// device, on the web without blocking. Also reports any GPU error since the last
    /// check.
    pub async fn download<T: bytemuck::Pod>(
        &self,
        buffer: &wgpu::Buffer,
        count: usize,
    ) -> Result<Vec<T>> {
        self.download_at(buffer, 0, count).await
    }

    /// Like [`WgpuContext::download`], for `count` elements starting at element `first`.
    pub async fn download_at<T: bytemuck::Pod>(
        &self,
        buffer: &wgpu::Buffer,
        first: usize,
        count: usize,
    ) -> Result<Vec<T>> {
        let size = std::mem::size_of::<T>();
        let bytes = count * size;
        if bytes == 0 {
            return Ok(Vec::new());
        }
        let offset = (first * size) as u64;
        let padded = (bytes.div_ceil(4) * 4) as u64;
        if !offset.is_multiple_of(4) || offset + padded > buffer.size() {
            return Err(Error::Map(format!(
                "asked for bytes {offset}..{} of a {}-byte buffer",
                offset + padded,
                buffer.size()
            )));
        }
        let class = staging_class(padded);
        let staging = {
            let mut free = lock(&self.readback.free);
            match free.iter().position(|b| b.size() == class) {
                Some(i) => free.swap_remove(i),
                None => {
                    drop(free);
                    let usage = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST;
                    self.create_buffer(class, usage)
                }
            }
        };
        self.record(|encoder| encoder.copy_buffer_to_buffer(buffer, offset, &staging, 0, padded));
        self.flush();
        let (tx, rx) = futures_channel::oneshot::channel();
        staging
            .slice(..padded)
            .map_async(wgpu::MapMode::Read, move |result| {
                let _ = tx.send(result);
            });
        self.poll_wait();
        let mapped = rx.await;
        self.take_error()?;
        match mapped {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(Error::Map(e.to_string())),
            Err(_) => return Err(Error::Map("the map callback never ran".into())),
        }
        let data = {
            let view = staging
                .slice(..padded)
                .get_mapped_range()
                .map_err(|e| Error::Map(e.to_string()))?;
            bytemuck::pod_collect_to_vec(&view[..bytes])
        };
        staging.unmap();
        lock(&self.readback.free).push(staging);
        Ok(data)
    }
}

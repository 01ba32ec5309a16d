//! Moving bytes between host and GPU: uploads through a staging belt recorded in the
//! encoder (ordered, so pooled: rule 3), and asynchronous downloads.

use super::context::WgpuContext;
use super::memory::write_mapped;
use super::pooled::PooledBuffer;
use super::staging::staging_class;
use crate::error::{Error, Result};

impl WgpuContext {
    /// Uploads `data` into a pooled buffer through the staging belt. The copy is a
    /// command recorded in the encoder, so it is ordered with the dispatches around
    /// it: the destination may be a recycled buffer, and returns to the pool on drop.
    /// After the first steps this creates no buffers at all.
    pub fn upload_pooled<T: bytemuck::Pod>(&self, data: &[T]) -> PooledBuffer {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let len = bytes.len().max(4).div_ceil(4) * 4;
        let dst = self.create_pooled(len);
        let chunk = self.memory.staging_chunk(staging_class(len as u64));
        // A chunk that cannot be mapped means the device is gone: report it at the
        // next download instead of panicking, and leave the destination unwritten.
        if let Err(e) = write_mapped(&chunk, len as u64, bytes) {
            self.report(e);
            return dst;
        }
        self.memory.staging_in_flight(chunk.clone());
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
        let staging = self.memory.readback_buffer(class);
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
        self.memory.readback_done(staging);
        Ok(data)
    }
}

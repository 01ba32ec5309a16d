//! Host-visible buffers reused by size class: upload staging chunks (the belt) and
//! readback buffers. Both only keep lists; the memory manager creates and counts.

use std::sync::{Arc, Mutex};

use super::lock;

/// Staging and readback buffers are pooled by power-of-two size, at least this big.
const MIN_STAGING: u64 = 256;

pub(crate) fn staging_class(bytes: u64) -> u64 {
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
    /// A mapped chunk of exactly `class` bytes, if one is ready.
    pub fn take(&self, class: u64) -> Option<wgpu::Buffer> {
        let mut ready = lock(&self.ready);
        let i = ready.iter().position(|b| b.size() == class)?;
        Some(ready.swap_remove(i))
    }

    /// `chunk` is copied from by the encoder being recorded.
    pub fn in_flight(&self, chunk: wgpu::Buffer) {
        lock(&self.in_flight).push(chunk);
    }

    /// Every ready chunk, for destroying (chunks still mapping are left to drop).
    pub fn drain(&self) -> Vec<wgpu::Buffer> {
        std::mem::take(&mut *lock(&self.ready))
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

/// Readback buffers (MAP_READ | COPY_DST), unmapped and free, reused by size.
#[derive(Default)]
pub(crate) struct Readback {
    free: Mutex<Vec<wgpu::Buffer>>,
    /// How many of each class were made (free or out, until the context goes).
    made: Mutex<Vec<(u64, usize)>>,
}

impl Readback {
    pub fn made(&self, class: u64) -> usize {
        let made = lock(&self.made);
        made.iter()
            .find(|(c, _)| *c == class)
            .map_or(0, |(_, n)| *n)
    }

    pub fn note_gone(&self, class: u64) {
        if let Some((_, n)) = lock(&self.made).iter_mut().find(|(c, _)| *c == class) {
            *n = n.saturating_sub(1);
        }
    }

    pub fn note_made(&self, class: u64) {
        let mut made = lock(&self.made);
        match made.iter_mut().find(|(c, _)| *c == class) {
            Some((_, n)) => *n += 1,
            None => made.push((class, 1)),
        }
    }

    pub fn take(&self, class: u64) -> Option<wgpu::Buffer> {
        let mut free = lock(&self.free);
        let i = free.iter().position(|b| b.size() == class)?;
        Some(free.swap_remove(i))
    }

    pub fn drain(&self) -> Vec<wgpu::Buffer> {
        std::mem::take(&mut *lock(&self.free))
    }

    pub fn give_back(&self, buffer: wgpu::Buffer) {
        lock(&self.free).push(buffer);
    }
}

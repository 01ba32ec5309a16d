//! The uniform-parameter arena: a few persistent uniform buffers carved into slots,
//! one slot a dispatch, for the kernels' shape parameters (binding 0).
//!
//! The slots' bytes are written with one `write_buffer` per chunk just before the
//! submit that reads them. That is rule 3's hazard turned to use: the write lands
//! ahead of this submit's commands (which is what they need) and after the previous
//! submit's (which are done with the old values). A steady step dispatches the same
//! kernels in the same order, so it lands on the same slots every step: no buffer
//! creations, and the same bind groups (see `bind_groups`).

use std::num::NonZeroU64;

pub(crate) const CHUNK_BYTES: usize = 64 * 1024;

pub(crate) struct UniformArena {
    align: usize,
    chunks: Vec<wgpu::Buffer>,
    shadow: Vec<Vec<u8>>,
    /// Chunk being filled and its used bytes.
    current: usize,
    used: usize,
}

impl UniformArena {
    /// `align`: the device's `min_uniform_buffer_offset_alignment`.
    pub fn new(align: usize) -> Self {
        UniformArena {
            align: align.max(16),
            chunks: Vec::new(),
            shadow: Vec::new(),
            current: 0,
            used: 0,
        }
    }

    /// Stores `bytes` in a free slot, calling `create` for a new chunk of
    /// [`CHUNK_BYTES`] when all are full; returns the chunk, offset and binding size.
    pub fn push(
        &mut self,
        bytes: &[u8],
        create: impl FnOnce() -> wgpu::Buffer,
    ) -> (wgpu::Buffer, u64, NonZeroU64) {
        // Uniform bindings are read in 16-byte rows: pad the struct up to one. Slots
        // start at the device's uniform offset alignment (256, or 32 on lavapipe).
        let size = bytes.len().max(16).div_ceil(16) * 16;
        let stride = size.div_ceil(self.align) * self.align;
        if self.chunks.is_empty() || self.used + stride > CHUNK_BYTES {
            if !self.chunks.is_empty() {
                self.current += 1;
                self.used = 0;
            }
            if self.current == self.chunks.len() {
                self.chunks.push(create());
                self.shadow.push(vec![0; CHUNK_BYTES]);
            }
        }
        let offset = self.used;
        self.shadow[self.current][offset..offset + bytes.len()].copy_from_slice(bytes);
        self.used += stride;
        let size = NonZeroU64::new(size as u64).expect("padded to 16");
        (self.chunks[self.current].clone(), offset as u64, size)
    }

    /// Writes the filled slots ahead of the coming submit and starts over.
    pub fn write(&mut self, queue: &wgpu::Queue) {
        if self.chunks.is_empty() {
            return;
        }
        for i in 0..=self.current {
            let used = if i == self.current {
                self.used
            } else {
                CHUNK_BYTES
            };
            if used > 0 {
                queue.write_buffer(&self.chunks[i], 0, &self.shadow[i][..used]);
            }
        }
        self.reset();
    }

    /// Every chunk, for destroying; the arena starts empty.
    pub fn drain(&mut self) -> Vec<wgpu::Buffer> {
        self.shadow.clear();
        self.reset();
        std::mem::take(&mut self.chunks)
    }

    /// Frees every slot (their bytes are not needed any more).
    pub fn reset(&mut self) {
        self.current = 0;
        self.used = 0;
    }
}

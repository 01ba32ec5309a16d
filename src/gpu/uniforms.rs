//! The uniform-parameter arena: a few persistent uniform buffers carved into slots,
//! one slot a dispatch, for the kernels' shape parameters (binding 0).
//!
//! The slots' bytes are written with one `write_buffer` per chunk just before the
//! submit that reads them. That is rule 3's hazard turned to use: the write lands
//! ahead of this submit's commands (which is what they need) and after the previous
//! submit's (which are done with the old values). A steady step dispatches the same
//! kernels in the same order, so it lands on the same slots every step: no buffer
//! creations, and the same bind groups (see `bind_groups`).
//!
//! The slots are freed when a scope ends, not after each of its parts: a step's
//! parts take disjoint slots, the same ones every step. Most slots then hold the
//! same bytes every step (shapes). Each chunk's host copy
//! always equals what the GPU buffer holds once the pending writes land, so only the
//! bytes that changed since the last write are written, and a part whose slots all
//! match writes nothing (through Dawn a `write_buffer` costs the host about 10 us).

use std::num::NonZeroU64;

pub(crate) const CHUNK_BYTES: usize = 64 * 1024;

pub(crate) struct UniformArena {
    align: usize,
    chunks: Vec<wgpu::Buffer>,
    /// Each chunk's bytes: what the GPU buffer holds once `dirty` is written.
    shadow: Vec<Vec<u8>>,
    /// Each chunk's bytes changed since its last write (start..end, 4-aligned).
    dirty: Vec<Option<(usize, usize)>>,
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
            dirty: Vec::new(),
            current: 0,
            used: 0,
        }
    }

    /// Stores `bytes` in a free slot, calling `create` for a new chunk of
    /// [`CHUNK_BYTES`] when all are full; returns the chunk's index, the offset and
    /// the binding size.
    pub fn push(
        &mut self,
        bytes: &[u8],
        create: impl FnOnce() -> wgpu::Buffer,
    ) -> (usize, u64, NonZeroU64) {
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
                // New buffers start zeroed, like their host copy.
                self.chunks.push(create());
                self.shadow.push(vec![0; CHUNK_BYTES]);
                self.dirty.push(None);
            }
        }
        let offset = self.used;
        let end = offset + bytes.len();
        let slot = &mut self.shadow[self.current][offset..end];
        if slot != bytes {
            slot.copy_from_slice(bytes);
            // Writes move whole 4-byte words; slots start 16-byte aligned.
            let end = end.div_ceil(4) * 4;
            let range = self.dirty[self.current].get_or_insert((offset, end));
            *range = (range.0.min(offset), range.1.max(end));
        }
        self.used += stride;
        let size = NonZeroU64::new(size as u64).expect("padded to 16");
        (self.current, offset as u64, size)
    }

    /// Chunk `i` of [`Self::push`].
    pub fn chunk(&self, i: usize) -> &wgpu::Buffer {
        &self.chunks[i]
    }

    /// Writes the slots' changed bytes ahead of the coming submit; returns how many
    /// `write_buffer` calls it made. The slots stay taken until [`Self::reset`].
    pub fn write(&mut self, queue: &wgpu::Queue) -> usize {
        let mut writes = 0;
        for (i, dirty) in self.dirty.iter_mut().enumerate() {
            if let Some((start, end)) = dirty.take() {
                queue.write_buffer(&self.chunks[i], start as u64, &self.shadow[i][start..end]);
                writes += 1;
            }
        }
        writes
    }

    /// Every chunk, for destroying; the arena starts empty.
    pub fn drain(&mut self) -> Vec<wgpu::Buffer> {
        self.shadow.clear();
        self.dirty.clear();
        self.reset();
        std::mem::take(&mut self.chunks)
    }

    /// Frees every slot (their bytes are not needed any more). Bytes pushed but not
    /// yet written stay marked, so the next write still brings the GPU copy up to date.
    pub fn reset(&mut self) {
        self.current = 0;
        self.used = 0;
    }
}

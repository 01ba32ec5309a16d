//! `PooledBuffer`: a storage buffer that returns to its context's pool on drop.

use std::num::NonZeroU64;
use std::sync::Arc;

use super::memory::{MemoryManager, Storage};
use super::planned::Tag;
use super::slice::{Bindable, Slice};

/// A storage buffer that goes back to its context's pool when dropped, instead of
/// being destroyed. Derefs to `wgpu::Buffer`.
///
/// Its size is the size class of the request (see [`crate::pool::SizePolicy`]);
/// [`PooledBuffer::len`] is what was asked for. A buffer whose `recycle` flag is
/// false (made by [`super::WgpuContext::upload`]) is destroyed on drop instead: see
/// rule 3 in [`crate::gpu`].
///
/// Under the planned policy a tensor of a training step is a *range* of an arena:
/// its bytes start at [`PooledBuffer::offset`], and it derefs to the whole arena,
/// which other live tensors share. Bind and copy it through
/// [`PooledBuffer::slice`] (kernels' launchers do: `Slice::from(&buffer)`), never
/// as the `wgpu::Buffer` it derefs to; on drop its range is free again, and the
/// arena stays.
pub struct PooledBuffer {
    buffer: Option<wgpu::Buffer>,
    offset: u64,
    class: usize,
    len: usize,
    recycle: bool,
    tag: Tag,
    home: Arc<MemoryManager>,
}

impl PooledBuffer {
    pub(crate) fn new(
        storage: Storage,
        len: usize,
        recycle: bool,
        home: Arc<MemoryManager>,
    ) -> Self {
        let Storage {
            buffer,
            offset,
            class,
            tag,
        } = storage;
        home.note_in_use(class, len);
        PooledBuffer {
            buffer: Some(buffer),
            offset,
            class,
            len,
            recycle,
            tag,
            home,
        }
    }

    /// Bytes requested (the buffer itself may be larger: its size class).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where this tensor's bytes start in the buffer it derefs to: 0, except for a
    /// planned range of an arena.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Bytes this tensor may use from [`PooledBuffer::offset`]: its size class, or
    /// its planned range.
    pub fn size_class(&self) -> usize {
        self.class
    }

    /// This tensor's bytes, as a kernel binds them and a copy addresses them.
    pub fn slice(&self) -> Slice<'_> {
        let size = NonZeroU64::new(self.class.max(4) as u64).expect("at least 4 bytes");
        Slice::range(self.gpu_buffer(), self.offset, size)
    }

    /// `size` bytes of this tensor from its byte `offset`.
    pub fn range(&self, offset: u64, size: NonZeroU64) -> Slice<'_> {
        Slice::range(self.gpu_buffer(), self.offset + offset, size)
    }

    fn gpu_buffer(&self) -> &wgpu::Buffer {
        self.buffer.as_ref().expect("present until drop")
    }

    /// Whether the buffer returns to the pool when dropped.
    pub fn recycle(&self) -> bool {
        self.recycle
    }

    /// Whether this buffer goes back to the pool (`true`) or is destroyed (`false`)
    /// when dropped.
    ///
    /// What `false` makes safe: filling this buffer with `queue.write_buffer`
    /// yourself (rule 3). Such a write lands at the start of the next submit, ahead
    /// of commands recorded before it; a buffer that will never be recycled can never
    /// be one that those earlier commands read under a previous owner, because the
    /// pool can only hand out buffers that were released, and this one never is.
    ///
    /// What it does not make safe: the write still jumps ahead of commands already
    /// recorded that use *this* buffer (this owner's earlier dispatches in the open
    /// encoder see the new bytes), so write before recording anything that reads or
    /// writes it, or submit first ([`super::WgpuContext::flush`]). And turning it
    /// back to `true` after a `write_buffer` brings the hazard back: the buffer may
    /// then reach the pool and a later owner while the write is still pending.
    /// Only the flag is read at drop time, so the last value set decides.
    ///
    /// A planned range is never destroyed alone (it is part of an arena), so this
    /// changes nothing for it; never `write_buffer` into one.
    pub fn set_recycle(&mut self, recycle: bool) {
        self.recycle = recycle;
    }
}

impl std::ops::Deref for PooledBuffer {
    type Target = wgpu::Buffer;

    /// The GPU buffer holding this tensor: for a planned range, its whole arena
    /// (see the type's docs).
    fn deref(&self) -> &wgpu::Buffer {
        self.buffer.as_ref().expect("present until drop")
    }
}

impl<'a> From<&'a PooledBuffer> for Slice<'a> {
    fn from(buffer: &'a PooledBuffer) -> Self {
        if buffer.offset == 0 && !matches!(buffer.tag, Tag::Planned { .. }) {
            // A pooled buffer is bound whole, as it always was: its bind groups then
            // serve every later tensor of its class.
            Slice::whole(buffer.gpu_buffer())
        } else {
            buffer.slice()
        }
    }
}

impl Bindable for &PooledBuffer {
    fn slice(&self) -> Slice<'_> {
        Slice::from(*self)
    }
}

impl std::fmt::Debug for PooledBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledBuffer")
            .field("len", &self.len)
            .field("size_class", &self.class)
            .field("offset", &self.offset)
            .field("recycle", &self.recycle)
            .finish()
    }
}

impl Drop for PooledBuffer {
    fn drop(&mut self) {
        let Some(buffer) = self.buffer.take() else {
            return;
        };
        let at = (buffer, self.offset);
        (self.home).release(at, (self.class, self.len), self.recycle, self.tag);
    }
}

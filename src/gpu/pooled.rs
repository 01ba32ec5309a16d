//! `PooledBuffer`: a storage buffer that returns to its context's pool on drop.

use std::sync::Arc;

use super::memory::MemoryManager;
use super::slice::Slice;

/// A storage buffer that goes back to its context's pool when dropped, instead of
/// being destroyed. Derefs to `wgpu::Buffer`.
///
/// Its size is the size class of the request (see [`crate::pool::SizePolicy`]);
/// [`PooledBuffer::len`] is what was asked for. A buffer whose `recycle` flag is
/// false (made by [`super::WgpuContext::upload`]) is destroyed on drop instead: see
/// rule 3 in [`crate::gpu`].
pub struct PooledBuffer {
    buffer: Option<wgpu::Buffer>,
    class: usize,
    len: usize,
    recycle: bool,
    home: Arc<MemoryManager>,
}

impl PooledBuffer {
    pub(crate) fn new(
        buffer: wgpu::Buffer,
        class: usize,
        len: usize,
        recycle: bool,
        home: Arc<MemoryManager>,
    ) -> Self {
        home.note_in_use(class, len);
        PooledBuffer {
            buffer: Some(buffer),
            class,
            len,
            recycle,
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
    pub fn set_recycle(&mut self, recycle: bool) {
        self.recycle = recycle;
    }
}

impl std::ops::Deref for PooledBuffer {
    type Target = wgpu::Buffer;

    fn deref(&self) -> &wgpu::Buffer {
        self.buffer.as_ref().expect("present until drop")
    }
}

impl<'a> From<&'a PooledBuffer> for Slice<'a> {
    fn from(buffer: &'a PooledBuffer) -> Self {
        Slice::whole(buffer)
    }
}

impl std::fmt::Debug for PooledBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledBuffer")
            .field("len", &self.len)
            .field("size_class", &self.class)
            .field("recycle", &self.recycle)
            .finish()
    }
}

impl Drop for PooledBuffer {
    fn drop(&mut self) {
        let Some(buffer) = self.buffer.take() else {
            return;
        };
        self.home
            .release(buffer, self.class, self.len, self.recycle);
    }
}

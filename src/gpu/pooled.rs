//! `PooledBuffer`: a storage buffer that returns to its context's pool on drop.

use std::sync::Arc;

use super::context::Shared;

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
    home: Arc<Shared>,
}

impl PooledBuffer {
    pub(crate) fn new(
        buffer: wgpu::Buffer,
        class: usize,
        len: usize,
        recycle: bool,
        home: Arc<Shared>,
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

    /// Keeps this buffer out of the pool (for example before filling it with
    /// `queue.write_buffer` yourself: rule 3).
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
        let home = &self.home;
        home.note_released(self.class, self.len);
        if self.recycle && home.pooling {
            // The pool's `release` hands a rejected buffer back only as `false`; the
            // buffer itself is then gone with it, so keep a handle to destroy.
            let keep = buffer.clone();
            if !home.pool.release(buffer, self.class) {
                home.retire(keep);
            }
        } else {
            home.retire(buffer);
        }
    }
}

//! `Slice`: a byte range of a storage buffer that a kernel binds as its whole array.

use std::num::NonZeroU64;

/// A byte range of a storage buffer, bound at one of a kernel's bindings so that the
/// kernel sees the range as its whole array (`arrayLength` included). Several small
/// arrays can so share one buffer and one upload: a training batch's four arrays do
/// ([`crate::model::GpuBatch`]).
///
/// A range's offset must be a multiple of the device's
/// `min_storage_buffer_offset_alignment` (256 bytes on most devices) and its size a
/// multiple of 4; wgpu reports a binding that breaks either as a validation error.
#[derive(Clone, Copy, Debug)]
pub struct Slice<'a> {
    buffer: &'a wgpu::Buffer,
    offset: u64,
    /// `None`: the whole buffer.
    size: Option<NonZeroU64>,
}

impl<'a> Slice<'a> {
    /// The whole of `buffer`.
    pub fn whole(buffer: &'a wgpu::Buffer) -> Self {
        Slice {
            buffer,
            offset: 0,
            size: None,
        }
    }

    /// `size` bytes of `buffer` from byte `offset`.
    pub fn range(buffer: &'a wgpu::Buffer, offset: u64, size: NonZeroU64) -> Self {
        Slice {
            buffer,
            offset,
            size: Some(size),
        }
    }

    pub fn buffer(&self) -> &'a wgpu::Buffer {
        self.buffer
    }

    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Bytes bound.
    pub fn size(&self) -> u64 {
        self.size
            .map_or(self.buffer.size() - self.offset, NonZeroU64::get)
    }

    /// What the bind group cache tells bindings of one buffer apart by.
    pub(crate) fn range_key(&self) -> (u64, Option<NonZeroU64>) {
        (self.offset, self.size)
    }

    pub(crate) fn binding(&self) -> wgpu::BufferBinding<'a> {
        wgpu::BufferBinding {
            buffer: self.buffer,
            offset: self.offset,
            size: self.size,
        }
    }
}

impl<'a> From<&'a wgpu::Buffer> for Slice<'a> {
    fn from(buffer: &'a wgpu::Buffer) -> Self {
        Slice::whole(buffer)
    }
}

/// What [`super::WgpuContext::dispatch`] binds: whole buffers, slices of them, or
/// pooled buffers (a planned one as its range).
pub trait Bindable {
    fn slice(&self) -> Slice<'_>;
}

impl Bindable for &wgpu::Buffer {
    fn slice(&self) -> Slice<'_> {
        Slice::whole(self)
    }
}

impl Bindable for Slice<'_> {
    fn slice(&self) -> Slice<'_> {
        *self
    }
}

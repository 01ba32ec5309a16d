//! Kernels and their uniform parameters.
//!
//! A [`Kernel`] is a WGSL source and entry point. Every kernel declares its shape
//! parameters as `@group(0) @binding(0) var<uniform>` and its buffers at bindings
//! 1, 2, ... in the order the launcher passes them.
//!
//! Parameters live in [`ParamsArena`]: a few persistent uniform buffers carved into
//! 256-byte slots, one slot a dispatch. The slots' bytes are written with one
//! `write_buffer` per chunk just before the submit that reads them. That is rule 3's
//! hazard turned to use: the write lands ahead of this submit's commands (which is
//! what they need) and after the previous submit's (which are done with the old
//! values), so parameters cost no buffer creations after the first steps.

use super::context::WgpuContext;

/// A compute kernel: WGSL source and entry point, cached by `name`.
#[derive(Clone, Copy, Debug)]
pub struct Kernel {
    /// Unique across the crate: the pipeline cache's key.
    pub name: &'static str,
    pub source: &'static str,
    pub entry: &'static str,
    /// Compile without the bounds checks (and loop bounding) that native wgpu adds
    /// to every storage and array access; they cost real GPUs a lot in hot loops.
    /// Only for kernels whose every index is guarded in the WGSL and whose launcher
    /// checks its buffers' sizes, with parity tests on shapes that hit the guards.
    /// The browser ignores it (WebGPU implementations keep their own checks).
    pub unchecked: bool,
}

/// Workgroup counts covering `n` threads in workgroups of `size`, spread over x and
/// y when x alone would pass WebGPU's 65535 limit. Kernels rebuild the linear index
/// as `gid.x + gid.y * (nwg.x * size)` (with `@builtin(num_workgroups) nwg`) and
/// return when it is `>= n`.
pub fn grid_1d(n: u32, size: u32) -> [u32; 3] {
    let groups = n.div_ceil(size).max(1);
    if groups <= 65535 {
        [groups, 1, 1]
    } else {
        let y = groups.div_ceil(65535);
        [groups.div_ceil(y), y, 1]
    }
}

const CHUNK_BYTES: usize = 64 * 1024;

pub(crate) struct ParamsArena {
    align: usize,
    chunks: Vec<wgpu::Buffer>,
    shadow: Vec<Vec<u8>>,
    /// Chunk being filled and its used bytes.
    current: usize,
    used: usize,
}

impl ParamsArena {
    pub fn new(align: usize) -> Self {
        ParamsArena {
            align: align.max(16),
            chunks: Vec::new(),
            shadow: Vec::new(),
            current: 0,
            used: 0,
        }
    }

    /// Stores `bytes` in a free slot; returns the chunk, offset and binding size.
    pub fn push(
        &mut self,
        ctx: &WgpuContext,
        bytes: &[u8],
    ) -> (wgpu::Buffer, u64, std::num::NonZeroU64) {
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
                let usage = wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST;
                self.chunks
                    .push(ctx.create_buffer(CHUNK_BYTES as u64, usage));
                self.shadow.push(vec![0; CHUNK_BYTES]);
            }
        }
        let offset = self.used;
        self.shadow[self.current][offset..offset + bytes.len()].copy_from_slice(bytes);
        self.used += stride;
        let size = std::num::NonZeroU64::new(size as u64).expect("padded to 16");
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
        self.current = 0;
        self.used = 0;
    }
}

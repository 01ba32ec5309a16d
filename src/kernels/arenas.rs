//! The arenas on the GPU: a model's parameters ([`ParamArena`]), with their f16
//! copy where the f16 matmuls read one ([`F16Weights`]), and one step's weight
//! gradients ([`GradArena`]) in the chunks of their layouts ([`crate::arena`]).
//! Kernels read a weight as a range of its chunk ([`Slice`]), so they see the tensor
//! alone; the optimizer binds each chunk once.

use std::cell::Cell;
use std::num::NonZeroU64;

use crate::arena::{ArenaLayout, GradLayout};
use crate::error::{Error, Result};
use crate::gpu::{grid_1d, Kernel, PooledBuffer, Slice, WgpuContext};

/// Where a weight gradient of `len` floats goes: `range`, with room for `room` split
/// partials (`room * len` floats; 1: its value only).
#[derive(Clone, Copy, Debug)]
pub struct GradDest<'a> {
    pub range: Slice<'a>,
    pub len: usize,
    pub room: usize,
}

impl<'a> GradDest<'a> {
    /// The range of the gradient's value (its first `len` floats).
    pub fn value(&self) -> Slice<'a> {
        self.first(1)
    }

    /// The first `splits * len` floats of the range.
    pub(crate) fn first(&self, splits: usize) -> Slice<'a> {
        let bytes = NonZeroU64::new((splits * self.len).max(1) as u64 * 4).expect("non-zero");
        Slice::range(self.range.buffer(), self.range.offset(), bytes)
    }
}

/// A model's parameters on the GPU, in the chunks of an [`ArenaLayout`]. Written at
/// creation and kept for the trainer's life (never recycled: rule 3 in
/// [`crate::gpu`]); the optimizer updates them in place.
pub struct ParamArena {
    layout: ArenaLayout,
    chunks: Vec<PooledBuffer>,
    /// Their f16 copy, where the context's f16 matmuls read one.
    halves: Option<Halves>,
}

/// The f16 copy of the parameters: a buffer a chunk, float i of a chunk at half i
/// (so a tensor's copy starts at half its byte offset), rewritten from the
/// parameters by [`ParamArena::f16_weights`] when they changed since.
struct Halves {
    chunks: Vec<PooledBuffer>,
    stale: Cell<bool>,
}

/// param_halves.wgsl: a chunk of the parameters rounded to f16.
const PARAM_HALVES: Kernel = Kernel {
    name: "param_halves",
    source: concat!("enable f16;\n", include_str!("param_halves.wgsl")),
    entry: "main",
    unchecked: false,
};

/// Every kernel of the arenas.
pub(super) fn catalog() -> Vec<Kernel> {
    vec![PARAM_HALVES]
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct HalvesParams {
    n: u32,
    _pad: [u32; 3],
}

/// The f16 copy of a [`ParamArena`]'s weights, as the matmuls look it up
/// ([`F16Weights::of`]).
#[derive(Clone, Copy)]
pub struct F16Weights<'a> {
    params: &'a ParamArena,
    halves: &'a Halves,
    /// The device's `min_storage_buffer_offset_alignment`.
    align: u64,
}

impl<'a> F16Weights<'a> {
    /// The f16 copy of `weight` (a tensor of the arena), padded to whole vec4s of
    /// halves; `None` for a range of another buffer, and where the copy's offset (half
    /// the weight's) is not one the device binds at: those products read the f32
    /// weight.
    pub fn of(&self, weight: Slice) -> Option<Slice<'a>> {
        let c = self
            .params
            .chunks
            .iter()
            .position(|b| b.slice().buffer() == weight.buffer())?;
        let half = &self.halves.chunks[c];
        let offset = weight
            .offset()
            .checked_sub(self.params.chunks[c].offset())?
            / 2;
        if !(half.offset() + offset).is_multiple_of(self.align) {
            return None;
        }
        // 4 floats (16 bytes) a vec4 of halves (8): the chunk's copy has room for the
        // last one (its length is rounded up to whole vec4s, and tensors start at
        // multiples of 4 floats).
        let size = weight.size().div_ceil(16) * 8;
        Some(half.range(offset, NonZeroU64::new(size)?))
    }
}

impl ParamArena {
    /// `tensors` uploaded, laid out for the device of `ctx`.
    pub fn upload(ctx: &WgpuContext, tensors: &[Vec<f32>]) -> Result<Self> {
        let lens: Vec<usize> = tensors.iter().map(Vec::len).collect();
        ParamArena::upload_in(
            ctx,
            ArenaLayout::new(&lens, ctx.max_binding_size())?,
            tensors,
        )
    }

    /// `tensors` uploaded in `layout` (one of their lengths).
    pub fn upload_in(ctx: &WgpuContext, layout: ArenaLayout, tensors: &[Vec<f32>]) -> Result<Self> {
        layout.check(tensors, "parameters")?;
        let chunks = layout
            .pack(1, &[tensors])
            .iter()
            .map(|host| ctx.upload(host))
            .collect();
        Ok(ParamArena {
            layout,
            chunks,
            halves: None,
        })
    }

    /// These parameters with an f16 copy of themselves, which [`Self::f16_weights`]
    /// keeps up to date: for a context whose f16 products read one
    /// (`kernels::matmul::reads_f16_weights`, which the trainer asks).
    pub fn with_f16_copy(mut self, ctx: &WgpuContext) -> Self {
        self.halves = Some(Halves {
            // Whole vec4s of halves (8 bytes each), written before anything reads them.
            chunks: (self.layout.chunk_lens.iter())
                .map(|&n| ctx.upload(&vec![0u32; n.div_ceil(4) * 2]))
                .collect(),
            stale: Cell::new(true),
        });
        self
    }

    /// The f16 copy of the weights, rewritten first where the parameters changed
    /// since it was last written (one pass a chunk, recorded before what reads it);
    /// `None` without one ([`Self::with_f16_copy`]).
    pub fn f16_weights(&self, ctx: &WgpuContext) -> Option<F16Weights<'_>> {
        let halves = self.halves.as_ref()?;
        if halves.stale.replace(false) {
            for ((src, dst), &n) in self
                .chunks
                .iter()
                .zip(&halves.chunks)
                .zip(&self.layout.chunk_lens)
            {
                let params = HalvesParams {
                    n: u32::try_from(n).expect("a chunk is one binding: under 2^32 floats"),
                    _pad: [0; 3],
                };
                let groups = grid_1d(params.n.div_ceil(4), 256);
                ctx.dispatch(&PARAM_HALVES, &params, &[src, dst], groups);
            }
        }
        Some(F16Weights {
            params: self,
            halves,
            align: u64::from(ctx.limits().min_storage_buffer_offset_alignment).max(4),
        })
    }

    pub fn layout(&self) -> &ArenaLayout {
        &self.layout
    }

    /// Tensor `i`, as kernels bind it.
    pub fn tensor(&self, i: usize) -> Slice<'_> {
        let s = self.layout.slots[i];
        let size = NonZeroU64::new(s.len.max(1) as u64 * 4).expect("at least one float");
        self.chunks[s.chunk].range(s.offset as u64 * 4, size)
    }

    /// Every tensor, in order.
    pub fn tensors(&self) -> Vec<Slice<'_>> {
        (0..self.layout.len()).map(|i| self.tensor(i)).collect()
    }

    /// The buffer of chunk `c` (the optimizer binds it whole, and writes it: the f16
    /// copy is rewritten before its next use).
    pub(crate) fn chunk(&self, c: usize) -> &PooledBuffer {
        if let Some(halves) = &self.halves {
            halves.stale.set(true);
        }
        &self.chunks[c]
    }

    /// Every tensor, downloaded (one read a chunk).
    pub async fn download(&self, ctx: &WgpuContext) -> Result<Vec<Vec<f32>>> {
        let mut chunks = Vec::with_capacity(self.chunks.len());
        for (buffer, &n) in self.chunks.iter().zip(&self.layout.chunk_lens) {
            chunks.push(ctx.download::<f32>(buffer, n).await?);
        }
        Ok(self.layout.unpack(0, &chunks))
    }
}

/// One step's weight gradients, in the chunks of a [`GradLayout`] drawn from the pool
/// (back to it when the step lets them go). The backward writes each into its slot
/// ([`GradArena::dest`]) and notes how many partials it left there
/// ([`GradArena::set_splits`]); the optimizer binds each chunk once.
pub struct GradArena {
    layout: GradLayout,
    chunks: Vec<PooledBuffer>,
    splits: Vec<std::cell::Cell<usize>>,
    /// The parameters' chunks, to find a weight's slot by its range.
    params: Vec<wgpu::Buffer>,
    param_offsets: Vec<(usize, u64)>,
}

impl GradArena {
    /// Uninitialized gradients for `params` (every slot is written by the backward
    /// before anything reads it).
    pub fn new(ctx: &WgpuContext, layout: &GradLayout, params: &ParamArena) -> Self {
        let chunks = layout
            .chunk_lens
            .iter()
            .map(|&n| ctx.create_pooled(n * 4))
            .collect();
        GradArena::with_chunks(layout, params, chunks)
    }

    /// Gradients with the given contents: `parts[i]` is `splits[i]` partials of
    /// tensor i (within its room), as the backward would leave them (for tests).
    pub fn upload(
        ctx: &WgpuContext,
        layout: &GradLayout,
        params: &ParamArena,
        parts: &[Vec<f32>],
        splits: &[usize],
    ) -> Result<Self> {
        let fits = parts.len() == layout.len()
            && splits.len() == layout.len()
            && layout
                .slots
                .iter()
                .zip(parts.iter().zip(splits))
                .all(|((s, room), (p, &n))| (1..=*room).contains(&n) && p.len() == n * s.len);
        if !fits {
            return Err(Error::Config(
                "gradients must be one tensor a parameter, each its length times a number \
                 of partials within its slot's room"
                    .into(),
            ));
        }
        let mut hosts: Vec<Vec<f32>> = layout.chunk_lens.iter().map(|&n| vec![0.0; n]).collect();
        for ((slot, _), part) in layout.slots.iter().zip(parts) {
            hosts[slot.chunk][slot.offset..slot.offset + part.len()].copy_from_slice(part);
        }
        let chunks = hosts.iter().map(|h| ctx.upload(h)).collect();
        let arena = GradArena::with_chunks(layout, params, chunks);
        for (i, &n) in splits.iter().enumerate() {
            arena.set_splits(i, n);
        }
        Ok(arena)
    }

    fn with_chunks(layout: &GradLayout, params: &ParamArena, chunks: Vec<PooledBuffer>) -> Self {
        assert_eq!(
            layout
                .slots
                .iter()
                .map(|(s, _)| (s.chunk, s.len))
                .collect::<Vec<_>>(),
            params
                .layout
                .slots
                .iter()
                .map(|s| (s.chunk, s.len))
                .collect::<Vec<_>>(),
            "gradients laid out for these parameters"
        );
        GradArena {
            splits: (0..layout.len()).map(|_| std::cell::Cell::new(1)).collect(),
            params: params
                .chunks
                .iter()
                .map(|c| c.slice().buffer().clone())
                .collect(),
            param_offsets: params
                .layout
                .slots
                .iter()
                .map(|s| (s.chunk, s.offset as u64 * 4))
                .collect(),
            layout: layout.clone(),
            chunks,
        }
    }

    pub fn layout(&self) -> &GradLayout {
        &self.layout
    }

    /// The tensor whose parameters `weight` is (a range of the arena's parameters).
    pub fn index_of(&self, weight: Slice) -> Option<usize> {
        let chunk = self.params.iter().position(|b| b == weight.buffer())?;
        self.param_offsets
            .iter()
            .position(|&key| key == (chunk, weight.offset()))
    }

    /// Where tensor `i`'s gradient goes.
    pub fn dest(&self, i: usize) -> GradDest<'_> {
        let (s, room) = self.layout.slots[i];
        let size = NonZeroU64::new((room * s.len).max(1) as u64 * 4).expect("non-zero");
        GradDest {
            range: self.chunks[s.chunk].range(s.offset as u64 * 4, size),
            len: s.len,
            room,
        }
    }

    /// Notes that tensor `i`'s gradient was left as `splits` partials (1: its value).
    pub fn set_splits(&self, i: usize, splits: usize) {
        assert!(
            (1..=self.layout.room(i)).contains(&splits),
            "tensor {i}: {splits} partials in a slot with room for {}",
            self.layout.room(i)
        );
        self.splits[i].set(splits);
    }

    /// How many partials tensor `i`'s gradient is (1: its value).
    pub fn splits(&self, i: usize) -> usize {
        self.splits[i].get()
    }

    /// Chunk `c`'s buffer (the optimizer binds it whole).
    pub(crate) fn chunk(&self, c: usize) -> &PooledBuffer {
        &self.chunks[c]
    }

    /// Offset in floats of tensor `i` in its chunk.
    pub(crate) fn offset(&self, i: usize) -> usize {
        self.layout.slots[i].0.offset
    }

    /// Every gradient's value, downloaded; an error for one left as partials.
    pub async fn download(&self, ctx: &WgpuContext) -> Result<Vec<Vec<f32>>> {
        if let Some(i) = (0..self.layout.len()).find(|&i| self.splits(i) != 1) {
            return Err(Error::Config(format!(
                "gradient {i} is {} partials, not its value",
                self.splits(i)
            )));
        }
        let mut chunks = Vec::with_capacity(self.chunks.len());
        for (buffer, &n) in self.chunks.iter().zip(&self.layout.chunk_lens) {
            chunks.push(ctx.download::<f32>(buffer, n).await?);
        }
        Ok(self
            .layout
            .slots
            .iter()
            .map(|(s, _)| chunks[s.chunk][s.offset..s.offset + s.len].to_vec())
            .collect())
    }
}

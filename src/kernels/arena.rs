//! The parameters in arenas: every tensor of a model packed, at aligned offsets, into
//! as few buffers ("chunks") as the device binds whole, and AdamW's moments in
//! chunks of the same layout.
//!
//! Kernels read a weight as a range of its chunk ([`Slice`]), so they see the tensor
//! alone. The optimizer binds a chunk once for all the tensors in it, where one buffer
//! a tensor would cost a binding each: WebGPU binds 8 to 16 storage buffers a
//! dispatch, so a model's update took a dispatch for every few tensors (AdamW four
//! for `tiny` in a browser, one natively).

use std::num::NonZeroU64;

use super::split_sums::GradDest;
use crate::error::{Error, Result};
use crate::gpu::{PooledBuffer, Slice, WgpuContext};

/// Tensors start at multiples of 64 floats (256 bytes): WebGPU's largest
/// `minStorageBufferOffsetAlignment`, so that any device binds a tensor as a range.
pub const ALIGN_FLOATS: usize = 64;
/// Floats reserved at the head of every chunk. The moments' chunks keep the step's
/// `[norm, scale]` there ([`super::Moments::norm_scale`]); the parameters' stay zero,
/// so that both share one layout and a tensor sits at the same offset in each.
pub const HEADER_FLOATS: usize = ALIGN_FLOATS;

/// Where one tensor is: its chunk, its offset in floats, its length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slot {
    pub chunk: usize,
    pub offset: usize,
    pub len: usize,
}

/// Where each tensor of a model sits in its arenas. A chunk is at most half of the
/// largest binding: AdamW binds a chunk's two moments as one buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArenaLayout {
    pub(crate) slots: Vec<Slot>,
    /// Floats in each chunk, header included.
    pub(crate) chunk_lens: Vec<usize>,
}

impl ArenaLayout {
    /// Tensors of `lens` floats, in order, for a device that binds at most
    /// `max_binding_bytes` at once.
    pub fn new(lens: &[usize], max_binding_bytes: u64) -> Result<Self> {
        let max = max_binding_bytes / 8;
        let (header, align) = (HEADER_FLOATS as u64, ALIGN_FLOATS as u64);
        let mut slots = Vec::with_capacity(lens.len());
        let mut chunk_lens = Vec::new();
        // End of the last tensor in the chunk being filled, and where the next may start.
        let (mut end, mut next) = (header, header);
        for (i, &len) in lens.iter().enumerate() {
            let len64 = len as u64;
            if header + len64 > max {
                return Err(Error::TooLarge(format!(
                    "parameter tensor {i} has {len} floats; with the arena's {header}-float \
                     header its two AdamW moments need {} bytes in one binding, and this \
                     device binds at most {max_binding_bytes} bytes: lower width or vocabulary",
                    (header + len64) * 8,
                )));
            }
            if next + len64 > max {
                chunk_lens.push(end as usize);
                next = header;
            }
            slots.push(Slot {
                chunk: chunk_lens.len(),
                offset: next as usize,
                len,
            });
            end = next + len64;
            next = end.next_multiple_of(align);
        }
        chunk_lens.push(end as usize);
        Ok(ArenaLayout { slots, chunk_lens })
    }

    /// The smallest binding in bytes that holds a tensor of `len` floats in a chunk
    /// of its own (tests use it to make models that need several chunks).
    pub fn binding_bytes_for(len: usize) -> u64 {
        (HEADER_FLOATS + len) as u64 * 8
    }

    /// Tensors laid out.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Buffers each arena is split into (1 unless the model passes half of the
    /// largest binding).
    pub fn chunks(&self) -> usize {
        self.chunk_lens.len()
    }

    /// Host copies of each chunk, `copies` of its length side by side (2: m then v),
    /// with `tensors[i]` at tensor i's place in copy `copy`, zeros elsewhere.
    pub(crate) fn pack(&self, copies: usize, tensors: &[&[Vec<f32>]]) -> Vec<Vec<f32>> {
        let mut hosts: Vec<Vec<f32>> = self
            .chunk_lens
            .iter()
            .map(|&n| vec![0.0; copies * n])
            .collect();
        for (copy, values) in tensors.iter().enumerate() {
            for (slot, v) in self.slots.iter().zip(values.iter()) {
                let at = copy * self.chunk_lens[slot.chunk] + slot.offset;
                hosts[slot.chunk][at..at + slot.len].copy_from_slice(v);
            }
        }
        hosts
    }

    /// The tensors of copy `copy` of chunks downloaded whole.
    pub(crate) fn unpack(&self, copy: usize, chunks: &[Vec<f32>]) -> Vec<Vec<f32>> {
        self.slots
            .iter()
            .map(|s| {
                let at = copy * self.chunk_lens[s.chunk] + s.offset;
                chunks[s.chunk][at..at + s.len].to_vec()
            })
            .collect()
    }

    /// Checks that `tensors` has one tensor of each slot's length.
    pub(crate) fn check(&self, tensors: &[Vec<f32>], what: &str) -> Result<()> {
        let lens_match = tensors.len() == self.slots.len()
            && self
                .slots
                .iter()
                .zip(tensors)
                .all(|(s, t)| s.len == t.len());
        if lens_match {
            return Ok(());
        }
        Err(Error::Config(format!(
            "{what} must be one tensor a parameter, of its length: want {} tensors of \
             {:?} floats, got {} of {:?}",
            self.slots.len(),
            self.slots.iter().map(|s| s.len).collect::<Vec<_>>(),
            tensors.len(),
            tensors.iter().map(Vec::len).collect::<Vec<_>>()
        )))
    }
}

/// A model's parameters on the GPU, in the chunks of an [`ArenaLayout`]. Written at
/// creation and kept for the trainer's life (never recycled: rule 3 in
/// [`crate::gpu`]); the optimizer updates them in place.
pub struct ParamArena {
    layout: ArenaLayout,
    chunks: Vec<PooledBuffer>,
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
        Ok(ParamArena { layout, chunks })
    }

    pub fn layout(&self) -> &ArenaLayout {
        &self.layout
    }

    /// Tensor `i`, as kernels bind it.
    pub fn tensor(&self, i: usize) -> Slice<'_> {
        let s = self.layout.slots[i];
        let size = NonZeroU64::new(s.len.max(1) as u64 * 4).expect("at least one float");
        Slice::range(&self.chunks[s.chunk], s.offset as u64 * 4, size)
    }

    /// Every tensor, in order.
    pub fn tensors(&self) -> Vec<Slice<'_>> {
        (0..self.layout.len()).map(|i| self.tensor(i)).collect()
    }

    /// The buffer of chunk `c` (the optimizer binds it whole).
    pub(crate) fn chunk(&self, c: usize) -> &PooledBuffer {
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

/// Where a step's weight gradients go: for each chunk of the parameters, a chunk of
/// gradients holding that chunk's tensors, each with room for some split partials
/// (a gradient the backward splits is left as partials for the optimizer to add,
/// where it has room; [`super::SplitSums::OPTIMIZER_SPLITS`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GradLayout {
    /// Per tensor: its slot (the offset in floats, the length) and its room.
    slots: Vec<(Slot, usize)>,
    chunk_lens: Vec<usize>,
}

impl GradLayout {
    /// Slots for the tensors of `params`, tensor i with room for `room[i]` partials,
    /// less where a chunk would pass `max_binding_bytes` (there 1: its value).
    pub fn new(params: &ArenaLayout, room: &[usize], max_binding_bytes: u64) -> Self {
        assert_eq!(room.len(), params.len(), "a room for each tensor");
        // In u64: on wasm32 a few partials of a large tensor pass usize.
        let max = max_binding_bytes / 4;
        let mut chunk_lens = vec![0usize; params.chunks()];
        let slots = params
            .slots
            .iter()
            .zip(room)
            .map(|(p, &room)| {
                let end = &mut chunk_lens[p.chunk];
                let offset = end.next_multiple_of(ALIGN_FLOATS);
                // A chunk with every tensor's value fits (half the binding at most).
                let fits = |room: usize| offset as u64 + room as u64 * p.len as u64 <= max;
                let room = if room > 1 && fits(room) { room } else { 1 };
                *end = offset + room * p.len;
                let slot = Slot {
                    chunk: p.chunk,
                    offset,
                    len: p.len,
                };
                (slot, room)
            })
            .collect();
        GradLayout {
            slots,
            chunk_lens: chunk_lens.into_iter().map(|n| n.max(1)).collect(),
        }
    }

    /// Every tensor with room for its value only.
    pub fn values_only(params: &ArenaLayout) -> Self {
        GradLayout::new(params, &vec![1; params.len()], u64::MAX)
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Partials tensor `i` has room for.
    pub fn room(&self, i: usize) -> usize {
        self.slots[i].1
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
                "gradients must be one tensor a parameter, each its length times a number                  of partials within its slot's room"
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
            params: params.chunks.iter().map(|c| (**c).clone()).collect(),
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
            range: Slice::range(&self.chunks[s.chunk], s.offset as u64 * 4, size),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_packs_tensors_into_chunks_of_half_the_binding() {
        // Chunks of at most 64 + 80 floats: the header and up to 80 floats of tensors.
        let max = ArenaLayout::binding_bytes_for(80);
        let layout = ArenaLayout::new(&[3, 5, 70, 80, 1], max).unwrap();
        let at = |chunk, offset, len| Slot { chunk, offset, len };
        assert_eq!(
            layout.slots,
            [
                at(0, 64, 3),
                at(0, 128, 5),
                at(1, 64, 70),
                at(2, 64, 80),
                at(3, 64, 1)
            ]
        );
        assert_eq!(layout.chunk_lens, [133, 134, 144, 65]);
        let err = ArenaLayout::new(&[81], max).unwrap_err().to_string();
        assert!(err.contains(&format!("binds at most {max} bytes")), "{err}");
        let empty = ArenaLayout::new(&[], max).unwrap();
        assert!(empty.is_empty());
        assert_eq!(empty.chunk_lens, [HEADER_FLOATS]);
    }

    #[test]
    fn gradient_slots_follow_the_parameters_chunks_with_room_for_partials() {
        // Two chunks of parameters: [3, 5] and [70].
        let params = ArenaLayout::new(&[3, 5, 70], ArenaLayout::binding_bytes_for(80)).unwrap();
        assert_eq!(params.chunks(), 2);
        let grads = GradLayout::new(&params, &[1, 4, 2], 1 << 20);
        let at = |chunk, offset, len| Slot { chunk, offset, len };
        assert_eq!(
            grads.slots,
            [(at(0, 0, 3), 1), (at(0, 64, 5), 4), (at(1, 0, 70), 2)]
        );
        assert_eq!(grads.chunk_lens, [84, 140]);
        // Room that would pass the binding (here 100 floats) is taken back.
        let tight = GradLayout::new(&params, &[1, 4, 2], 400);
        assert_eq!((0..3).map(|i| tight.room(i)).collect::<Vec<_>>(), [1, 4, 1]);
        assert_eq!(tight.chunk_lens, [84, 70]);
        let values = GradLayout::values_only(&params);
        assert!((0..3).all(|i| values.room(i) == 1));
    }

    #[test]
    fn packing_places_each_copy_at_its_offsets() {
        let layout = ArenaLayout::new(&[2, 3], 1 << 20).unwrap();
        let m = vec![vec![1.0, 2.0], vec![3.0, 4.0, 5.0]];
        let v = vec![vec![6.0, 7.0], vec![8.0, 9.0, 10.0]];
        let hosts = layout.pack(2, &[&m, &v]);
        assert_eq!(hosts.len(), 1);
        let n = layout.chunk_lens[0];
        assert_eq!(n, 128 + 3);
        assert_eq!(hosts[0][64..66], [1.0, 2.0]);
        assert_eq!(hosts[0][n + 128..n + 131], [8.0, 9.0, 10.0]);
        assert_eq!(hosts[0].iter().filter(|&&x| x != 0.0).count(), 10);
        assert_eq!(layout.unpack(0, &hosts), m);
        assert_eq!(layout.unpack(1, &hosts), v);
        assert!(layout.check(&m, "x").is_ok());
        assert!(layout.check(&v[..1], "x").is_err());
        assert!(layout.check(&[vec![1.0, 2.0], vec![1.0]], "x").is_err());
    }
}

//! Where each parameter tensor sits in the arenas: every tensor of a model packed,
//! at aligned offsets, into as few buffers ("chunks") as a device binds whole, and
//! the gradients' slots beside them, with room for split partials. Pure
//! arithmetic: the buffers themselves are [`crate::kernels::ParamArena`],
//! [`crate::kernels::GradArena`] and [`crate::kernels::Moments`].
//!
//! The optimizer binds a chunk once for all the tensors in it, where one buffer a
//! tensor would cost a binding each: WebGPU binds 8 to 16 storage buffers a
//! dispatch, so a model's update took a dispatch for every few tensors.

use crate::error::{Error, Result};

/// Tensors start at multiples of 128 floats (512 bytes): twice WebGPU's largest
/// `minStorageBufferOffsetAlignment` (256), so that any device binds a tensor as a
/// range, and its f16 copy too, which starts at half its offset
/// ([`crate::kernels::F16Weights`]).
pub const ALIGN_FLOATS: usize = 128;
/// Floats reserved at the head of every chunk. The moments' chunks keep the step's
/// `[norm, scale]` there ([`crate::kernels::Moments::norm_scale`]); the parameters' stay zero,
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

/// Where a step's weight gradients go: for each chunk of the parameters, a chunk of
/// gradients holding that chunk's tensors, each with room for some split partials
/// (a gradient the backward splits is left as partials for the optimizer to add,
/// where it has room; [`crate::kernels::SplitSums::OPTIMIZER_SPLITS`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GradLayout {
    /// Per tensor: its slot (the offset in floats, the length) and its room.
    pub(crate) slots: Vec<(Slot, usize)>,
    pub(crate) chunk_lens: Vec<usize>,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The alignment, in which the expected offsets are written.
    const A: usize = ALIGN_FLOATS;

    #[test]
    fn layout_packs_tensors_into_chunks_of_half_the_binding() {
        // Chunks of at most the header, one aligned stretch and 80 floats more.
        let max = ArenaLayout::binding_bytes_for(A + 80);
        let layout = ArenaLayout::new(&[3, 5, 70, 80, 1], max).unwrap();
        let at = |chunk, offset, len| Slot { chunk, offset, len };
        assert_eq!(
            layout.slots,
            [
                at(0, A, 3),
                at(0, 2 * A, 5),
                at(1, A, 70),
                at(1, 2 * A, 80),
                at(2, A, 1)
            ]
        );
        assert_eq!(layout.chunk_lens, [2 * A + 5, 2 * A + 80, A + 1]);
        let err = ArenaLayout::new(&[A + 81], max).unwrap_err().to_string();
        assert!(err.contains(&format!("binds at most {max} bytes")), "{err}");
        let empty = ArenaLayout::new(&[], max).unwrap();
        assert!(empty.is_empty());
        assert_eq!(empty.chunk_lens, [HEADER_FLOATS]);
    }

    #[test]
    fn gradient_slots_follow_the_parameters_chunks_with_room_for_partials() {
        // Two chunks of parameters: [3, 5] and [70].
        let params = ArenaLayout::new(&[3, 5, 70], ArenaLayout::binding_bytes_for(A + 80)).unwrap();
        assert_eq!(params.chunks(), 2);
        let grads = GradLayout::new(&params, &[1, 4, 3], 1 << 20);
        let at = |chunk, offset, len| Slot { chunk, offset, len };
        assert_eq!(
            grads.slots,
            [(at(0, 0, 3), 1), (at(0, A, 5), 4), (at(1, 0, 70), 3)]
        );
        assert_eq!(grads.chunk_lens, [A + 20, 210]);
        // Room that would pass the binding (here A + 36 floats) is taken back.
        let tight = GradLayout::new(&params, &[1, 4, 3], 4 * (A as u64 + 36));
        assert_eq!((0..3).map(|i| tight.room(i)).collect::<Vec<_>>(), [1, 4, 1]);
        assert_eq!(tight.chunk_lens, [A + 20, 70]);
        let values = GradLayout::values_only(&params);
        assert!((0..3).all(|i| values.room(i) == 1));
    }

    /// A weight's f16 copy starts at half its offset (`kernels::F16Weights`): at
    /// tensor offsets of 512 bytes that is a multiple of 256, where every WebGPU
    /// device binds.
    #[test]
    fn every_f16_copy_starts_where_any_device_binds() {
        let layout = ArenaLayout::new(&[3, 5, 70, 1000, 1, 129], 1 << 20).unwrap();
        for slot in &layout.slots {
            assert_eq!((slot.offset * 4 / 2) % 256, 0, "{slot:?}");
        }
    }

    #[test]
    fn packing_places_each_copy_at_its_offsets() {
        let layout = ArenaLayout::new(&[2, 3], 1 << 20).unwrap();
        let m = vec![vec![1.0, 2.0], vec![3.0, 4.0, 5.0]];
        let v = vec![vec![6.0, 7.0], vec![8.0, 9.0, 10.0]];
        let hosts = layout.pack(2, &[&m, &v]);
        assert_eq!(hosts.len(), 1);
        let n = layout.chunk_lens[0];
        assert_eq!(n, 2 * A + 3);
        assert_eq!(hosts[0][A..A + 2], [1.0, 2.0]);
        assert_eq!(hosts[0][n + 2 * A..n + 2 * A + 3], [8.0, 9.0, 10.0]);
        assert_eq!(hosts[0].iter().filter(|&&x| x != 0.0).count(), 10);
        assert_eq!(layout.unpack(0, &hosts), m);
        assert_eq!(layout.unpack(1, &hosts), v);
        assert!(layout.check(&m, "x").is_ok());
        assert!(layout.check(&v[..1], "x").is_err());
        assert!(layout.check(&[vec![1.0, 2.0], vec![1.0]], "x").is_err());
    }
}

//! Bind groups cached across steps.
//!
//! A steady training step dispatches the same kernels on the same pooled buffers
//! with the same uniform slots, in the same order, so after warm-up every bind group
//! it needs already exists. A bind group names buffers, not their contents, so a
//! pooled buffer handed to a new tensor keeps its bind groups valid. An entry dies
//! with any buffer it binds: the memory manager calls [`BindGroupCache::forget`]
//! whenever it lets a buffer go.
//!
//! A lookup clones nothing. On the web a `wgpu::Buffer` or `wgpu::BindGroup` clone
//! copies a JS reference (an externref table slot taken, and freed on drop), and a
//! dispatch binds ten or so buffers; so the lookup hashes and compares borrowed
//! buffers (by wgpu's identifiers) and their ranges, and hands out the group behind
//! an `Arc`.

use std::hash::{Hash, Hasher};
use std::num::NonZeroU64;
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHasher};

use super::slice::Bindable;

/// Where a dispatch's uniform parameters are: the arena's chunk index, offset and
/// size. A chunk index names one buffer for the arena's lifetime (the chunks go only
/// all together, each forgotten then).
pub(crate) type UniformSlot = (usize, u64, u64);

/// A pipeline: its kernel's name (unique per kernel) and whether it binds every
/// storage operand `read_write` (the pipeline cache's key; the two variants'
/// layouts differ).
pub(crate) type PipelineKey = (&'static str, bool);

struct Entry {
    kernel: PipelineKey,
    uniform: UniformSlot,
    /// The uniform chunk, then the storage buffers at bindings 1...
    buffers: Vec<wgpu::Buffer>,
    /// The ranges bound of `buffers[1..]` (offset, size; `None`: to the end).
    ranges: Vec<(u64, Option<NonZeroU64>)>,
    group: Arc<wgpu::BindGroup>,
}

impl Entry {
    fn binds<B: Bindable>(&self, kernel: PipelineKey, uniform: UniformSlot, bound: &[B]) -> bool {
        self.kernel == kernel
            && self.uniform == uniform
            && self.ranges.len() == bound.len()
            && self.buffers[1..]
                .iter()
                .zip(&self.ranges)
                .zip(bound)
                .all(|((buffer, range), b)| {
                    let s = b.slice();
                    buffer == s.buffer() && *range == s.range_key()
                })
    }
}

/// Entries kept before the cache starts over (buffers that never reach the memory
/// manager, made by hand and passed to `dispatch`, are never forgotten otherwise).
const MAX_ENTRIES: usize = 16 * 1024;

#[derive(Default)]
pub(crate) struct BindGroupCache {
    /// Entries by the hash of what they bind (a bucket holds the rare collisions).
    groups: FxHashMap<u64, Vec<Entry>>,
    entries: usize,
    /// Buffer -> the hashes of the entries that bind it, to forget them with it.
    by_buffer: FxHashMap<wgpu::Buffer, Vec<u64>>,
}

fn key_hash<B: Bindable>(kernel: PipelineKey, uniform: UniformSlot, bound: &[B]) -> u64 {
    let mut h = FxHasher::default();
    kernel.hash(&mut h);
    uniform.hash(&mut h);
    for b in bound {
        let s = b.slice();
        s.buffer().hash(&mut h);
        s.range_key().hash(&mut h);
    }
    h.finish()
}

impl BindGroupCache {
    /// The bind group of `kernel`'s pipeline with the uniform slot at binding 0 and `bound`
    /// (buffers or ranges of them) at 1... On a miss `create` makes it, given the
    /// slot's chunk from `chunk`. Returns it and whether it was created.
    pub fn get<B: Bindable>(
        &mut self,
        kernel: PipelineKey,
        uniform: UniformSlot,
        bound: &[B],
        chunk: impl FnOnce() -> wgpu::Buffer,
        create: impl FnOnce(&wgpu::Buffer) -> wgpu::BindGroup,
    ) -> (Arc<wgpu::BindGroup>, bool) {
        let hash = key_hash(kernel, uniform, bound);
        if let Some(entry) = self
            .groups
            .get(&hash)
            .and_then(|bucket| bucket.iter().find(|e| e.binds(kernel, uniform, bound)))
        {
            return (entry.group.clone(), false);
        }
        if self.entries >= MAX_ENTRIES {
            self.groups.clear();
            self.by_buffer.clear();
            self.entries = 0;
        }
        let chunk = chunk();
        #[allow(clippy::arc_with_non_send_sync)] // wasm32's wgpu types are not Send
        let group = Arc::new(create(&chunk));
        let mut owned = Vec::with_capacity(bound.len() + 1);
        owned.push(chunk);
        owned.extend(bound.iter().map(|b| b.slice().buffer().clone()));
        let ranges = bound.iter().map(|b| b.slice().range_key()).collect();
        for buffer in &owned {
            let hashes = self.by_buffer.entry(buffer.clone()).or_default();
            if !hashes.contains(&hash) {
                hashes.push(hash);
            }
        }
        self.groups.entry(hash).or_default().push(Entry {
            kernel,
            uniform,
            buffers: owned,
            ranges,
            group: group.clone(),
        });
        self.entries += 1;
        (group, true)
    }

    /// Drops every bind group that binds `buffer` (it is being destroyed).
    pub fn forget(&mut self, buffer: &wgpu::Buffer) {
        let Some(hashes) = self.by_buffer.remove(buffer) else {
            return;
        };
        for hash in hashes {
            let Some(bucket) = self.groups.get_mut(&hash) else {
                continue;
            };
            let (gone, kept): (Vec<Entry>, Vec<Entry>) =
                bucket.drain(..).partition(|e| e.buffers.contains(buffer));
            self.entries -= gone.len();
            if kept.is_empty() {
                self.groups.remove(&hash);
            } else {
                *bucket = kept;
            }
            // The other buffers of the dropped entries stop naming this hash, unless
            // a kept entry of the same bucket binds them too.
            let still = self.groups.get(&hash);
            for entry in &gone {
                for other in entry.buffers.iter().filter(|b| *b != buffer) {
                    if still.is_some_and(|bucket| bucket.iter().any(|e| e.buffers.contains(other)))
                    {
                        continue;
                    }
                    if let Some(list) = self.by_buffer.get_mut(other) {
                        list.retain(|h| *h != hash);
                        if list.is_empty() {
                            self.by_buffer.remove(other);
                        }
                    }
                }
            }
        }
    }
}

//! Bind groups cached across steps.
//!
//! A steady training step dispatches the same kernels on the same pooled buffers
//! with the same uniform slots, in the same order, so after warm-up every bind group
//! it needs already exists. A bind group names buffers, not their contents, so a
//! pooled buffer handed to a new tensor keeps its bind groups valid. An entry dies
//! with any buffer it binds: the memory manager calls [`BindGroupCache::forget`]
//! whenever it lets a buffer go.

use rustc_hash::FxHashMap;

/// One binding: the buffer, offset and size (0: the whole buffer).
type Binding = (wgpu::Buffer, u64, u64);

#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    /// The kernel's name (unique per kernel, like the pipeline cache's key).
    kernel: &'static str,
    bindings: Vec<Binding>,
}

/// Entries kept before the cache starts over (buffers that never reach the memory
/// manager, made by hand and passed to `dispatch`, are never forgotten otherwise).
const MAX_ENTRIES: usize = 16 * 1024;

#[derive(Default)]
pub(crate) struct BindGroupCache {
    groups: FxHashMap<Key, wgpu::BindGroup>,
    /// Buffer -> the keys that bind it, to forget them with it.
    by_buffer: FxHashMap<wgpu::Buffer, Vec<Key>>,
}

impl BindGroupCache {
    /// The bind group of `kernel` with `uniform` at binding 0 and `buffers` (whole)
    /// at 1.., made by `create` on a miss. Returns it and whether it was created.
    pub fn get(
        &mut self,
        kernel: &'static str,
        uniform: Binding,
        buffers: &[&wgpu::Buffer],
        create: impl FnOnce() -> wgpu::BindGroup,
    ) -> (wgpu::BindGroup, bool) {
        let mut bindings = Vec::with_capacity(buffers.len() + 1);
        bindings.push(uniform);
        bindings.extend(buffers.iter().map(|b| ((*b).clone(), 0, 0)));
        let key = Key { kernel, bindings };
        if let Some(group) = self.groups.get(&key) {
            return (group.clone(), false);
        }
        if self.groups.len() >= MAX_ENTRIES {
            self.groups.clear();
            self.by_buffer.clear();
        }
        let group = create();
        for (buffer, _, _) in &key.bindings {
            let keys = self.by_buffer.entry(buffer.clone()).or_default();
            if !keys.contains(&key) {
                keys.push(key.clone());
            }
        }
        self.groups.insert(key, group.clone());
        (group, true)
    }

    /// Drops every bind group that binds `buffer` (it is being destroyed).
    pub fn forget(&mut self, buffer: &wgpu::Buffer) {
        let Some(keys) = self.by_buffer.remove(buffer) else {
            return;
        };
        for key in keys {
            self.groups.remove(&key);
            for (other, _, _) in &key.bindings {
                if other != buffer {
                    if let Some(list) = self.by_buffer.get_mut(other) {
                        list.retain(|k| k != &key);
                        if list.is_empty() {
                            self.by_buffer.remove(other);
                        }
                    }
                }
            }
        }
    }
}

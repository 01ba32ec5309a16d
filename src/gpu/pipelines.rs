//! The pipeline cache: each kernel compiled once a context, by name, for the
//! context's reductions ([`source_for`]).

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use rustc_hash::FxHashMap;

use super::binding_access::read_only_bindings;
use super::kernel::Kernel;
use super::lock;
use super::prelude::source_for;

/// A kernel's pipeline and its bind group layout, shared by `Arc`: on the web a
/// clone of either copies a JS reference, and every dispatch needs both.
pub(super) struct Compiled {
    pub pipeline: wgpu::ComputePipeline,
    pub layout: wgpu::BindGroupLayout,
    /// Bit i: the kernel's entry point uses binding i read-only as declared
    /// ([`read_only_bindings`]), whichever way this pipeline binds it.
    pub read_only: u128,
}

/// Pipelines by kernel name and binding rule (every storage binding `read_write`
/// or not), with their bind group layout (asked for once: on the web each
/// `getBindGroupLayout` call makes a new object).
#[derive(Default)]
pub(super) struct Pipelines {
    cache: Mutex<FxHashMap<(&'static str, bool), Arc<Compiled>>>,
}

impl Pipelines {
    /// The pipeline of `kernel` and its bind group layout, built on `device` on first
    /// use (counted in `created`), with the subgroup reductions where `subgroups`,
    /// and every storage binding `read_write` where `read_write` ([`all_read_write`]).
    pub fn get(
        &self,
        device: &wgpu::Device,
        kernel: &Kernel,
        (subgroups, read_write): (bool, bool),
        created: &AtomicU64,
    ) -> Arc<Compiled> {
        let mut cache = lock(&self.cache);
        cache
            .entry((kernel.name, read_write))
            .or_insert_with(|| {
                created.fetch_add(1, Relaxed);
                let source = source_for(kernel, subgroups);
                let read_only = read_only_bindings(&source, kernel.entry);
                let desc = wgpu::ShaderModuleDescriptor {
                    label: Some(kernel.name),
                    source: wgpu::ShaderSource::Wgsl(all_read_write(source, read_write)),
                };
                let module = if kernel.unchecked {
                    // SAFETY: `unchecked` kernels guard every index themselves and
                    // their launchers check buffer sizes (see `Kernel::unchecked`).
                    unsafe {
                        device.create_shader_module_trusted(
                            desc,
                            wgpu::ShaderRuntimeChecks::unchecked(),
                        )
                    }
                } else {
                    device.create_shader_module(desc)
                };
                let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some(kernel.name),
                    layout: None,
                    module: &module,
                    entry_point: Some(kernel.entry),
                    compilation_options: Default::default(),
                    cache: None,
                });
                let layout = pipeline.get_bind_group_layout(0);
                #[allow(clippy::arc_with_non_send_sync)] // wasm32's wgpu types are not Send
                Arc::new(Compiled {
                    pipeline,
                    layout,
                    read_only,
                })
            })
            .clone()
    }
}

/// `source` with its read-only storage bindings made `read_write` (where `on`).
///
/// Under the planned policy a dispatch may read a tensor of the arena it writes,
/// and WebGPU (and wgpu natively) refuses a buffer bound both read-only and
/// writable in one dispatch, even on disjoint ranges. Bindings that are all
/// `read_write` form one usage, which is allowed; live tensors' ranges never
/// overlap, so no two bindings alias.
pub(super) fn all_read_write(source: Cow<'static, str>, on: bool) -> Cow<'static, str> {
    const READ: &str = "var<storage, read>";
    if on && source.contains(READ) {
        Cow::Owned(source.replace(READ, "var<storage, read_write>"))
    } else {
        source
    }
}

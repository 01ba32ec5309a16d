//! What each GPU buffer the memory manager makes is for: its usage flags, whether it
//! is mapped at creation, and its label in counters and traces.

/// What a buffer is for: its usage flags, and its label in counters and traces
/// (in the order of [`super::counters::BuffersByPurpose`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// Pooled storage (tensors): bound as storage, copied in and out, cleared.
    Storage,
    /// Storage filled at creation by [`WgpuContext::upload`](super::WgpuContext::upload);
    /// never pooled (rule 3).
    Upload,
    /// Upload staging chunk (MAP_WRITE | COPY_SRC).
    Staging,
    /// Readback buffer (MAP_READ | COPY_DST).
    Readback,
    /// A chunk of the uniform-parameter arena.
    Uniform,
    /// Where timestamp queries are resolved (`time_dispatches`).
    Timestamps,
}

impl Purpose {
    pub(super) fn usage(self) -> wgpu::BufferUsages {
        use wgpu::BufferUsages as U;
        match self {
            Purpose::Storage | Purpose::Upload => U::STORAGE | U::COPY_SRC | U::COPY_DST,
            Purpose::Staging => U::MAP_WRITE | U::COPY_SRC,
            Purpose::Readback => U::MAP_READ | U::COPY_DST,
            Purpose::Uniform => U::UNIFORM | U::COPY_DST,
            Purpose::Timestamps => U::QUERY_RESOLVE | U::COPY_SRC,
        }
    }

    /// Mapped at creation: written by the host before any command runs.
    pub(super) fn mapped(self) -> bool {
        matches!(self, Purpose::Upload | Purpose::Staging)
    }

    pub fn label(self) -> &'static str {
        match self {
            Purpose::Storage => "storage",
            Purpose::Upload => "upload",
            Purpose::Staging => "staging",
            Purpose::Readback => "readback",
            Purpose::Uniform => "uniform",
            Purpose::Timestamps => "timestamps",
        }
    }
}

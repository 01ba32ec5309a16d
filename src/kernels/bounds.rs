//! The launchers' check of the buffers they bind: kernels compiled without wgpu's
//! bounds checks (`Kernel::unchecked`) rely on it.

use crate::gpu::Slice;

/// Panics unless `buffer` holds `floats` f32s: the unchecked shaders rely on it.
#[track_caller]
pub(crate) fn check_len<'a>(buffer: impl Into<Slice<'a>>, floats: usize, what: &str) {
    let bytes = buffer.into().size();
    assert!(
        bytes >= floats as u64 * 4,
        "{what}: a {bytes}-byte binding for {floats} floats"
    );
}

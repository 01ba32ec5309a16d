//! The WGSL every kernel may build on, and the one choice the context makes about a
//! kernel's source. `prelude.wgsl` holds `linear` (the thread index of a launch over
//! [`super::grid_1d`]) and the block reductions by shared memory; on a device whose
//! reductions use subgroups ([`super::WgpuContext::subgroups`]) the context compiles
//! a kernel joined after it with `prelude_subgroups.wgsl`'s reductions instead.

use std::borrow::Cow;

use super::kernel::Kernel;

/// The shared helpers joined in front of a kernel's own source (the kernels'
/// `with_prelude!`): `linear` and the block reductions, by shared memory.
pub(crate) const PRELUDE: &str = include_str!("prelude.wgsl");

/// The block reductions by subgroups, in place of `PRELUDE`'s where the device has
/// subgroups ([`source_for`]).
const SUBGROUP_REDUCTIONS: &str = include_str!("prelude_subgroups.wgsl");

/// What a module calling subgroup operations begins with. Browsers' WGSL compilers
/// want the extension enabled, first in the module; naga 30 (native) has subgroups
/// without it and rejects the directive as unimplemented.
pub(crate) const ENABLE_SUBGROUPS: &str = if cfg!(target_arch = "wasm32") {
    "enable subgroups;\n"
} else {
    ""
};

/// Where `PRELUDE`'s shared-memory reductions begin.
const REDUCTIONS_MARK: &str = "// ---- block reductions: shared memory";

/// The widest subgroup the subgroup reductions handle: the smallest `WG` of a kernel
/// calling `block_sum` or `block_max` (layernorm's and cross-entropy's 128), which
/// every subgroup width (a power of two) up to it divides. A context uses subgroups
/// only where the adapter's widths are at most this.
pub const MAX_SUBGROUP_WIDTH: u32 = 128;

/// The WGSL a context compiles for `kernel`: its own source, or, with `subgroups`,
/// the same with the prelude's block reductions swapped for the subgroup ones (for
/// kernels joined after `PRELUDE`; the others are unchanged). The one place the
/// variant is chosen; the context decides `subgroups` ([`super::WgpuContext::subgroups`]).
pub fn source_for(kernel: &Kernel, subgroups: bool) -> Cow<'static, str> {
    match kernel.source.strip_prefix(PRELUDE) {
        Some(own) if subgroups => {
            let common = &PRELUDE[..PRELUDE
                .find(REDUCTIONS_MARK)
                .expect("prelude.wgsl marks its reductions")];
            Cow::Owned(format!(
                "{ENABLE_SUBGROUPS}{common}{SUBGROUP_REDUCTIONS}{own}"
            ))
        }
        _ => Cow::Borrowed(kernel.source),
    }
}

//! Kernels: a WGSL source and entry point, and how launchers size their grids.
//!
//! Every kernel declares its shape parameters as `@group(0) @binding(0) var<uniform>`
//! and its buffers at bindings 1, 2, ... in the order the launcher passes them.

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

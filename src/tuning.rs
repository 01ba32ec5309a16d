//! Which variant of the kernels runs: the tuning for GPUs or for CPU adapters
//! ([`Target`]), and the core of the f16 matmuls ([`F16Core`]). A context picks
//! both from its adapter unless [`crate::gpu::ContextOptions`] names them
//! (benchmarks compare the variants on one adapter; tests pin one).
//!
//! CPU implementations of Vulkan and WebGPU (lavapipe, SwiftShader, WARP) run a
//! workgroup's invocations as SIMD lanes of one CPU thread, so the GPU kernels' big
//! workgroups, shared-memory tiles and barriers cost them more than they save.

/// The kind of adapter a kernel variant is tuned for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    Gpu,
    Cpu,
}

impl Target {
    pub const ALL: [Target; 2] = [Target::Gpu, Target::Cpu];

    pub fn name(self) -> &'static str {
        match self {
            Target::Gpu => "gpu",
            Target::Cpu => "cpu",
        }
    }

    pub fn parse(s: &str) -> Option<Target> {
        Target::ALL.into_iter().find(|t| t.name() == s)
    }

    /// `Cpu` for CPU adapters: wgpu reports `DeviceType::Cpu` natively (lavapipe,
    /// WARP) and in the browser for a fallback adapter; Chromium's SwiftShader is
    /// not always flagged as one, so its name decides too.
    pub fn for_adapter(info: &wgpu::AdapterInfo) -> Target {
        let swiftshader = info
            .name
            .as_bytes()
            .windows(b"swiftshader".len())
            .any(|w| w.eq_ignore_ascii_case(b"swiftshader"));
        if info.device_type == wgpu::DeviceType::Cpu || swiftshader {
            Target::Cpu
        } else {
            Target::Gpu
        }
    }
}

/// The core of the `--precision f16` matmuls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum F16Core {
    /// Tensor cores through cooperative matrices, 16-deep steps.
    Coop,
    /// Tensor cores, 32-deep steps and unguarded interior loads (the default where
    /// the device runs it).
    Coop2,
    /// Tensor cores, 64x64 a subgroup and two workgroups an SM (matmul_coop3.wgsl).
    Coop3,
    /// f16 workgroup tiles and f32 arithmetic, for any adapter with shader-f16.
    Fallback,
}

impl F16Core {
    pub const ALL: [F16Core; 4] = [
        F16Core::Coop,
        F16Core::Coop2,
        F16Core::Coop3,
        F16Core::Fallback,
    ];

    pub fn name(self) -> &'static str {
        match self {
            F16Core::Coop => "coop",
            F16Core::Coop2 => "coop2",
            F16Core::Coop3 => "coop3",
            F16Core::Fallback => "fallback",
        }
    }

    pub fn parse(s: &str) -> Option<F16Core> {
        F16Core::ALL.into_iter().find(|c| c.name() == s)
    }
}

#[cfg(test)]
mod tests {
    use super::{F16Core, Target};

    fn adapter(name: &str, device_type: wgpu::DeviceType) -> wgpu::AdapterInfo {
        wgpu::AdapterInfo {
            name: name.into(),
            vendor: 0,
            device: 0,
            device_type,
            device_pci_bus_id: String::new(),
            driver: String::new(),
            driver_info: String::new(),
            backend: wgpu::Backend::Vulkan,
            subgroup_min_size: 4,
            subgroup_max_size: 32,
            transient_saves_memory: None,
            limit_bucket: None,
        }
    }

    #[test]
    fn cpu_adapters_get_the_cpu_kernels() {
        use wgpu::DeviceType::{Cpu, DiscreteGpu, IntegratedGpu, Other};
        let cases = [
            ("llvmpipe (LLVM 15.0.6, 256 bits)", Cpu, Target::Cpu),
            ("Microsoft Basic Render Driver", Cpu, Target::Cpu),
            // Chromium's SwiftShader, not flagged as a fallback adapter.
            ("google swiftshader", Other, Target::Cpu),
            ("SwiftShader Device (Subzero)", Other, Target::Cpu),
            ("NVIDIA H200", DiscreteGpu, Target::Gpu),
            ("Apple M2", IntegratedGpu, Target::Gpu),
            ("nvidia hopper", Other, Target::Gpu),
        ];
        for (name, device_type, want) in cases {
            assert_eq!(
                Target::for_adapter(&adapter(name, device_type)),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn names_parse_back() {
        for t in Target::ALL {
            assert_eq!(Target::parse(t.name()), Some(t));
        }
        assert_eq!(Target::parse("tpu"), None);
        for c in F16Core::ALL {
            assert_eq!(F16Core::parse(c.name()), Some(c));
        }
        assert_eq!(F16Core::parse("int8"), None);
    }
}

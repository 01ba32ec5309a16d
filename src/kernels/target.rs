//! Which tuning of the kernels runs: the one for GPUs or the one for CPU adapters.
//!
//! CPU implementations of Vulkan and WebGPU (lavapipe, SwiftShader, WARP) run a
//! workgroup's invocations as SIMD lanes of one CPU thread, so the GPU kernels' big
//! workgroups, shared-memory tiles and barriers cost them more than they save.
//! Kernels with a CPU variant pick it by [`Target::of`]; their parity tests run each
//! variant explicitly.

use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

use crate::gpu::WgpuContext;

/// The kind of adapter a kernel variant is tuned for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    Gpu,
    Cpu,
}

/// 0: none forced; 1 + the target's index otherwise.
static FORCED: AtomicU8 = AtomicU8::new(0);

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

    /// The variant to run on `ctx`: the one forced by [`force`], else natively the
    /// environment's `TIDEPOOL_KERNELS` (`gpu` or `cpu`), else by adapter.
    pub fn of(ctx: &WgpuContext) -> Target {
        match FORCED.load(Relaxed) {
            1 => return Target::Gpu,
            2 => return Target::Cpu,
            _ => {}
        }
        if let Some(t) = from_env() {
            return t;
        }
        Target::for_adapter(ctx.adapter_info())
    }

    /// `Cpu` for CPU adapters: wgpu reports `DeviceType::Cpu` natively (lavapipe,
    /// WARP) and in the browser for a fallback adapter; Chromium's SwiftShader is
    /// not always flagged as one, so its name decides too.
    pub fn for_adapter(info: &wgpu::AdapterInfo) -> Target {
        // Without allocating: every launch asks.
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

/// Makes every later launch use `target` (`None`: choose by adapter again), for
/// benchmarks that compare the variants in one run; returns what was forced before.
pub fn force(target: Option<Target>) -> Option<Target> {
    let code = target.map_or(0, |t| 1 + t as u8);
    match FORCED.swap(code, Relaxed) {
        1 => Some(Target::Gpu),
        2 => Some(Target::Cpu),
        _ => None,
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn from_env() -> Option<Target> {
    static ENV: std::sync::OnceLock<Option<Target>> = std::sync::OnceLock::new();
    *ENV.get_or_init(|| {
        let value = std::env::var("TIDEPOOL_KERNELS").ok()?;
        let target = Target::parse(value.trim());
        if target.is_none() {
            eprintln!("TIDEPOOL_KERNELS={value:?} is neither gpu nor cpu; choosing by adapter");
        }
        target
    })
}

#[cfg(target_arch = "wasm32")]
fn from_env() -> Option<Target> {
    None
}

#[cfg(test)]
mod tests {
    use super::Target;

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
    }
}

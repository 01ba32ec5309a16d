//! Negotiating a device: which adapter, which features a context asks of it, and
//! whether its subgroups suit the kernels' reductions.

use super::prelude::MAX_SUBGROUP_WIDTH;
use crate::config::Precision;
use crate::error::{Error, Result};

/// The device features `precision` needs from an adapter offering `offered`:
/// subgroups wherever offered (the block reductions); for f16 shader-f16 (refused
/// without it), plus cooperative matrices where the adapter has them with subgroups
/// and subgroup barriers (the tensor-core matmul core).
pub(super) fn device_features(
    precision: Precision,
    offered: wgpu::Features,
    info: &wgpu::AdapterInfo,
) -> Result<wgpu::Features> {
    use wgpu::Features as F;
    let subgroups = offered & F::SUBGROUP;
    match precision {
        Precision::F32 => Ok(subgroups),
        Precision::F16 if !offered.contains(F::SHADER_F16) => Err(Error::Config(format!(
            "precision f16 needs the adapter feature shader-f16 (wgpu SHADER_F16), which {} \
             ({:?}) does not offer; use precision f32",
            info.name, info.backend
        ))),
        Precision::F16 => {
            let coop = F::SUBGROUP | F::SUBGROUP_BARRIER | F::EXPERIMENTAL_COOPERATIVE_MATRIX;
            Ok(F::SHADER_F16
                | subgroups
                | if offered.contains(coop) {
                    coop
                } else {
                    F::empty()
                })
        }
    }
}

/// What `time_dispatches` needs: timestamp-query (refused without it).
pub(super) fn timing_features(
    wanted: bool,
    offered: wgpu::Features,
    info: &wgpu::AdapterInfo,
) -> Result<wgpu::Features> {
    use wgpu::Features as F;
    match (wanted, offered.contains(F::TIMESTAMP_QUERY)) {
        (false, _) => Ok(F::empty()),
        (true, true) => Ok(F::TIMESTAMP_QUERY),
        (true, false) => Err(Error::Config(format!(
            "timing dispatches needs the adapter feature timestamp-query (wgpu \
             TIMESTAMP_QUERY), which {} ({:?}) does not offer",
            info.name, info.backend
        ))),
    }
}

/// Whether every subgroup width the adapter may pick suits the subgroup reductions:
/// a power of two no wider than [`MAX_SUBGROUP_WIDTH`].
pub(super) fn subgroup_widths_fit(info: &wgpu::AdapterInfo) -> bool {
    let (min, max) = (info.subgroup_min_size, info.subgroup_max_size);
    min.is_power_of_two() && max.is_power_of_two() && min <= max && max <= MAX_SUBGROUP_WIDTH
}

/// The wgpu instance contexts find their adapter through: natively one a process.
/// On an H200 the NVIDIA Vulkan driver reports no adapter from the 30th instance a
/// process creates (each dropped before the next, file descriptors and memory
/// flat), so a test binary or a long-lived host that makes context after context
/// would lose the GPU. In the browser each context asks `navigator.gpu` anew.
fn instance() -> wgpu::Instance {
    let make =
        || wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    #[cfg(not(target_arch = "wasm32"))]
    {
        static INSTANCE: std::sync::OnceLock<wgpu::Instance> = std::sync::OnceLock::new();
        INSTANCE.get_or_init(make).clone()
    }
    #[cfg(target_arch = "wasm32")]
    make()
}

pub(super) async fn request_adapter() -> Result<(wgpu::Instance, wgpu::Adapter)> {
    #[cfg(target_arch = "wasm32")]
    if !wgpu::util::is_browser_webgpu_supported().await {
        return Err(Error::NoAdapter(crate::NO_WEBGPU.into()));
    }
    let instance = instance();
    #[cfg(not(target_arch = "wasm32"))]
    if let Ok(wanted) = std::env::var("WGPU_ADAPTER_NAME") {
        let wanted = wanted.to_lowercase();
        let adapters = instance.enumerate_adapters(wgpu::Backends::all()).await;
        let names: Vec<String> = adapters.iter().map(|a| a.get_info().name).collect();
        let adapter = adapters
            .into_iter()
            .find(|a| a.get_info().name.to_lowercase().contains(&wanted))
            .ok_or_else(|| {
                Error::NoAdapter(format!(
                    "WGPU_ADAPTER_NAME={wanted:?} matches none of {names:?}"
                ))
            })?;
        return Ok((instance, adapter));
    }
    let adapter = instance
        .request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            ..Default::default()
        })
        .await
        .map_err(|e| {
            #[cfg(target_arch = "wasm32")]
            let hint = crate::NO_WEBGPU;
            #[cfg(not(target_arch = "wasm32"))]
            let hint = "install a Vulkan, Metal or DX12 driver (on Linux without a GPU: mesa-vulkan-drivers gives lavapipe)";
            Error::NoAdapter(format!("{e}. {hint}"))
        })?;
    Ok((instance, adapter))
}

/// A display name for an adapter that reports none. Browsers leave `description`
/// empty; vendor and architecture say enough.
pub(super) async fn fallback_adapter_name(info: &wgpu::AdapterInfo) -> String {
    #[cfg(target_arch = "wasm32")]
    if let Some(label) = web_adapter_label().await {
        return label;
    }
    format!("{:?} adapter", info.device_type)
}

/// "google swiftshader" and the like, from `GPUAdapterInfo` (wgpu maps only the
/// description, which browsers usually leave empty).
#[cfg(target_arch = "wasm32")]
async fn web_adapter_label() -> Option<String> {
    use js_sys::Reflect;
    use wasm_bindgen::JsCast;
    let get = |target: &wasm_bindgen::JsValue, key: &str| Reflect::get(target, &key.into()).ok();
    let gpu = get(&get(&js_sys::global(), "navigator")?, "gpu")?;
    let request: js_sys::Function = get(&gpu, "requestAdapter")?.dyn_into().ok()?;
    let promise: js_sys::Promise = request.call0(&gpu).ok()?.dyn_into().ok()?;
    let adapter = wasm_bindgen_futures::JsFuture::from(promise).await.ok()?;
    let info = get(&adapter, "info")?;
    let parts: Vec<String> = ["vendor", "architecture", "device", "description"]
        .iter()
        .filter_map(|key| get(&info, key)?.as_string())
        .filter(|s| !s.is_empty())
        .collect();
    (!parts.is_empty()).then(|| parts.join(" "))
}

#[cfg(test)]
mod tests {
    use super::{device_features, Precision};
    use wgpu::Features as F;

    fn adapter() -> wgpu::AdapterInfo {
        wgpu::AdapterInfo {
            name: "some gpu".into(),
            vendor: 0,
            device: 0,
            device_type: wgpu::DeviceType::DiscreteGpu,
            device_pci_bus_id: String::new(),
            driver: String::new(),
            driver_info: String::new(),
            backend: wgpu::Backend::Vulkan,
            subgroup_min_size: 32,
            subgroup_max_size: 32,
            transient_saves_memory: None,
            limit_bucket: None,
        }
    }

    #[test]
    fn f16_asks_for_what_the_adapter_has_and_is_refused_without_shader_f16() {
        let info = adapter();
        let coop = F::SUBGROUP | F::SUBGROUP_BARRIER | F::EXPERIMENTAL_COOPERATIVE_MATRIX;
        let all = F::SHADER_F16 | coop;
        assert_eq!(device_features(Precision::F16, all, &info).unwrap(), all);
        // Cooperative matrices without subgroup barriers: the matmul core needs both.
        assert_eq!(
            device_features(Precision::F16, all - F::SUBGROUP_BARRIER, &info).unwrap(),
            F::SHADER_F16 | F::SUBGROUP
        );
        assert_eq!(
            device_features(Precision::F16, F::SHADER_F16 | F::SUBGROUP, &info).unwrap(),
            F::SHADER_F16 | F::SUBGROUP
        );
        assert_eq!(
            device_features(
                Precision::F16,
                F::SHADER_F16 | F::EXPERIMENTAL_COOPERATIVE_MATRIX,
                &info
            )
            .unwrap(),
            F::SHADER_F16
        );
        for offered in [F::empty(), coop] {
            let e = device_features(Precision::F16, offered, &info).unwrap_err();
            assert_eq!(e.kind(), "config");
            let text = e.to_string();
            assert!(
                text.contains("shader-f16") && text.contains("some gpu"),
                "{text}"
            );
        }
    }

    #[test]
    fn subgroups_are_asked_for_wherever_offered() {
        let info = adapter();
        for precision in [Precision::F32, Precision::F16] {
            let offered = F::SHADER_F16 | F::SUBGROUP;
            let got = device_features(precision, offered, &info).unwrap();
            assert!(got.contains(F::SUBGROUP), "{precision:?}: {got:?}");
            let got = device_features(precision, F::SHADER_F16, &info).unwrap();
            assert!(!got.contains(F::SUBGROUP), "{precision:?}: {got:?}");
        }
        assert_eq!(
            device_features(Precision::F32, F::EXPERIMENTAL_COOPERATIVE_MATRIX, &info).unwrap(),
            F::empty()
        );
    }

    #[test]
    fn subgroup_reductions_need_power_of_two_widths_up_to_the_smallest_workgroup() {
        let widths = |min, max| {
            super::subgroup_widths_fit(&wgpu::AdapterInfo {
                subgroup_min_size: min,
                subgroup_max_size: max,
                ..adapter()
            })
        };
        assert!(widths(32, 32) && widths(4, 128) && widths(8, 8) && widths(1, 64));
        assert!(!widths(0, 0) && !widths(32, 256) && !widths(24, 24) && !widths(64, 32));
    }
}

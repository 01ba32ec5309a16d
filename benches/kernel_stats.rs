//! What the driver made of each kernel: its registers a thread, stack and binary
//! size, whatever the Vulkan driver reports through VK_KHR_pipeline_executable_properties,
//! and the occupancy those figures allow. wgpu hides all of this; the probe opens the
//! device through wgpu-hal with the extension on, turns each kernel's WGSL into SPIR-V
//! exactly as wgpu's Vulkan backend does (`create_shader_module` of wgpu-hal, with the
//! kernel's runtime checks), and builds the compute pipeline itself, asking for the
//! statistics.
//!
//! `cargo bench --bench kernel_stats [-- [--json] [NAME...] [FILE.wgsl...]]`: every
//! kernel of the native catalog (the subgroup forms where the adapter has subgroups),
//! or those whose name contains one of the NAMEs; and each FILE, a kernel as
//! tests/ops/wgsl.rs dumps them into target/tmp/wgsl/ (a candidate's registers,
//! before it is built into the catalog). The occupancy columns count with the limits of an
//! NVIDIA SM of compute capability 9.0 (H100, H200): 65,536 registers, 228 KiB of
//! shared memory (1 KiB of it kept by the driver for each workgroup), 64 warps and 32
//! workgroups; on other GPUs read only the driver's own figures.

// Native only; wasm32 builds an empty main.
#[cfg(target_arch = "wasm32")]
fn main() {}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    if let Err(e) = probe::run() {
        eprintln!("kernel_stats: {e}");
        std::process::exit(1);
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod probe {
    use std::ffi::CStr;

    // ash is wgpu-hal's own Vulkan binding (the same version, already in the tree):
    // wgpu exposes the raw device but not the extension's entry points.
    use ash::vk;
    use naga::valid::{
        Capabilities, ShaderStages, SubgroupOperationSet, ValidationFlags, Validator,
    };
    use wgpu::hal::{self, vulkan as hv};

    use tidepool::kernels::{catalog, source_for};

    /// An SM of compute capability 9.0.
    const SM_REGISTERS: u64 = 65_536;
    const SM_SHARED_BYTES: u64 = 228 * 1024;
    const SHARED_KEPT_A_WORKGROUP: u64 = 1024;
    const SM_WARPS: u64 = 64;
    const SM_WORKGROUPS: u64 = 32;
    /// Registers are given to a warp in blocks of 256.
    const REGISTER_BLOCK: u64 = 256;

    /// A kernel to compile: one of the catalog's, or a file.
    struct Source {
        name: String,
        wgsl: String,
        entry: String,
        unchecked: bool,
    }

    impl Source {
        /// A WGSL file as tests/ops/wgsl.rs dumps each kernel (`target/tmp/wgsl/`),
        /// its first line `// entry NAME unchecked BOOL`: a candidate's registers
        /// measured without building it into the catalog.
        fn read(path: &str) -> Result<Self, String> {
            let wgsl = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
            let header: Vec<&str> = wgsl
                .lines()
                .next()
                .unwrap_or("")
                .split_whitespace()
                .collect();
            let (entry, unchecked) = match header[..] {
                ["//", "entry", entry, "unchecked", flag] => (entry.to_string(), flag == "true"),
                _ => {
                    return Err(format!(
                        "{path}: the first line must be `// entry NAME unchecked true|false`"
                    ))
                }
            };
            let name = std::path::Path::new(path)
                .file_name()
                .map_or(path.into(), |n| n.to_string_lossy().into_owned());
            Ok(Source {
                name,
                wgsl,
                entry,
                unchecked,
            })
        }
    }

    /// One kernel's figures.
    struct Row {
        name: String,
        threads: u64,
        /// naga's count of the module's workgroup arrays.
        shared_bytes: u64,
        /// The driver's statistics, by its names.
        stats: Vec<(String, String)>,
    }

    impl Row {
        /// The driver's statistic whose name holds `part` (any case), as a number.
        fn stat(&self, part: &str) -> Option<u64> {
            self.stats
                .iter()
                .find(|(k, _)| k.to_lowercase().contains(part))
                .and_then(|(_, v)| v.parse().ok())
        }

        fn registers(&self) -> Option<u64> {
            self.stat("register")
        }

        /// Workgroups an SM holds: by registers, by shared memory, in all.
        fn occupancy(&self) -> Option<(u64, u64, u64)> {
            let registers = self.registers()?;
            let warps = self.threads.div_ceil(32).max(1);
            let per_warp = (registers * 32).div_ceil(REGISTER_BLOCK) * REGISTER_BLOCK;
            let by_registers = SM_REGISTERS
                .checked_div(per_warp)
                .map_or(SM_WORKGROUPS, |w| w / warps);
            // The driver's figure where it gives one: it leaves out what the entry
            // point does not use (a prelude's arrays), which naga's count keeps.
            let shared = self.stat("shared memory").unwrap_or(self.shared_bytes);
            let by_shared = SM_SHARED_BYTES / (shared + SHARED_KEPT_A_WORKGROUP);
            let by_warps = SM_WARPS / warps;
            let all = by_registers.min(by_shared).min(by_warps).min(SM_WORKGROUPS);
            Some((by_registers, by_shared, all))
        }
    }

    /// What `source` asks of the device, as tests/ops/wgsl.rs counts it.
    fn needs(source: &str) -> (Capabilities, wgpu::Features) {
        let mut caps = Capabilities::empty();
        let mut features = wgpu::Features::empty();
        if source.contains("enable f16;") {
            caps |= Capabilities::SHADER_FLOAT16;
            features |= wgpu::Features::SHADER_F16;
        }
        if source.contains("subgroup") {
            caps |= Capabilities::SUBGROUP;
            features |= wgpu::Features::SUBGROUP;
        }
        if source.contains("enable wgpu_cooperative_matrix;") {
            caps |= Capabilities::COOPERATIVE_MATRIX | Capabilities::SUBGROUP_BARRIER;
            features |= wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX | wgpu::Features::SUBGROUP;
        }
        (caps, features)
    }

    /// What wgpu-hal's Vulkan backend writes SPIR-V for on this device.
    struct Target {
        api_version: u32,
        subgroups: bool,
        /// VK_EXT_robustness2's robustBufferAccess2: wgpu then leaves buffer
        /// accesses to the driver.
        robust_buffer_access2: bool,
        zero_initialize_natively: bool,
    }

    impl Target {
        fn of(
            instance: &ash::Instance,
            physical: vk::PhysicalDevice,
            offered: &[vk::ExtensionProperties],
            features: wgpu::Features,
        ) -> Self {
            let has = |name: &CStr| {
                offered
                    .iter()
                    .any(|e| e.extension_name_as_c_str() == Ok(name))
            };
            // SAFETY: a physical device of this instance; each chained struct is
            // one its Vulkan version or an offered extension defines.
            unsafe {
                let api_version = instance
                    .get_physical_device_properties(physical)
                    .api_version;
                let mut robustness2 = vk::PhysicalDeviceRobustness2FeaturesEXT::default();
                let mut zero_init =
                    vk::PhysicalDeviceZeroInitializeWorkgroupMemoryFeatures::default();
                let mut query = vk::PhysicalDeviceFeatures2::default();
                if has(ash::ext::robustness2::NAME) {
                    query = query.push_next(&mut robustness2);
                }
                if api_version >= vk::API_VERSION_1_3
                    || has(ash::khr::zero_initialize_workgroup_memory::NAME)
                {
                    query = query.push_next(&mut zero_init);
                }
                instance.get_physical_device_features2(physical, &mut query);
                Target {
                    api_version,
                    subgroups: features.contains(wgpu::Features::SUBGROUP),
                    robust_buffer_access2: robustness2.robust_buffer_access2 == vk::TRUE,
                    zero_initialize_natively: zero_init.shader_zero_initialize_workgroup_memory
                        == vk::TRUE,
                }
            }
        }
    }

    /// naga's SPIR-V options as wgpu-hal 30 sets them for a compute pipeline
    /// (vulkan/adapter.rs `open_with_callback`, vulkan/device.rs `compile_stage`),
    /// for a kernel made with `ShaderRuntimeChecks::checked()` or, where
    /// `unchecked`, `::unchecked()`. What matters to a compute kernel's code: the
    /// SPIR-V version, the bounds-check policies, loop bounding, the integer
    /// division checks and how workgroup memory is zeroed. Check it against
    /// wgpu-hal when wgpu moves.
    fn spirv_options(target: &Target, unchecked: bool) -> naga::back::spv::Options<'static> {
        use naga::proc::{BoundsCheckPolicies, BoundsCheckPolicy as P};
        let lang_version = match target.api_version {
            v if v >= vk::API_VERSION_1_3 => (1, 6),
            v if v >= vk::API_VERSION_1_2 => (1, 5),
            v if v >= vk::API_VERSION_1_1 => (1, 3),
            _ => (1, 0),
        };
        let bounds_check_policies = if unchecked {
            BoundsCheckPolicies {
                index: P::Unchecked,
                buffer: P::Unchecked,
                image_load: P::Unchecked,
                binding_array: P::Unchecked,
            }
        } else {
            BoundsCheckPolicies {
                index: P::Restrict,
                buffer: if target.robust_buffer_access2 {
                    P::Unchecked
                } else {
                    P::Restrict
                },
                image_load: P::Restrict,
                binding_array: P::Unchecked,
            }
        };
        naga::back::spv::Options {
            lang_version,
            flags: naga::back::spv::WriterFlags::LABEL_VARYINGS
                | naga::back::spv::WriterFlags::FORCE_POINT_SIZE,
            // None: naga declares the capabilities the module uses (wgpu lists the
            // device's, which only bounds them).
            capabilities: None,
            bounds_check_policies,
            zero_initialize_workgroup_memory: if target.zero_initialize_natively {
                naga::back::spv::ZeroInitializeWorkgroupMemoryMode::Native
            } else {
                naga::back::spv::ZeroInitializeWorkgroupMemoryMode::Polyfill
            },
            force_loop_bounding: !unchecked,
            emit_int_div_checks: !unchecked,
            // wgpu maps each binding to itself in descriptor set 0 (no binding
            // arrays here): what naga writes for bindings left out of the map.
            fake_missing_bindings: true,
            ..Default::default()
        }
    }

    fn c_string(bytes: &[std::ffi::c_char]) -> String {
        // SAFETY: Vulkan's fixed-size strings end in a NUL within the array.
        unsafe { CStr::from_ptr(bytes.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    fn value(stat: &vk::PipelineExecutableStatisticKHR) -> String {
        // SAFETY: the union member read is the one `format` names.
        unsafe {
            match stat.format {
                vk::PipelineExecutableStatisticFormatKHR::BOOL32 => {
                    (stat.value.b32 != 0).to_string()
                }
                vk::PipelineExecutableStatisticFormatKHR::INT64 => stat.value.i64.to_string(),
                vk::PipelineExecutableStatisticFormatKHR::UINT64 => stat.value.u64.to_string(),
                vk::PipelineExecutableStatisticFormatKHR::FLOAT64 => stat.value.f64.to_string(),
                other => format!("{other:?}"),
            }
        }
    }

    pub fn run() -> Result<(), String> {
        let args: Vec<String> = std::env::args().skip(1).collect();
        if args.iter().any(|a| a == "-h" || a == "--help") {
            println!(
                "kernel_stats [--json] [NAME...] [FILE.wgsl...]: the Vulkan driver's statistics \
                 (registers a thread, ...) of every kernel of the native catalog, of those whose \
                 name holds a NAME, and of each FILE (tests/ops/wgsl.rs's dump form, its first \
                 line `// entry NAME unchecked BOOL`)"
            );
            return Ok(());
        }
        let json = args.iter().any(|a| a == "--json");
        // cargo bench passes --bench; every other flag is refused.
        if let Some(flag) = args
            .iter()
            .find(|a| a.starts_with('-') && *a != "--json" && *a != "--bench")
        {
            return Err(format!(
                "unknown flag {flag} (takes --json, kernel names and .wgsl files; --help)"
            ));
        }
        let (files, wanted): (Vec<&String>, Vec<&String>) = args
            .iter()
            .filter(|a| !a.starts_with('-'))
            .partition(|a| a.ends_with(".wgsl"));
        // The files first: a wrong path fails before the device opens.
        let files = files
            .into_iter()
            .map(|f| Source::read(f))
            .collect::<Result<Vec<_>, _>>()?;

        let mut descriptor = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
        descriptor.backends = wgpu::Backends::VULKAN;
        let instance = wgpu::Instance::new(descriptor);
        let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            ..Default::default()
        }))
        .map_err(|e| format!("no Vulkan adapter: {e}"))?;
        let info = adapter.get_info();
        let features = adapter.features()
            & (wgpu::Features::SHADER_F16
                | wgpu::Features::SUBGROUP
                | wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX);
        let limits = adapter.limits();
        eprintln!(
            "adapter: {} ({}), {features:?}",
            info.name, info.driver_info
        );

        // SAFETY: the hal adapter is used while `adapter` lives, on this thread.
        let hal_adapter = unsafe { adapter.as_hal::<hal::api::Vulkan>() }
            .ok_or("the adapter is not a Vulkan one")?;
        let raw_instance = hal_adapter.shared_instance().raw_instance();
        let physical = hal_adapter.raw_physical_device();
        let name = ash::khr::pipeline_executable_properties::NAME;
        // SAFETY: a physical device of this instance.
        let offered = unsafe { raw_instance.enumerate_device_extension_properties(physical) }
            .map_err(|e| format!("listing the device's extensions: {e}"))?;
        if !offered
            .iter()
            .any(|e| e.extension_name_as_c_str() == Ok(name))
        {
            return Err(format!(
                "{} does not offer {} (no statistics to read)",
                info.name,
                name.to_string_lossy()
            ));
        }

        let mut executable_info =
            vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default()
                .pipeline_executable_info(true);
        let executable_info = &mut executable_info;
        // SAFETY: the features asked for are the adapter's; the callback only adds the
        // extension and its feature struct, which outlives the call.
        let open = unsafe {
            hal_adapter.open_with_callback(
                features,
                &limits,
                &wgpu::MemoryHints::Performance,
                Some(Box::new(move |args: hv::CreateDeviceCallbackArgs| {
                    args.extensions.push(name);
                    let create_info = std::mem::take(args.create_info);
                    *args.create_info = create_info.push_next(executable_info);
                })),
            )
        }
        .map_err(|e| format!("opening the device with {}: {e}", name.to_string_lossy()))?;
        let device = open.device;
        let raw = device.raw_device();
        let executables = ash::khr::pipeline_executable_properties::Device::new(raw_instance, raw);

        let target = Target::of(raw_instance, physical, &offered, features);
        let subgroups = target.subgroups;
        let mut rows = Vec::new();
        let mut skipped = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        // The catalog's kernels (none where only files are named), then the files.
        let mut kernels = Vec::new();
        if wanted.len() + files.len() == 0 || !wanted.is_empty() {
            for kernel in catalog(false) {
                let named =
                    wanted.is_empty() || wanted.iter().any(|w| kernel.name.contains(w.as_str()));
                if named && seen.insert(kernel.name) {
                    kernels.push(Source {
                        name: kernel.name.to_string(),
                        wgsl: source_for(&kernel, subgroups).into_owned(),
                        entry: kernel.entry.to_string(),
                        unchecked: kernel.unchecked,
                    });
                }
            }
        }
        kernels.extend(files);
        for kernel in &kernels {
            let source = &kernel.wgsl;
            let (caps, asks) = needs(source);
            if !features.contains(asks) {
                skipped.push(kernel.name.clone());
                continue;
            }
            let module = naga::front::wgsl::parse_str(source)
                .map_err(|e| format!("{}: {}", kernel.name, e.emit_to_string(source)))?;
            let module_info = Validator::new(ValidationFlags::all(), caps)
                .subgroup_stages(ShaderStages::COMPUTE)
                .subgroup_operations(SubgroupOperationSet::all())
                .validate(&module)
                .map_err(|e| format!("{}: {}", kernel.name, e.emit_to_string(source)))?;
            let entry = module
                .entry_points
                .iter()
                .find(|e| e.name == kernel.entry.as_str())
                .ok_or_else(|| format!("{}: no entry point {}", kernel.name, kernel.entry))?;
            let threads: u64 = entry.workgroup_size.iter().map(|&n| n as u64).product();
            let mut layouter = naga::proc::Layouter::default();
            layouter
                .update(module.to_ctx())
                .map_err(|e| format!("{}: {e}", kernel.name))?;
            let mut shared_bytes = 0u64;
            let mut bindings = Vec::new();
            for (_, var) in module.global_variables.iter() {
                match (var.space, &var.binding) {
                    (naga::AddressSpace::WorkGroup, _) => {
                        shared_bytes += layouter[var.ty].size as u64;
                    }
                    (naga::AddressSpace::Uniform, Some(b)) => {
                        bindings.push((b.binding, vk::DescriptorType::UNIFORM_BUFFER))
                    }
                    (naga::AddressSpace::Storage { .. }, Some(b)) => {
                        bindings.push((b.binding, vk::DescriptorType::STORAGE_BUFFER))
                    }
                    _ => {}
                }
            }
            let stats = statistics(
                &device,
                &executables,
                kernel,
                (&module, &module_info),
                &bindings,
                &target,
            )?;
            rows.push(Row {
                name: kernel.name.clone(),
                threads,
                shared_bytes,
                stats,
            });
        }
        if rows.is_empty() {
            return Err(format!(
                "no kernel of the catalog matches {wanted:?} on this adapter (skipped for features: {skipped:?})"
            ));
        }
        if !skipped.is_empty() {
            eprintln!(
                "skipped (the adapter lacks their features): {}",
                skipped.join(", ")
            );
        }
        print(&rows, &info, json);
        Ok(())
    }

    /// The driver's statistics for `kernel`'s compute pipeline.
    fn statistics(
        device: &hv::Device,
        executables: &ash::khr::pipeline_executable_properties::Device,
        kernel: &Source,
        (module, module_info): (&naga::Module, &naga::valid::ModuleInfo),
        bindings: &[(u32, vk::DescriptorType)],
        target: &Target,
    ) -> Result<Vec<(String, String)>, String> {
        let words = naga::back::spv::write_vec(
            module,
            module_info,
            &spirv_options(target, kernel.unchecked),
            Some(&naga::back::spv::PipelineOptions {
                entry_point: kernel.entry.clone(),
                shader_stage: naga::ShaderStage::Compute,
            }),
        )
        .map_err(|e| format!("{}: SPIR-V: {e}", kernel.name))?;
        // SAFETY: naga's SPIR-V for a validated module, on this device.
        let vk_module = unsafe {
            device
                .raw_device()
                .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&words), None)
        }
        .map_err(|e| format!("{}: shader module: {e}", kernel.name))?;
        let raw = device.raw_device();
        let layout_bindings: Vec<_> = bindings
            .iter()
            .map(|&(binding, kind)| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(binding)
                    .descriptor_type(kind)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        let entry = std::ffi::CString::new(kernel.entry.as_str()).map_err(|e| e.to_string())?;
        // SAFETY: every handle is made and destroyed here, on one device.
        unsafe {
            let set_layout = raw
                .create_descriptor_set_layout(
                    &vk::DescriptorSetLayoutCreateInfo::default().bindings(&layout_bindings),
                    None,
                )
                .map_err(|e| format!("{}: set layout: {e}", kernel.name))?;
            let layouts = [set_layout];
            let layout = raw
                .create_pipeline_layout(
                    &vk::PipelineLayoutCreateInfo::default().set_layouts(&layouts),
                    None,
                )
                .map_err(|e| format!("{}: pipeline layout: {e}", kernel.name))?;
            // As wgpu-hal's compile_stage sets it.
            let stage_flags = if target.subgroups {
                vk::PipelineShaderStageCreateFlags::ALLOW_VARYING_SUBGROUP_SIZE
            } else {
                vk::PipelineShaderStageCreateFlags::empty()
            };
            let create = vk::ComputePipelineCreateInfo::default()
                .flags(vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR)
                .layout(layout)
                .stage(
                    vk::PipelineShaderStageCreateInfo::default()
                        .flags(stage_flags)
                        .stage(vk::ShaderStageFlags::COMPUTE)
                        .module(vk_module)
                        .name(&entry),
                );
            let pipeline = raw
                .create_compute_pipelines(vk::PipelineCache::null(), &[create], None)
                .map_err(|(_, e)| format!("{}: pipeline: {e}", kernel.name))?[0];
            let pipeline_info = vk::PipelineInfoKHR::default().pipeline(pipeline);
            let mut out = Vec::new();
            let properties = executables
                .get_pipeline_executable_properties(&pipeline_info)
                .map_err(|e| format!("{}: executables: {e}", kernel.name))?;
            for (index, property) in properties.iter().enumerate() {
                let which = vk::PipelineExecutableInfoKHR::default()
                    .pipeline(pipeline)
                    .executable_index(index as u32);
                let prefix = if properties.len() > 1 {
                    format!("{}: ", c_string(&property.name))
                } else {
                    String::new()
                };
                for stat in executables
                    .get_pipeline_executable_statistics(&which)
                    .map_err(|e| format!("{}: statistics: {e}", kernel.name))?
                {
                    out.push((format!("{prefix}{}", c_string(&stat.name)), value(&stat)));
                }
            }
            raw.destroy_pipeline(pipeline, None);
            raw.destroy_pipeline_layout(layout, None);
            raw.destroy_descriptor_set_layout(set_layout, None);
            raw.destroy_shader_module(vk_module, None);
            Ok(out)
        }
    }

    fn print(rows: &[Row], info: &wgpu::AdapterInfo, json: bool) {
        if json {
            for row in rows {
                let stats: serde_json::Map<String, serde_json::Value> = row
                    .stats
                    .iter()
                    .map(|(k, v)| {
                        let value = v
                            .parse::<f64>()
                            .map(serde_json::Value::from)
                            .unwrap_or_else(|_| v.clone().into());
                        (k.clone(), value)
                    })
                    .collect();
                let (by_registers, by_shared, workgroups) = match row.occupancy() {
                    Some((r, s, a)) => (Some(r), Some(s), Some(a)),
                    None => (None, None, None),
                };
                let line = serde_json::json!({
                    "bench": "kernel_stats",
                    "adapter": info.name,
                    "driver": info.driver_info,
                    "kernel": row.name,
                    "threads": row.threads,
                    "shared_bytes": row.shared_bytes,
                    "stats": stats,
                    "sm90_workgroups_by_registers": by_registers,
                    "sm90_workgroups_by_shared": by_shared,
                    "sm90_workgroups": workgroups,
                    "sm90_warps": workgroups.map(|w| w * row.threads.div_ceil(32)),
                });
                println!("{line}");
            }
            return;
        }
        let names: Vec<&String> = {
            let mut all: Vec<&String> = rows
                .iter()
                .flat_map(|r| r.stats.iter().map(|(k, _)| k))
                .collect();
            all.sort();
            all.dedup();
            all
        };
        println!("{} ({})", info.name, info.driver_info);
        print!("| kernel | threads | shared bytes |");
        for n in &names {
            print!(" {n} |");
        }
        println!(" workgroups an SM (sm_90): registers / shared / all | warps an SM |");
        print!("| --- | ---: | ---: |");
        for _ in &names {
            print!(" ---: |");
        }
        println!(" ---: | ---: |");
        for row in rows {
            print!("| {} | {} | {} |", row.name, row.threads, row.shared_bytes);
            for n in &names {
                let v = row
                    .stats
                    .iter()
                    .find(|(k, _)| k == *n)
                    .map(|(_, v)| v.as_str());
                print!(" {} |", v.unwrap_or(""));
            }
            match row.occupancy() {
                Some((r, s, a)) => {
                    println!(" {r} / {s} / {a} | {} |", a * row.threads.div_ceil(32))
                }
                None => println!(" | |"),
            }
        }
    }
}

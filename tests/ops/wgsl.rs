//! Every kernel's final WGSL, as the launchers assemble it (`kernels::catalog`):
//! written out for diffing, parsed and validated by naga (the shader compiler wgpu
//! uses) for every specialisation, and the kernels joined after the prelude
//! compiled to SPIR-V with either block reduction, as wgpu's Vulkan backend would,
//! so the subgroup one is checked even where no device offers it.
#![cfg(not(target_arch = "wasm32"))]

use std::collections::BTreeMap;

use naga::valid::{Capabilities, ShaderStages, SubgroupOperationSet, ValidationFlags, Validator};
use tidepool::gpu::read_only_bindings;
use tidepool::kernels::{catalog, source_for};

/// The capabilities a device needs for `source`: f16 where it enables it,
/// subgroups where it calls them, cooperative matrices (with subgroups) where it
/// enables them.
fn needs(source: &str) -> Capabilities {
    let mut caps = Capabilities::empty();
    if source.contains("enable f16;") {
        caps |= Capabilities::SHADER_FLOAT16;
    }
    if source.contains("subgroup") {
        caps |= Capabilities::SUBGROUP;
    }
    if source.contains("enable wgpu_cooperative_matrix;") {
        caps |= Capabilities::COOPERATIVE_MATRIX | Capabilities::SUBGROUP_BARRIER;
    }
    caps
}

/// Parses and validates `source` with the capabilities `caps`: the module and its
/// info, or a panic naming `what`.
fn validate(
    what: &str,
    source: &str,
    caps: Capabilities,
) -> (naga::Module, naga::valid::ModuleInfo) {
    let module = naga::front::wgsl::parse_str(source)
        .unwrap_or_else(|e| panic!("{what}: {}", e.emit_to_string(source)));
    let info = Validator::new(ValidationFlags::all(), caps)
        .subgroup_stages(ShaderStages::COMPUTE)
        .subgroup_operations(SubgroupOperationSet::all())
        .validate(&module)
        .unwrap_or_else(|e| panic!("{what}: {}", e.emit_to_string(source)));
    (module, info)
}

/// Which bindings each kernel's entry point reads only, as the planned policy
/// reads them from the WGSL (`gpu/binding_access.rs`), against naga's reflection:
/// the storage globals the entry point uses, read-only where declared so.
#[test]
fn every_entry_points_read_only_bindings_are_the_ones_naga_sees() {
    let mut checked = 0;
    for compact in [false, true] {
        for kernel in catalog(compact) {
            for subgroups in [false, true] {
                let source = source_for(&kernel, subgroups);
                let (module, info) = validate(kernel.name, &source, needs(&source));
                let index = module
                    .entry_points
                    .iter()
                    .position(|e| e.name == kernel.entry)
                    .unwrap_or_else(|| panic!("{}: no entry {}", kernel.name, kernel.entry));
                let uses = info.get_entry_point(index);
                let mut expected = 0u128;
                for (handle, var) in module.global_variables.iter() {
                    let (Some(binding), naga::AddressSpace::Storage { access }) =
                        (&var.binding, var.space)
                    else {
                        continue;
                    };
                    let read_only = !access.contains(naga::StorageAccess::STORE);
                    if binding.group == 0 && read_only && !uses[handle].is_empty() {
                        expected |= 1 << binding.binding;
                    }
                }
                assert_eq!(
                    read_only_bindings(&source, kernel.entry),
                    expected,
                    "{} (subgroups {subgroups})",
                    kernel.name
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 200, "{checked} kernels checked");
}

/// Each kernel once by name, in both forms, written to `target/tmp/wgsl/` (and the
/// subgroup form where it differs): a change meant to leave the kernels as they are
/// shows as an empty diff of two dumps. Each is valid WGSL.
#[test]
fn every_kernel_is_valid_and_dumped_once_by_name() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("wgsl");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("the dump folder");
    for (form, compact) in [("native", false), ("web", true)] {
        let mut seen = BTreeMap::new();
        for kernel in catalog(compact) {
            let entry = format!(
                "{} {} {}",
                kernel.entry,
                kernel.unchecked,
                kernel.source.len()
            );
            if let Some(before) = seen.insert(kernel.name, entry.clone()) {
                assert_eq!(before, entry, "{}: two kernels of one name", kernel.name);
                continue;
            }
            let header = format!("// entry {} unchecked {}\n", kernel.entry, kernel.unchecked);
            for (subgroups, suffix) in [(false, ""), (true, ".sg")] {
                let source = source_for(&kernel, subgroups);
                if subgroups && source == source_for(&kernel, false) {
                    continue;
                }
                // naga 30 rejects the browsers' `enable subgroups;`.
                let native = source.trim_start_matches("enable subgroups;\n");
                let what = format!("{} ({form}{suffix})", kernel.name);
                validate(&what, native, needs(native));
                let file = dir.join(format!("{}.{form}{suffix}.wgsl", kernel.name));
                std::fs::write(&file, format!("{header}{source}")).expect("a dump file");
            }
        }
        assert!(seen.len() > 100, "{} kernels", seen.len());
    }
}

#[test]
fn prelude_kernels_compile_to_spirv_with_either_reduction() {
    let kernels: Vec<_> = catalog(false)
        .into_iter()
        .filter(|k| k.source.contains("fn block_sum("))
        .collect();
    assert!(kernels.len() >= 10, "{} kernels", kernels.len());
    for kernel in &kernels {
        for subgroups in [false, true] {
            let what = format!("{} (subgroups {subgroups})", kernel.name);
            let source = source_for(kernel, subgroups);
            assert_eq!(
                source.contains("subgroupAdd"),
                subgroups,
                "{what}: the prelude was not swapped as asked"
            );
            let caps = if subgroups {
                Capabilities::SUBGROUP
            } else {
                Capabilities::empty()
            };
            let (module, info) = validate(&what, &source, caps);
            let options = naga::back::spv::Options {
                lang_version: (1, 3),
                ..Default::default()
            };
            let words = naga::back::spv::write_vec(&module, &info, &options, None)
                .unwrap_or_else(|e| panic!("{what}: SPIR-V: {e}"));
            // OpCapability (17) GroupNonUniformArithmetic (63): the subgroup adds and
            // maxes reach the SPIR-V (naga writes every function), only with subgroups.
            let arithmetic = words.windows(2).any(|w| w == [(2 << 16) | 17, 63]);
            assert_eq!(arithmetic, subgroups, "{what}");
        }
    }
}

/// `kernels::MAX_WORKGROUP_SIZE`, which the planner checks a device against, is
/// the largest `@workgroup_size` any kernel declares.
#[test]
fn the_largest_workgroup_is_the_one_the_planner_checks() {
    let mut largest = 0u64;
    for kernel in catalog(false) {
        let source = kernel.source;
        for (at, _) in source.match_indices("@workgroup_size(") {
            let arg = &source[at + "@workgroup_size(".len()..];
            let arg = arg[..arg.find(')').expect("a closing parenthesis")].trim();
            let size = arg.parse::<u64>().unwrap_or_else(|_| {
                // A constant of the module: `const WG: u32 = 128u;`.
                let decl = format!("const {arg}: u32 = ");
                let at = source.find(&decl).unwrap_or_else(|| {
                    panic!("{}: workgroup size {arg} is no constant", kernel.name)
                });
                let value = &source[at + decl.len()..];
                value[..value.find('u').expect("a u32 literal")]
                    .parse()
                    .expect("a number")
            });
            largest = largest.max(size);
        }
    }
    assert_eq!(largest, tidepool::kernels::MAX_WORKGROUP_SIZE);
}

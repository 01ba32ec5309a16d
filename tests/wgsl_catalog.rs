//! Every kernel's final WGSL, written to `target/tmp/wgsl/` (native and browser
//! forms, and the subgroup form where it differs): a change meant to leave the
//! kernels as they are shows as an empty diff of two dumps.

#![cfg(not(target_arch = "wasm32"))]

#[test]
fn every_kernel_source_is_dumped_once_by_name() {
    use std::collections::BTreeMap;
    use tidepool::kernels::{catalog, source_for};
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
            let plain = source_for(&kernel, false);
            let header = format!("// entry {} unchecked {}\n", kernel.entry, kernel.unchecked);
            let file = dir.join(format!("{}.{form}.wgsl", kernel.name));
            std::fs::write(&file, format!("{header}{plain}")).expect("a dump file");
            let sg = source_for(&kernel, true);
            if sg != plain {
                let file = dir.join(format!("{}.{form}.sg.wgsl", kernel.name));
                std::fs::write(&file, format!("{header}{sg}")).expect("a dump file");
            }
        }
        assert!(seen.len() > 100, "{} kernels", seen.len());
    }
}

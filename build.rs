//! Gathers tidepool's own sources and docs into the built-in training corpus, so the
//! app trains with no download and the corpus is ours to ship.

use std::path::{Path, PathBuf};

fn collect(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, exts, out);
        } else if path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| exts.contains(&e))
        {
            out.push(path);
        }
    }
}

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let mut files = Vec::new();
    collect(&root.join("src"), &["rs", "wgsl"], &mut files);
    for doc in ["README.md", "BENCHMARKS.md"] {
        if root.join(doc).exists() {
            files.push(root.join(doc));
        }
    }
    files.sort();
    let mut corpus = String::new();
    for file in &files {
        if let Ok(text) = std::fs::read_to_string(file) {
            corpus.push_str(&text);
            corpus.push('\n');
        }
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it")).join("corpus.txt");
    std::fs::write(out, corpus).expect("write corpus");
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=README.md");
    println!("cargo:rerun-if-changed=BENCHMARKS.md");
}

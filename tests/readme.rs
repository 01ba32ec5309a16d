//! The README's code that a test runs must be the code the test runs: every fenced
//! block after a `<!-- verbatim: PATH -->` line equals that file, byte for byte (or,
//! with `<!-- verbatim: NAME in PATH -->`, the JS template literal `NAME` in it).
//! Cheap (no GPU); native only (it reads files).
#![cfg(not(target_arch = "wasm32"))]

use std::path::Path;

/// The text of `const NAME = `TEXT`;` in a JS file, with a final newline as a
/// fenced block has.
fn template_literal(js: &str, name: &str) -> Option<String> {
    let start = js.find(&format!("const {name} = `"))? + name.len() + 10;
    let len = js[start..].find("`;")?;
    Some(format!("{}\n", &js[start..start + len]))
}

/// `(path, block)` for every marked block.
fn verbatim_blocks(readme: &str) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut rest = readme;
    while let Some(at) = rest.find("<!-- verbatim: ") {
        let after = &rest[at + "<!-- verbatim: ".len()..];
        let path = after[..after.find(" -->").expect("marker ends with -->")].to_string();
        let fence = after
            .find("\n```")
            .expect("a fenced block follows the marker")
            + 1;
        let body_start = fence + after[fence..].find('\n').expect("fence line ends") + 1;
        let body_len = after[body_start..]
            .find("\n```\n")
            .map(|end| end + 1)
            .or_else(|| after[body_start..].starts_with("```\n").then_some(0))
            .expect("the fenced block is closed");
        blocks.push((path, after[body_start..body_start + body_len].to_string()));
        rest = &after[body_start + body_len..];
    }
    blocks
}

#[test]
fn readme_blocks_are_the_files_tests_run() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let blocks = verbatim_blocks(&readme);
    let paths: Vec<&str> = blocks.iter().map(|(p, _)| p.as_str()).collect();
    for expected in ["examples/pool_in_wgpu.rs", "tests/package/index.html"] {
        assert!(
            paths.contains(&expected),
            "README.md has no verbatim block of {expected} (has {paths:?})"
        );
    }
    for (path, block) in &blocks {
        // `NAME in FILE`: a JS template literal `const NAME = `...`;` of a test file.
        let (name, file_path) = match path.split_once(" in ") {
            Some((name, file)) => (Some(name), file),
            None => (None, path.as_str()),
        };
        let file = std::fs::read_to_string(root.join(file_path))
            .unwrap_or_else(|e| panic!("README.md shows {file_path}, which cannot be read: {e}"));
        let shown = match name {
            Some(name) => template_literal(&file, name)
                .unwrap_or_else(|| panic!("{file_path} has no `const {name} = `...`;`")),
            None => file,
        };
        assert!(
            *block == shown,
            "README.md's block for {path} differs from the file: copy the file into the block"
        );
    }
}

#[test]
fn a_template_literal_is_found() {
    let js = "const A = 1;\nconst SNIPPET = `<a>\n<b>`;\n";
    assert_eq!(
        template_literal(js, "SNIPPET").as_deref(),
        Some("<a>\n<b>\n")
    );
    assert_eq!(template_literal(js, "OTHER"), None);
}

#[test]
fn a_changed_block_is_caught() {
    let readme =
        "x\n<!-- verbatim: a.txt -->\n```sh\none\ntwo\n```\n\n<!-- verbatim: b.txt -->\n```\n```\n";
    let blocks = verbatim_blocks(readme);
    assert_eq!(
        blocks,
        vec![
            ("a.txt".into(), "one\ntwo\n".into()),
            ("b.txt".into(), String::new())
        ]
    );
}

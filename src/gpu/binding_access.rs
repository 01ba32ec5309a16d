//! Which storage bindings an entry point reads only: the access its pipeline's
//! derived layout gives each binding (`layout: None` lays out only what the entry
//! point uses, so a module whose entry points reuse binding numbers with other
//! access modes has one answer per entry point).
//!
//! The planned policy binds a dispatch's operands as declared unless one bound
//! read-only lies in the same buffer (an arena) as one bound writable, which WebGPU
//! refuses even on disjoint ranges (recording.rs); this says which are which. The
//! browser build has no shader compiler of its own, so this reads the WGSL text:
//! the storage globals by binding, the entry point's body and the functions it
//! calls, transitively. tests/ops/wgsl.rs checks it against naga's reflection (the
//! compiler wgpu uses natively) for every kernel.

use rustc_hash::{FxHashMap, FxHashSet};

/// Bit i set: binding i of group 0 is a `var<storage, read>` that `entry` (or a
/// function it calls) uses, for bindings under 128 (the optimizer's
/// sums bind up to 64 buffers).
pub fn read_only_bindings(source: &str, entry: &str) -> u128 {
    let code = without_comments(source);
    let read_only = storage_globals(&code);
    let bodies = function_bodies(&code);
    let mut bits = 0u128;
    let mut seen: FxHashSet<&str> = FxHashSet::default();
    let mut todo = vec![entry];
    while let Some(name) = todo.pop() {
        if !seen.insert(name) {
            continue;
        }
        let Some(body) = bodies.get(name) else {
            continue;
        };
        for word in names(body) {
            if let Some(&(binding, true)) = read_only.get(word) {
                bits |= 1 << binding;
            } else if bodies.contains_key(word) {
                todo.push(word);
            }
        }
    }
    bits
}

/// `source` with `//` and `/* */` comments blanked (they may name anything).
fn without_comments(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("//") {
            let end = after.find('\n').unwrap_or(after.len());
            rest = &after[end..];
            out.push(' ');
        } else if let Some(after) = rest.strip_prefix("/*") {
            let end = after.find("*/").map_or(after.len(), |e| e + 2);
            rest = &after[end..];
            out.push(' ');
        } else {
            let c = rest.chars().next().expect("not empty");
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// Bindings a read-only mask covers; a dispatch binding more is bound `read_write`
/// wherever it might read what it writes (recording.rs).
pub const MAX_BINDINGS: usize = 128;

/// Storage globals by name: their binding (under [`MAX_BINDINGS`]) and whether
/// read-only.
fn storage_globals(code: &str) -> FxHashMap<&str, (u32, bool)> {
    let mut globals = FxHashMap::default();
    for (at, _) in code.match_indices("@binding(") {
        let rest = &code[at + "@binding(".len()..];
        let Some(close) = rest.find(')') else {
            continue;
        };
        let Ok(binding) = rest[..close].trim().parse::<u32>() else {
            continue;
        };
        // `@binding(n) var<storage, read> name: T;`
        let decl = rest[close + 1..].split(';').next().unwrap_or("");
        let Some(var) = decl.find("var") else {
            continue;
        };
        let after = &decl[var + 3..];
        let Some(open) = after.find('<').filter(|&o| after[..o].trim().is_empty()) else {
            continue;
        };
        let Some(shut) = after.find('>') else {
            continue;
        };
        let space: String = after[open + 1..shut]
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        let Some(name) = identifiers(&after[shut + 1..]).next() else {
            continue;
        };
        if (binding as usize) < MAX_BINDINGS && space.starts_with("storage") {
            globals.insert(
                name,
                (binding, space == "storage,read" || space == "storage"),
            );
        }
    }
    globals
}

/// Each function's body (from its `{` to the matching `}`), by name.
fn function_bodies(code: &str) -> FxHashMap<&str, &str> {
    let mut bodies = FxHashMap::default();
    let bytes = code.as_bytes();
    for (at, _) in code.match_indices("fn ") {
        let starts_word = at == 0 || !is_ident(bytes[at - 1]);
        if !starts_word {
            continue;
        }
        let Some(name) = identifiers(&code[at + 3..]).next() else {
            continue;
        };
        let Some(open) = code[at..].find('{').map(|o| at + o) else {
            continue;
        };
        let mut depth = 0usize;
        let mut end = code.len();
        for (i, &b) in bytes.iter().enumerate().skip(open) {
            match b {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        bodies.insert(name, &code[open..end]);
    }
    bodies
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The identifiers of `body` that can name a global or a function: not member
/// names (`v.x`, `p.n`), which may spell a global's name.
fn names(body: &str) -> impl Iterator<Item = &str> {
    let bytes = body.as_bytes();
    identifiers(body).filter(move |w| {
        let at = w.as_ptr() as usize - body.as_ptr() as usize;
        let before = bytes[..at].iter().rev().find(|b| !b.is_ascii_whitespace());
        before != Some(&b'.')
    })
}

/// The identifiers of `text`, in order (numbers' digits never start one).
fn identifiers(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| {
            w.chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        })
}

#[cfg(test)]
mod tests {
    use super::read_only_bindings;

    #[test]
    fn each_entry_point_has_its_own_access() {
        let src = "
            @group(0) @binding(0) var<uniform> p: Params;
            @group(0) @binding(1) var<storage, read> a: array<f32>;
            @group(0) @binding(2) var<storage,read_write> out: array<f32>;
            // b is read only by `backward`: @binding(9) var<storage, read> x: f32;
            @group(0) @binding(2) var<storage, read> b_out: array<f32>;
            @group(0) @binding(3) var<storage, read> c: array<f32>;
            fn load(i: u32) -> f32 { return c[i]; }
            @compute @workgroup_size(64)
            fn forward() { out[0] = a[0] + load(1u); }
            @compute @workgroup_size(64)
            fn backward() { let x = b_out[0]; { let y = a[1]; } }
        ";
        assert_eq!(read_only_bindings(src, "forward"), 0b1010);
        assert_eq!(read_only_bindings(src, "backward"), 0b0110);
        assert_eq!(read_only_bindings(src, "missing"), 0);
    }
}

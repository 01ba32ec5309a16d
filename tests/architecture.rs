//! Imports run one way: among the top-level modules of each crate in src/ (the
//! library, from lib.rs, and the CLI, from main.rs), and among the submodules of
//! every folder, no module reaches back to a module that reaches it.
//!
//! A module reaches another when its code names it: a `use crate::..`,
//! `use super::..` or `use self::..` tree, or a `crate::` / `super::` path in code
//! (comments, doc links and string literals are left out). A name re-exported by a
//! parent (`pub use context::WgpuContext` in gpu/mod.rs) counts as the module that
//! defines it. A reference from `a/x.rs` to `b/y.rs` is an edge `a -> b` among the
//! top-level modules; from `a/x.rs` to `a/y.rs`, an edge `x -> y` inside `a`.
//! Parents and their own children are not compared (a parent re-exports its
//! children; a child uses its parent's helpers).
//!
//! Cheap (no GPU); native only (it reads files).
#![cfg(not(target_arch = "wasm32"))]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path from its crate's root (`["gpu", "context"]`); the root is empty.
type ModPath = Vec<String>;

/// Source text with comments, string and char literals blanked out (newlines kept,
/// so that byte offsets still give line numbers).
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                blank(&mut out, chars[i]);
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, chars[i]);
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !ident_before(&chars, i) {
            // A raw string r"..", r#".."#: ends at a quote followed by as many #.
            let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
            if chars.get(i + 1 + hashes) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let end: String = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let body_start = i + 2 + hashes;
            let rest: String = chars[body_start..].iter().collect();
            let len = rest.find(&end).map_or(rest.len(), |at| {
                rest[..at].chars().count() + end.chars().count()
            });
            for &ch in &chars[i..body_start + len] {
                blank(&mut out, ch);
            }
            i = body_start + len;
        } else if c == '"' {
            blank(&mut out, c);
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                let skip = if chars[i] == '\\' { 2 } else { 1 };
                for &ch in chars.iter().skip(i).take(skip) {
                    blank(&mut out, ch);
                }
                i += skip;
            }
            if i < chars.len() {
                blank(&mut out, chars[i]);
                i += 1;
            }
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{1F600}'); else a lifetime ('a).
            let len = if next == Some('\\') {
                chars[i + 2..]
                    .iter()
                    .position(|&q| q == '\'')
                    .map_or(1, |p| p + 3)
            } else if chars.get(i + 2) == Some(&'\'') {
                3
            } else {
                1
            };
            for &ch in &chars[i..(i + len).min(chars.len())] {
                blank(&mut out, ch);
            }
            i += len;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_before(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

/// A token of code and the line it is on.
#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    /// `::`
    Path,
    Punct(char),
}

fn tokens(code: &str) -> Vec<(Tok, usize)> {
    let mut out = Vec::new();
    let mut line = 1;
    let mut chars = code.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\n' {
            line += 1;
        } else if c.is_alphabetic() || c == '_' {
            let mut word = c.to_string();
            while let Some(&n) = chars.peek() {
                if !(n.is_alphanumeric() || n == '_') {
                    break;
                }
                word.push(n);
                chars.next();
            }
            out.push((Tok::Ident(word), line));
        } else if c.is_ascii_digit() {
            while chars
                .peek()
                .is_some_and(|n| n.is_alphanumeric() || *n == '_')
            {
                chars.next();
            }
        } else if c == ':' && chars.peek() == Some(&':') {
            chars.next();
            out.push((Tok::Path, line));
        } else if !c.is_whitespace() {
            out.push((Tok::Punct(c), line));
        }
    }
    out
}

/// A path a use tree names, and its alias (`X as Y`).
type Named = (Vec<String>, Option<String>);

/// The paths a use tree (or a plain path) starting at `toks[at]` names, each with
/// its alias (`X as Y`); returns them and where the tree ends. `{a, b::{c, d}}`
/// gives `a`, `b::c`, `b::d`; `self` inside braces names the prefix itself.
fn parse_tree(toks: &[(Tok, usize)], at: usize) -> (Vec<Named>, usize) {
    let mut prefix = Vec::new();
    let mut i = at;
    loop {
        match toks.get(i).map(|t| &t.0) {
            Some(Tok::Ident(word)) => {
                prefix.push(word.clone());
                i += 1;
            }
            Some(Tok::Punct('{')) => {
                let mut paths = Vec::new();
                i += 1;
                while let Some((tok, _)) = toks.get(i) {
                    match tok {
                        Tok::Punct('}') => {
                            i += 1;
                            break;
                        }
                        Tok::Punct(',') => i += 1,
                        _ => {
                            let (inner, end) = parse_tree(toks, i);
                            for (mut path, alias) in inner {
                                if path.first().map(String::as_str) == Some("self") {
                                    path.remove(0);
                                }
                                let mut full = prefix.clone();
                                full.extend(path);
                                paths.push((full, alias));
                            }
                            i = end.max(i + 1);
                        }
                    }
                }
                return (paths, i);
            }
            Some(Tok::Punct('*')) => return (Vec::new(), i + 1),
            _ => break,
        }
        if toks.get(i).map(|t| &t.0) != Some(&Tok::Path) {
            break;
        }
        i += 1;
    }
    let alias = match (toks.get(i), toks.get(i + 1)) {
        (Some((Tok::Ident(kw), _)), Some((Tok::Ident(name), _))) if kw == "as" => {
            i += 2;
            Some(name.clone())
        }
        _ => None,
    };
    (vec![(prefix, alias)], i)
}

/// One module's file: its children (`mod x;`), what its own `use`s bring in (name
/// -> absolute path, for names re-exported to or used by its children), and every
/// path it names, from the module (possibly an inline one) that names it.
struct Parsed {
    children: BTreeMap<String, PathBuf>,
    imports: BTreeMap<String, Vec<String>>,
    refs: Vec<(ModPath, Vec<String>, usize)>,
}

/// The file of child `name` of the module in `file` (`#[path]` relative to the
/// declaring file's folder).
fn child_file(file: &Path, name: &str, path_attr: Option<&str>) -> PathBuf {
    let dir = file.parent().expect("a file has a folder");
    if let Some(path) = path_attr {
        return dir.join(path);
    }
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let base = if ["lib", "main", "mod"].contains(&stem) {
        dir.to_path_buf()
    } else {
        dir.join(stem)
    };
    let flat = base.join(format!("{name}.rs"));
    if flat.exists() {
        flat
    } else {
        base.join(name).join("mod.rs")
    }
}

fn parse(file: &Path, module: &ModPath) -> Parsed {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    // `#[path = ".."]` is a string: read it before strings are blanked.
    let raw_toks = tokens(&text);
    let toks = tokens(&code_only(&text));
    let mut parsed = Parsed {
        children: BTreeMap::new(),
        imports: BTreeMap::new(),
        refs: Vec::new(),
    };
    // Inline modules open at a brace depth: (module path, depth inside its braces).
    let mut stack: Vec<(ModPath, usize)> = vec![(module.clone(), 0)];
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        let (tok, line) = &toks[i];
        let current = stack.last().expect("the file's module").0.clone();
        match tok {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                if stack.len() > 1 && stack.last().is_some_and(|(_, d)| *d == depth) {
                    stack.pop();
                }
                depth = depth.saturating_sub(1);
            }
            Tok::Ident(kw) if kw == "mod" => {
                if let (Some((Tok::Ident(name), _)), Some((next, _))) =
                    (toks.get(i + 1), toks.get(i + 2))
                {
                    if *next == Tok::Punct(';') && stack.len() == 1 {
                        let attr = path_attribute(&raw_toks, &text, *line);
                        parsed
                            .children
                            .insert(name.clone(), child_file(file, name, attr.as_deref()));
                    } else if *next == Tok::Punct('{') {
                        let mut inner = current.clone();
                        inner.push(name.clone());
                        stack.push((inner, depth + 1));
                    }
                }
            }
            Tok::Ident(kw) if kw == "use" => {
                let (paths, end) = parse_tree(&toks, i + 1);
                for (path, alias) in paths {
                    let Some(last) = alias.or_else(|| path.last().cloned()) else {
                        continue;
                    };
                    let absolute = match path.first().map(String::as_str) {
                        Some("crate" | "super" | "self") => absolute(&current, &path),
                        // A plain first name: a child of this module, or another crate.
                        _ => Some([current.clone(), path.clone()].concat()),
                    };
                    if let Some(absolute) = absolute {
                        if stack.len() == 1 && depth == 0 {
                            parsed.imports.insert(last, absolute.clone());
                        }
                        if matches!(path[0].as_str(), "crate" | "super" | "self") {
                            parsed.refs.push((current.clone(), absolute, *line));
                        }
                    }
                }
                i = end;
                continue;
            }
            Tok::Ident(first)
                if matches!(first.as_str(), "crate" | "super")
                    && toks.get(i + 1).map(|t| &t.0) == Some(&Tok::Path)
                    && (i == 0 || toks[i - 1].0 != Tok::Path) =>
            {
                let (paths, end) = parse_tree(&toks, i);
                for (path, _) in paths {
                    if let Some(absolute) = absolute(&current, &path) {
                        parsed.refs.push((current.clone(), absolute, *line));
                    }
                }
                i = end;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    parsed
}

/// The `#[path = "X"]` on the line before a `mod` declaration at `line`, if any.
fn path_attribute(raw: &[(Tok, usize)], text: &str, line: usize) -> Option<String> {
    let attr_line = raw
        .iter()
        .any(|(t, l)| *l + 1 == line && *t == Tok::Ident("path".into()))
        .then(|| text.lines().nth(line - 2))??;
    let start = attr_line.find('"')? + 1;
    let len = attr_line[start..].find('"')?;
    Some(attr_line[start..start + len].to_string())
}

/// `crate::a::b`, `super::super::a`, `self::a` from `current` as a path from the
/// crate's root (`None`: more `super`s than parents).
fn absolute(current: &ModPath, path: &[String]) -> Option<Vec<String>> {
    let mut base = current.clone();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        _ => {}
    }
    while rest.first().map(String::as_str) == Some("super") {
        base.pop()?;
        rest = &rest[1..];
    }
    Some([base, rest.to_vec()].concat())
}

/// Every module of the crate rooted at `root`, parsed.
fn crate_modules(root: &Path) -> BTreeMap<ModPath, (PathBuf, Parsed)> {
    let mut modules = BTreeMap::new();
    let mut todo = vec![(Vec::new(), root.to_path_buf())];
    while let Some((path, file)) = todo.pop() {
        let parsed = parse(&file, &path);
        for (name, child) in &parsed.children {
            let mut child_path = path.clone();
            child_path.push(name.clone());
            todo.push((child_path, child.clone()));
        }
        modules.insert(path, (file, parsed));
    }
    modules
}

/// The module that `path` (absolute: modules, then maybe an item) names: its
/// modules followed as far as they go, a name a module imports followed to where
/// it comes from.
fn resolve(modules: &BTreeMap<ModPath, (PathBuf, Parsed)>, path: &[String], hops: u32) -> ModPath {
    let mut current: ModPath = Vec::new();
    for (at, segment) in path.iter().enumerate() {
        let Some((_, parsed)) = modules.get(&current) else {
            break;
        };
        if parsed.children.contains_key(segment) {
            current.push(segment.clone());
            continue;
        }
        if let Some(target) = parsed.imports.get(segment).filter(|_| hops < 16) {
            let mut full = target.clone();
            full.extend_from_slice(&path[at + 1..]);
            return resolve(modules, &full, hops + 1);
        }
        break;
    }
    current
}

/// An edge between two siblings (in the folder of their parent) and where it was
/// seen first.
type Edges = BTreeMap<(ModPath, String, String), String>;

fn edges(src: &Path, modules: &BTreeMap<ModPath, (PathBuf, Parsed)>) -> Edges {
    let mut edges = Edges::new();
    for (file, parsed) in modules.values() {
        for (from, path, line) in &parsed.refs {
            let to = resolve(modules, path, 0);
            let shared = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if shared < from.len() && shared < to.len() {
                let folder = from[..shared].to_vec();
                let key = (folder, from[shared].clone(), to[shared].clone());
                let file = file.strip_prefix(src).unwrap_or(file).display();
                edges
                    .entry(key)
                    .or_insert_with(|| format!("src/{file}:{line} ({})", path.join("::")));
            }
        }
    }
    edges
}

/// The cycles among siblings: each strongly connected group of more than one
/// module in a folder, with the edges inside it.
fn cycles(edges: &Edges) -> Vec<String> {
    let mut folders: BTreeMap<&ModPath, BTreeMap<&str, BTreeSet<&str>>> = BTreeMap::new();
    for (folder, from, to) in edges.keys() {
        let graph = folders.entry(folder).or_default();
        graph.entry(from).or_default().insert(to);
        graph.entry(to).or_default();
    }
    let mut found = Vec::new();
    for (folder, graph) in folders {
        // Reachability by repeated search: the graphs are a few dozen nodes.
        let reach = |start: &str| {
            let mut seen = BTreeSet::new();
            let mut todo = vec![start];
            while let Some(n) = todo.pop() {
                for &next in &graph[n] {
                    if seen.insert(next) {
                        todo.push(next);
                    }
                }
            }
            seen
        };
        let reaches: BTreeMap<&str, BTreeSet<&str>> =
            graph.keys().map(|&n| (n, reach(n))).collect();
        let mut done = BTreeSet::new();
        for &n in graph.keys() {
            if done.contains(n) || !reaches[n].contains(n) {
                continue;
            }
            let group: BTreeSet<&str> = reaches[n]
                .iter()
                .copied()
                .filter(|m| reaches[m].contains(n))
                .collect();
            done.extend(group.iter().copied());
            let inside: Vec<String> = edges
                .iter()
                .filter(|((f, a, b), _)| {
                    f == folder && group.contains(a.as_str()) && group.contains(b.as_str())
                })
                .map(|((_, a, b), at)| format!("    {a} -> {b}: {at}"))
                .collect();
            let place = if folder.is_empty() {
                "top level".to_string()
            } else {
                folder.join("::")
            };
            found.push(format!(
                "{place}: {}\n{}",
                group.into_iter().collect::<Vec<_>>().join(", "),
                inside.join("\n")
            ));
        }
    }
    found
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Circles inside src/kernels that the restructuring of the kernels removes, named
/// as the test names them. Until then this test holds every other folder to none;
/// a listed circle that is gone fails it too (delete its line), so the list only
/// shrinks.
const KNOWN_CIRCLES: [&str; 2] = [
    "lib.rs, kernels: arena, optimizer, split_sums",
    "lib.rs, kernels: matmul, matmul_coop",
];

#[test]
fn no_module_of_src_reaches_back_to_one_that_reaches_it() {
    let src = src();
    let mut found = Vec::new();
    for root in ["lib.rs", "main.rs"] {
        let modules = crate_modules(&src.join(root));
        found.extend(
            cycles(&edges(&src, &modules))
                .into_iter()
                .map(|c| format!("{root}, {c}")),
        );
    }
    let named = |c: &String| c.lines().next().unwrap_or_default().to_string();
    let new: Vec<&str> = found
        .iter()
        .filter(|c| !KNOWN_CIRCLES.contains(&named(c).as_str()))
        .map(String::as_str)
        .collect();
    assert!(
        new.is_empty(),
        "import circles (each group reaches itself; break an edge by moving what it \
         names to a module both can import):\n{}",
        new.join("\n")
    );
    let names: Vec<String> = found.iter().map(named).collect();
    for known in KNOWN_CIRCLES {
        assert!(
            names.iter().any(|n| n == known),
            "the circle {known:?} is gone: delete it from KNOWN_CIRCLES"
        );
    }
}

/// The checker itself: it sees `use` trees, `super::` and `crate::` paths in code,
/// re-exports, inline modules; and not comments or strings.
#[test]
fn the_checker_finds_a_circle_through_each_kind_of_reference() {
    let dir = std::env::temp_dir().join(format!("tidepool-architecture-{}", std::process::id()));
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    let _ = std::fs::remove_dir_all(&dir);
    write(
        "lib.rs",
        "pub mod a;\npub mod b;\npub mod c;\npub use c::Thing;\n",
    );
    write(
        "a.rs",
        "use crate::{b::{self, X}, c};\n// crate::c::Y in a comment\n",
    );
    write(
        "b.rs",
        "pub fn f() { crate::Thing::new(); let s = \"crate::a::Z\"; }\n",
    );
    write("c/mod.rs", "mod d;\nmod e;\npub use d::Thing;\n");
    write(
        "c/d.rs",
        "use super::e::Helper;\npub struct Thing;\n#[cfg(test)]\nmod tests { use super::Thing; }\n",
    );
    write("c/e.rs", "pub fn g() -> super::Thing { crate::a::h() }\n");
    let modules = crate_modules(&dir.join("lib.rs"));
    let edges = edges(&dir, &modules);
    let listed: Vec<String> = edges
        .keys()
        .map(|(folder, a, b)| format!("{}:{a}->{b}", folder.join("::")))
        .collect();
    assert_eq!(
        listed,
        [":a->b", ":a->c", ":b->c", ":c->a", "c:d->e", "c:e->d"]
    );
    let found = cycles(&edges);
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(found[0].starts_with("top level: a, b, c"), "{}", found[0]);
    assert!(found[1].starts_with("c: d, e"), "{}", found[1]);
    std::fs::remove_dir_all(&dir).ok();
}

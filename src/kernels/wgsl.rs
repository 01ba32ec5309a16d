//! WGSL assembly: how a kernel's source is specialised before it is compiled (rows
//! written out by [`unroll`] or as loops by [`loop_lines`], a variant's lines kept
//! by [`select`]). The prelude it builds on is the context's ([`crate::gpu::source_for`]
//! swaps its block reductions). The contract each piece keeps is in
//! `src/kernels/README.md`.

/// The prelude (`src/gpu/prelude.wgsl`) that kernels join in front of their own
/// source, and the line a module calling subgroup operations begins with: both are
/// the context's, which compiles them.
pub(crate) use crate::gpu::{ENABLE_SUBGROUPS, PRELUDE};

/// Writes each code line of `template` holding `marker` out `count` times, in order,
/// with `{marker}u` replaced by the copy's index as a WGSL `u32` literal and
/// `marker` by the bare index (`let a#R = a_at(ra#R, k);` -> `let a0 = ..`, `let a1
/// = ..`). Other lines and comments pass unchanged. Kernels keep per-row or
/// per-channel state in named variables this way rather than in arrays indexed by a
/// loop counter, which some shader compilers (SwiftShader's) keep in memory. Apply
/// it once a marker for lines holding several (every combination, the first
/// marker's outermost).
pub(crate) fn unroll(template: &str, marker: &str, count: usize) -> String {
    let literal = format!("{marker}u");
    let mut wgsl = String::with_capacity(template.len());
    for line in template.lines() {
        if line.contains(marker) && !line.trim_start().starts_with("//") {
            for i in 0..count {
                let copy = line.replace(&literal, &format!("{i}u"));
                wgsl.push_str(&copy.replace(marker, &i.to_string()));
                wgsl.push('\n');
            }
        } else {
            wgsl.push_str(line);
            wgsl.push('\n');
        }
    }
    wgsl
}

/// The compact form of [`unroll`]: each code line of `template` holding `marker`
/// becomes a loop over `0 .. bound` (a WGSL constant), with `{marker}u` the loop's
/// index and `name{marker}` element `name[i]` of an `array<vec4<f32>, bound>`. A
/// line declaring such a name (`let` or `var name{marker} = init;`) declares the
/// array and fills it. The same arithmetic in a fraction of the shader, for where
/// compile time matters more than registers.
pub(crate) fn loop_lines(template: &str, marker: &str, bound: &str) -> String {
    let index = format!("{}_", marker.trim_start_matches('#').to_lowercase());
    let looped = |stmt: &str| {
        let stmt = stmt
            .replace(&format!("{marker}u"), &index)
            .replace(marker, &format!("[{index}]"));
        format!("for (var {index} = 0u; {index} < {bound}; {index}++) {{ {stmt} }}")
    };
    let mut wgsl = String::with_capacity(template.len());
    for line in template.lines() {
        let code = line.trim_start();
        if !line.contains(marker) || code.starts_with("//") {
            wgsl.push_str(line);
        } else {
            let indent = &line[..line.len() - code.len()];
            let decl = code
                .strip_prefix("var ")
                .or_else(|| code.strip_prefix("let "))
                .and_then(|rest| rest.split_once(&format!("{marker} = ")));
            match decl {
                Some((name, init)) => {
                    let fill = looped(&format!("{name}{marker} = {init}"));
                    wgsl.push_str(&format!(
                        "{indent}var {name}: array<vec4<f32>, {bound}>; {fill}"
                    ));
                }
                None => wgsl.push_str(&format!("{indent}{}", looped(code))),
            }
        }
        wgsl.push('\n');
    }
    wgsl
}

/// `template` as the variant whose tags are `on`, out of the template's `tags`: a
/// line starting with `#TAG ` (at its very start) is kept, without the tag, where
/// TAG is on and dropped where it is off; a span `{TAG:text}` within a line becomes
/// `text` where TAG is on and nothing where it is off. Other lines pass unchanged.
/// One template so writes several variants of a kernel, each line that differs
/// once a variant beside the lines they share.
pub(crate) fn select(template: &str, tags: &[&str], on: &[&str]) -> String {
    fn tagged<'a>(line: &'a str, tag: &str) -> Option<&'a str> {
        line.strip_prefix('#')?.strip_prefix(tag)?.strip_prefix(' ')
    }
    let mut wgsl = String::with_capacity(template.len());
    'lines: for mut line in template.lines() {
        for tag in tags {
            if let Some(rest) = tagged(line, tag) {
                if !on.contains(tag) {
                    continue 'lines;
                }
                line = rest;
                break;
            }
        }
        push_spans(&mut wgsl, line, tags, on);
        wgsl.push('\n');
    }
    wgsl
}

/// `line` onto `wgsl` with each `{TAG:text}` span of `tags` resolved ([`select`]).
fn push_spans(wgsl: &mut String, line: &str, tags: &[&str], on: &[&str]) {
    let mut rest = line;
    while let Some(open) = rest.find('{') {
        wgsl.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let span = tags.iter().find_map(|tag| {
            let inner = after.strip_prefix(tag)?.strip_prefix(':')?;
            let close = inner.find('}')?;
            Some((tag, &inner[..close], &inner[close + 1..]))
        });
        match span {
            Some((tag, text, next)) => {
                if on.contains(tag) {
                    wgsl.push_str(text);
                }
                rest = next;
            }
            None => {
                wgsl.push('{');
                rest = after;
            }
        }
    }
    wgsl.push_str(rest);
}

/// A kernel's WGSL with the shared helpers of `gpu/prelude.wgsl` joined in front.
macro_rules! with_prelude {
    ($file:literal) => {
        concat!(include_str!("../gpu/prelude.wgsl"), include_str!($file))
    };
}

/// An attention kernel's WGSL with the dropout mask's hash and `keep` joined in front
/// (one copy for the four kernels, GPU and CPU tunings).
macro_rules! with_dropout_mask {
    ($file:literal) => {
        concat!(
            include_str!("hash.wgsl"),
            include_str!("attention_mask.wgsl"),
            include_str!($file)
        )
    };
}

#[cfg(test)]
mod tests {
    use super::{loop_lines, select, unroll};

    #[test]
    fn unroll_writes_each_marked_line_once_an_index() {
        let t = "let x = 1u;\n// a#R stays\n    var a#R = f(#Ru, b#R);\n";
        assert_eq!(
            unroll(t, "#R", 3),
            "let x = 1u;\n// a#R stays\n    var a0 = f(0u, b0);\n    var a1 = f(1u, b1);\n    var a2 = f(2u, b2);\n"
        );
        // Two markers on one line: every combination, the first applied outermost.
        let both = unroll(&unroll("s#R += q#R_#C;", "#R", 2), "#C", 2);
        assert_eq!(both, "s0 += q0_0;\ns0 += q0_1;\ns1 += q1_0;\ns1 += q1_1;\n");
    }

    #[test]
    fn select_keeps_the_variants_lines_and_spans() {
        let t = "a {X:x}{Y:y} { b }\n#X only x\n#Y only y\n#Z stays\n";
        assert_eq!(
            select(t, &["X", "Y"], &["X"]),
            "a x { b }\nonly x\n#Z stays\n"
        );
        assert_eq!(
            select(t, &["X", "Y"], &["Y"]),
            "a y { b }\nonly y\n#Z stays\n"
        );
        assert_eq!(select(t, &["X", "Y"], &[]), "a  { b }\n#Z stays\n");
    }

    #[test]
    fn loop_lines_declares_arrays_and_loops_over_them() {
        let t = "  let k#C = load(#Cu);\n  s += dot(q#C, k#C);\nlet y = 2u;\n";
        assert_eq!(
            loop_lines(t, "#C", "HS4"),
            "  var k: array<vec4<f32>, HS4>; for (var c_ = 0u; c_ < HS4; c_++) { k[c_] = load(c_); }\n\
             \x20 for (var c_ = 0u; c_ < HS4; c_++) { s += dot(q[c_], k[c_]); }\nlet y = 2u;\n"
        );
    }
}

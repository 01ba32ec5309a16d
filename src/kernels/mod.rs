//! GPU kernels: one `.wgsl` per op, with a typed launcher each.
//!
//! A launcher takes `PooledBuffer`s and shapes, records its dispatch into the
//! context's current scope, and returns its output as a `PooledBuffer` drawn from the
//! pool. Every kernel writes every element of its output (rule 2 in [`crate::gpu`]);
//! its CPU specification is the function of the same name in [`crate::reference`].

use crate::gpu::Kernel;

pub use crate::gpu::{source_for, MAX_SUBGROUP_WIDTH};
/// The WGSL every kernel may build on (grid index, block reductions) and its
/// specialisation for subgroups live with the context that compiles them.
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

/// One kernel of each source joined after the prelude (its module has every entry
/// point of that source), the optimizer's generated ones for 1 and 3 tensors: what
/// the naga test (tests/op_parity.rs) compiles with each prelude.
pub fn prelude_kernels() -> Vec<Kernel> {
    let one = |name, source| Kernel {
        name,
        source,
        entry: "",
        unchecked: false,
    };
    let mut kernels = vec![
        one("layernorm", layernorm::SOURCE),
        one("crossentropy", crossentropy::SOURCE),
        one("optimizer", optimizer::SOURCE),
        one("embedding", embedding::SOURCE),
        one("gelu", gelu::SOURCE),
        residual::RESIDUAL,
    ];
    kernels.extend(optimizer::generated_kernels());
    kernels
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

mod target;

pub use target::{force, Target};

// ---- elementwise: residual add, GELU (for the CPU-adapter matmuls) ----
// Dropout has no kernel of its own: the mask (hash.wgsl) is applied inside the
// embedding, matmul-epilogue, layernorm-backward and attention kernels.
mod gelu;
mod residual;

pub use gelu::gelu_forward;
pub use residual::residual_forward;

// ---- row reductions: layernorm, cross-entropy ----
mod crossentropy;
mod layernorm;

pub use crossentropy::{crossentropy_forward, crossentropy_forward_on, mean, mean_into, mean_on};
pub use layernorm::{
    layernorm_backward, layernorm_backward_fused_on, layernorm_backward_on,
    layernorm_backward_scratch, layernorm_forward, layernorm_forward_on,
};

// ---- embedding ----
mod embedding;

pub use embedding::{
    encoder_backward, encoder_backward_on, encoder_forward, encoder_forward_dropout, token_index,
};

// ---- matmul ----
mod matmul;
mod matmul_coop;

pub use matmul_coop::{
    coop2_supported, coop_supported, is_f16_16x16, GRAD_SCALE, KERNELS as F16_KERNELS,
};

pub use matmul::{
    matmul_backward, matmul_backward_deferred, matmul_backward_fused, matmul_dinp,
    matmul_dinp_fused_variant, matmul_dinp_variant, matmul_dweight, matmul_dweight_fused_variant,
    matmul_dweight_variant, matmul_forward, matmul_forward_fused, matmul_forward_fused_variant,
    matmul_forward_variant, matmul_weight_grads_variant, ForwardFusion, MatmulVariant,
};

// ---- weight gradients from split partials ----
mod split_sums;

pub(crate) use embedding::encoder_backward_into;
pub(crate) use layernorm::layernorm_backward_into;
pub(crate) use matmul::{matmul_backward_into, weight_grad_splits};
pub use split_sums::{GradDest, SplitSums, WeightGrad};

// ---- attention ----
mod attention;

pub use attention::{
    attention_backward, attention_backward_on, attention_forward, attention_forward_on,
    attention_subgroups,
};

// ---- optimizer: gradient norms, clipping, AdamW; the parameters' arenas ----
mod arena;
mod optimizer;

pub use arena::{ArenaLayout, GradArena, GradLayout, ParamArena, ALIGN_FLOATS, HEADER_FLOATS};

pub use optimizer::{
    adamw_step, adamw_step_on, scale_in_place, scratch_floats, sum_in_one_pass,
    sum_splits_together, AdamW, Arenas, Moments, SplitSum, TensorsPerDispatch,
    MAX_TENSORS_PER_DISPATCH,
};

#[cfg(test)]
mod tests {
    use super::{loop_lines, unroll};

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
    fn loop_lines_declares_arrays_and_loops_over_them() {
        let t = "  let k#C = load(#Cu);\n  s += dot(q#C, k#C);\nlet y = 2u;\n";
        assert_eq!(
            loop_lines(t, "#C", "HS4"),
            "  var k: array<vec4<f32>, HS4>; for (var c_ = 0u; c_ < HS4; c_++) { k[c_] = load(c_); }\n\
             \x20 for (var c_ = 0u; c_ < HS4; c_++) { s += dot(q[c_], k[c_]); }\nlet y = 2u;\n"
        );
    }
}

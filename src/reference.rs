//! The CPU reference of every op: plain Rust written for clarity, the specification
//! the GPU kernels must meet. Sums accumulate in f64 where order matters.
//!
//! Shapes follow llm.c: `b` batch, `t` time (context), `c` channels, `v` vocab,
//! `nh` heads; tensors are row-major `Vec<f32>`.

/// `a + b`, elementwise.
pub fn residual_forward(a: &[f32], b: &[f32]) -> Vec<f32> {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| x + y).collect()
}

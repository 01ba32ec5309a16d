//! Residual add.

/// `a + b`, elementwise.
pub fn residual_forward(a: &[f32], b: &[f32]) -> Vec<f32> {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| x + y).collect()
}

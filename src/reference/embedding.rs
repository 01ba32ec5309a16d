//! Token plus position embedding (llm.c's encoder).

use super::dropout::{dropped, DropoutMask};
use super::to_f32;

/// A batch of `b` sequences of `t` tokens, embedded in `c` channels from a
/// vocabulary of `v`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EmbeddingShape {
    pub b: usize,
    pub t: usize,
    pub c: usize,
    pub v: usize,
}

/// Token plus position embedding: `out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]`.
pub fn encoder_forward(
    tokens: &[u32],
    wte: &[f32],
    wpe: &[f32],
    shape: EmbeddingShape,
) -> Vec<f32> {
    let EmbeddingShape { b, t, c, .. } = shape;
    assert_eq!(tokens.len(), b * t);
    assert!(wpe.len() >= t * c);
    let mut out = vec![0.0; b * t * c];
    for (row, &tok) in tokens.iter().enumerate() {
        let pos = row % t;
        let tok = tok as usize;
        for i in 0..c {
            out[row * c + i] = wte[tok * c + i] + wpe[pos * c + i];
        }
    }
    out
}

/// Gradients of [`encoder_forward`]: `dwte` (`v*c`) gets `dout` of every position
/// holding that token, `dwpe` (`t*c`) sums `dout` over the batch.
pub fn encoder_backward(
    dout: &[f32],
    tokens: &[u32],
    shape: EmbeddingShape,
) -> (Vec<f32>, Vec<f32>) {
    let EmbeddingShape { b, t, c, v } = shape;
    assert_eq!(tokens.len(), b * t);
    assert_eq!(dout.len(), b * t * c);
    let mut dwte = vec![0.0f64; v * c];
    let mut dwpe = vec![0.0f64; t * c];
    for (row, &tok) in tokens.iter().enumerate() {
        let pos = row % t;
        let tok = tok as usize;
        for i in 0..c {
            let d = dout[row * c + i] as f64;
            dwte[tok * c + i] += d;
            dwpe[pos * c + i] += d;
        }
    }
    (to_f32(&dwte), to_f32(&dwpe))
}

/// [`encoder_forward`] through the embedding's dropout `mask`, if any.
pub fn encoder_forward_dropout(
    tokens: &[u32],
    wte: &[f32],
    wpe: &[f32],
    shape: EmbeddingShape,
    mask: Option<DropoutMask>,
) -> Vec<f32> {
    dropped(&encoder_forward(tokens, wte, wpe, shape), mask)
}

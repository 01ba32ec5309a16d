//! Softmax cross-entropy and its gradient.

/// Rows of logits and the vocabulary they score.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CrossEntropyShape {
    pub rows: usize,
    pub v: usize,
}

/// Softmax of each row of `logits` (`rows x v`) and the cross-entropy loss of its
/// target: returns `losses` (`rows`) and `probs` (`rows x v`). The loss is
/// `logsumexp(row) - row[target]`, which stays finite when the target's probability
/// underflows.
pub fn crossentropy_forward(
    logits: &[f32],
    targets: &[u32],
    shape: CrossEntropyShape,
) -> (Vec<f32>, Vec<f32>) {
    let CrossEntropyShape { rows, v } = shape;
    assert_eq!(logits.len(), rows * v);
    assert_eq!(targets.len(), rows);
    let mut losses = vec![0.0; rows];
    let mut probs = vec![0.0; rows * v];
    for r in 0..rows {
        let row = &logits[r * v..(r + 1) * v];
        let max = row.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x as f64));
        let sum: f64 = row.iter().map(|&x| (x as f64 - max).exp()).sum();
        for i in 0..v {
            probs[r * v + i] = ((row[i] as f64 - max).exp() / sum) as f32;
        }
        let target = targets[r] as usize;
        assert!(target < v, "target {target} out of vocab {v}");
        losses[r] = (sum.ln() + max - row[target] as f64) as f32;
    }
    (losses, probs)
}

/// Gradient of `scale * sum(losses)` with respect to the logits:
/// `(probs - onehot(target)) * scale` (`scale = 1/rows` for the mean loss).
pub fn crossentropy_backward(
    probs: &[f32],
    targets: &[u32],
    shape: CrossEntropyShape,
    scale: f32,
) -> Vec<f32> {
    let CrossEntropyShape { rows, v } = shape;
    assert_eq!(probs.len(), rows * v);
    let mut dlogits = vec![0.0; rows * v];
    for r in 0..rows {
        for i in 0..v {
            let onehot = if targets[r] as usize == i { 1.0 } else { 0.0 };
            dlogits[r * v + i] = ((probs[r * v + i] as f64 - onehot) * scale as f64) as f32;
        }
    }
    dlogits
}

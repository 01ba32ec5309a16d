//! Dropout masks: their rate and their seeds. The masks' GPU side is checked
//! where each is applied, bit for bit against `reference::dropout`: the embedding
//! (`encoder_forward_dropout_is_exact`), residual branches
//! (`residual_branch_dropout_mask_is_exact`), the layernorm backward
//! (`layernorm_backward_with_residual_matches_reference`) and attention.
#![cfg(not(target_arch = "wasm32"))]

use tidepool::reference;

#[test]
fn dropout_mask_has_the_right_rate_and_depends_on_the_seed() {
    let x = vec![1.0f32; 200_000];
    for p in [0.1f32, 0.2, 0.5] {
        let out = reference::dropout(&x, p, 7);
        let dropped = out.iter().filter(|v| **v == 0.0).count() as f32 / x.len() as f32;
        assert!((dropped - p).abs() < 0.005, "p {p}: dropped {dropped}");
        let kept = out.iter().find(|v| **v != 0.0).unwrap();
        assert_eq!(*kept, 1.0 / (1.0 - p), "kept values are scaled up");
    }
    assert_ne!(
        reference::dropout(&x, 0.5, 1),
        reference::dropout(&x, 0.5, 2)
    );
    assert_ne!(
        reference::dropout_seed(1, 1, 0),
        reference::dropout_seed(1, 2, 0),
        "steps get new masks"
    );
    assert_ne!(
        reference::dropout_seed(1, 1, 0),
        reference::dropout_seed(1, 1, 1)
    );
}

//! Recomputing the layernorm outputs (`TrainConfig::recompute`): the backward makes
//! each block's two layernorm outputs again instead of keeping them from the
//! forward. Training is bit-identical to keeping them, on NaN-poisoned memory; a
//! step's peak of requested bytes is lower by exactly what they and their mean and
//! rstd took; the price is one more layernorm dispatch each. GPU bodies run
//! natively and in headless Chromium.

mod common;

use tidepool::pool::SizePolicy;
use tidepool::train::{TrainConfig, Trainer};

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

/// Odd sizes on purpose, wide enough (`2 * width` over the vocabulary's 65) that
/// the step's peak falls in the last block's backward, not at the logits.
fn config(policy: SizePolicy, recompute: bool) -> TrainConfig {
    TrainConfig {
        layers: 3,
        heads: 2,
        width: 44,
        context: 19,
        batch: 3,
        lr: 1e-2,
        warmup: 2,
        steps: 100,
        dropout: 0.1,
        policy,
        recompute,
        ..TrainConfig::preset("tiny").unwrap()
    }
}

/// Bytes the recompute setting takes off the step's peak: each block's two
/// layernorm outputs (`rows x width` floats) and their mean and rstd (`rows` floats
/// each), all live at once in the last block's backward when kept.
fn saving(cfg: &TrainConfig) -> u64 {
    let rows = (cfg.batch * cfg.context) as u64;
    2 * cfg.layers as u64 * rows * (cfg.width as u64 + 2) * 4
}

/// Leaves NaN buffers of every activation size a step asks for in the pool, so
/// that the step's tensors are drawn from them.
fn poison_pool(trainer: &Trainer) {
    let c = trainer.config();
    let rows = c.batch * c.context;
    let vocab = trainer.model().vocab;
    let lens = [
        rows,
        rows * c.width,
        rows * 3 * c.width,
        rows * 4 * c.width,
        rows * vocab,
    ];
    let held: Vec<_> = lens
        .iter()
        .flat_map(|&len| std::iter::repeat_n(len, 2 * c.layers))
        .map(|len| trainer.context().upload_pooled(&vec![f32::NAN; len]))
        .collect();
    drop(held);
}

/// Losses (as bits) of `steps` steps on poisoned memory, the parameters after them.
async fn run(cfg: TrainConfig, steps: u32) -> (Vec<u32>, Vec<Vec<u32>>) {
    let planned = cfg.policy == SizePolicy::Planned;
    let mut trainer = Trainer::new(cfg, common::corpus()).await.expect("trainer");
    if !planned {
        poison_pool(&trainer);
    }
    let mut losses = Vec::new();
    for i in 0..steps {
        if planned && i == 1 {
            // After the traced step: every tensor of the next lies in an arena.
            trainer.context().poison_arenas();
        }
        losses.push(trainer.step().await.expect("step").loss.to_bits());
    }
    let params = trainer.parameters().await.expect("parameters");
    let bits = params
        .iter()
        .map(|p| p.iter().map(|x| x.to_bits()).collect())
        .collect();
    (losses, bits)
}

gpu_test!(recomputing_trains_the_same_bits, same_bits_body());
/// Six steps with and without recomputation, under the pool (its buffers NaN) and
/// under the planned policy (its arenas NaN): the same losses and parameters, bit
/// for bit, and finite.
async fn same_bits_body() {
    let steps = 6;
    for policy in [
        SizePolicy::Subdivided { subdivisions: 8 },
        SizePolicy::Planned,
    ] {
        let (kept_losses, kept_params) = run(config(policy, false), steps).await;
        let (losses, params) = run(config(policy, true), steps).await;
        let what = policy.label();
        assert!(
            kept_losses.iter().all(|&l| f32::from_bits(l).is_finite()),
            "{what}: losses {kept_losses:?}"
        );
        assert_eq!(losses, kept_losses, "{what}: losses differ");
        assert!(
            params == kept_params,
            "{what}: parameters differ after {steps} steps"
        );
    }
}

/// A steady step's peak of requested bytes, its peak reserved and its dispatches.
async fn steady_step(cfg: TrainConfig) -> (u64, u64, u64) {
    let mut trainer = Trainer::new(cfg, common::corpus()).await.expect("trainer");
    for _ in 0..2 {
        trainer.step().await.expect("warm-up step");
    }
    trainer.context().reset_peaks();
    let s = trainer.step().await.expect("step");
    let c = trainer.context().counters();
    (
        c.peak_bytes_requested_in_use,
        c.peak_bytes_reserved,
        s.dispatches_step,
    )
}

gpu_test!(
    recomputing_lowers_the_peak_by_the_layernorm_outputs,
    peak_body()
);
/// Under the planned policy the peak of requested bytes falls by [`saving`]
/// exactly, the arenas by at least nine tenths of it; the step runs two more
/// layernorm dispatches a block.
async fn peak_body() {
    let (kept, kept_reserved, kept_dispatches) =
        steady_step(config(SizePolicy::Planned, false)).await;
    let cfg = config(SizePolicy::Planned, true);
    let (recomputed, reserved, dispatches) = steady_step(cfg.clone()).await;
    assert_eq!(
        kept - recomputed,
        saving(&cfg),
        "peak requested {kept} kept, {recomputed} recomputed"
    );
    assert!(
        kept_reserved - reserved >= saving(&cfg) * 9 / 10,
        "peak reserved {kept_reserved} kept, {reserved} recomputed"
    );
    assert_eq!(dispatches - kept_dispatches, 2 * cfg.layers as u64);
}

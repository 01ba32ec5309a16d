//! Token + position embedding (llm.c's encoder), forward and backward.

use super::Target;
use crate::gpu::{grid_1d, Kernel, PooledBuffer, Slice, WgpuContext};
use crate::reference::{dropout_mask_params, DropoutMask};

pub(super) const SOURCE: &str = concat!(
    include_str!("../gpu/prelude.wgsl"),
    include_str!("hash.wgsl"),
    include_str!("embedding.wgsl")
);

const FORWARD: Kernel = Kernel {
    name: "encoder_forward",
    source: SOURCE,
    entry: "forward",
    unchecked: false,
};
const DWTE_DWPE: Kernel = Kernel {
    name: "encoder_backward_dwte_dwpe",
    source: SOURCE,
    entry: "dwte_dwpe",
    unchecked: false,
};
const DWTE_ROWS: Kernel = Kernel {
    name: "encoder_backward_dwte_rows",
    source: SOURCE,
    entry: "dwte_rows_only",
    unchecked: false,
};
const DWTE_ROWS_EXTRA: Kernel = Kernel {
    name: "encoder_backward_dwte_rows_extra",
    source: SOURCE,
    entry: "dwte_rows_extra",
    unchecked: false,
};
const DWPE: Kernel = Kernel {
    name: "encoder_backward_dwpe",
    source: SOURCE,
    entry: "dwpe_sum",
    unchecked: false,
};

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    b: u32,
    t: u32,
    c: u32,
    v: u32,
    /// The forward's dropout mask (threshold 0 and scale 1: none).
    seed: u32,
    threshold: u32,
    scale: f32,
    /// dwte_dwpe: 0 without `extra`; else how many split partials it holds
    /// (dwte_rows_extra reads it too).
    extra_splits: u32,
}

impl Params {
    fn new(b: usize, t: usize, c: usize, v: usize) -> Self {
        Params {
            b: b as u32,
            t: t as u32,
            c: c as u32,
            v: v as u32,
            seed: 0,
            threshold: 0,
            scale: 1.0,
            extra_splits: 0,
        }
    }
}

const WG: u32 = 256;
/// Channels a dwte workgroup sums (embedding.wgsl's `CB`).
const DWTE_CHANNELS: usize = 32;

/// `out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]`: `tokens` is `b*t` u32, `wte` `v*c`,
/// `wpe` at least `t*c`; returns `b*t*c` floats.
pub fn encoder_forward<'a>(
    ctx: &WgpuContext,
    tokens: impl Into<Slice<'a>>,
    wte: impl Into<Slice<'a>>,
    wpe: impl Into<Slice<'a>>,
    b: usize,
    t: usize,
    c: usize,
) -> PooledBuffer {
    encoder_forward_dropout(ctx, tokens, wte, wpe, b, t, c, None)
}

/// [`encoder_forward`] through the embedding's dropout `mask` (element `r * c + i`
/// of it), when there is one: the training forward's first op.
#[allow(clippy::too_many_arguments)]
pub fn encoder_forward_dropout<'a>(
    ctx: &WgpuContext,
    tokens: impl Into<Slice<'a>>,
    wte: impl Into<Slice<'a>>,
    wpe: impl Into<Slice<'a>>,
    b: usize,
    t: usize,
    c: usize,
    mask: Option<DropoutMask>,
) -> PooledBuffer {
    let n = b * t * c;
    let out = ctx.create_pooled(n * 4);
    let mut params = Params::new(b, t, c, 0);
    if let Some(m) = mask {
        let (threshold, scale) = dropout_mask_params(m.p);
        (params.seed, params.threshold, params.scale) = (m.seed, threshold, scale);
    }
    ctx.dispatch_slices(
        &FORWARD,
        &params,
        &[tokens.into(), wte.into(), wpe.into(), (&out).into()],
        grid_1d(n as u32, WG),
    );
    out
}

/// Groups the rows of `tokens` (`b*t` of them) by token, for [`encoder_backward`]:
/// the rows holding token `k` are `positions[offsets[k]..offsets[k + 1]]`, in
/// increasing order. A counting sort on the host, where the trainer has the batch
/// anyway; it turns the backward's scatter-add (racy without float atomics) into a
/// gather with one writer per element.
pub fn token_index(tokens: &[u32], v: usize) -> (Vec<u32>, Vec<u32>) {
    let mut offsets = vec![0u32; v + 1];
    for &tok in tokens {
        assert!((tok as usize) < v, "token {tok} out of vocab {v}");
        offsets[tok as usize + 1] += 1;
    }
    for k in 0..v {
        offsets[k + 1] += offsets[k];
    }
    let mut next = offsets.clone();
    let mut positions = vec![0u32; tokens.len()];
    for (row, &tok) in tokens.iter().enumerate() {
        let slot = &mut next[tok as usize];
        positions[*slot as usize] = row as u32;
        *slot += 1;
    }
    (offsets, positions)
}

/// Gradients of [`encoder_forward`] from `dout` (`b*t*c`), with `offsets` and
/// `positions` from [`token_index`] (uploaded as u32). Returns `dwte` (`v*c`; plus
/// `extra_dwte`, `v*c`, when given, e.g. the tied output head's gradient) and `dwpe`
/// (`t*c`, summed over the batch). Deterministic: every element's terms are summed in
/// a fixed order.
#[allow(clippy::too_many_arguments)]
pub fn encoder_backward<'a>(
    ctx: &WgpuContext,
    dout: &PooledBuffer,
    offsets: impl Into<Slice<'a>>,
    positions: impl Into<Slice<'a>>,
    b: usize,
    t: usize,
    c: usize,
    v: usize,
    extra_dwte: Option<&PooledBuffer>,
) -> (PooledBuffer, PooledBuffer) {
    let target = Target::of(ctx);
    encoder_backward_on(
        ctx,
        target,
        dout,
        offsets,
        positions,
        (b, t, c, v),
        extra_dwte.map(|extra| (extra, 1)),
    )
}

/// [`encoder_backward`] with the kernel tuning chosen: on GPUs a workgroup sums a
/// token's rows for 32 channels, eight rows at a time; on CPU adapters a thread sums
/// them for one channel. `extra_dwte`: `(extra, splits)`, where `extra` may hold
/// `splits` partials `[splits, v*c]` of the term (a head gradient left by
/// [`crate::kernels::SplitSums::for_optimizer`]), added in the order of their sum.
pub fn encoder_backward_on<'a>(
    ctx: &WgpuContext,
    target: Target,
    dout: &PooledBuffer,
    offsets: impl Into<Slice<'a>>,
    positions: impl Into<Slice<'a>>,
    shape: (usize, usize, usize, usize),
    extra_dwte: Option<(&PooledBuffer, usize)>,
) -> (PooledBuffer, PooledBuffer) {
    let (offsets, positions) = (offsets.into(), positions.into());
    let batch = (offsets, positions);
    let made = encoder_backward_into(ctx, target, dout, batch, shape, extra_dwte, None);
    made.expect("made without destinations")
}

/// [`encoder_backward_on`] with dwte and dwpe written into `dests` where given
/// (ranges of the trainer's [`crate::kernels::GradArena`]), else returned.
pub(crate) fn encoder_backward_into(
    ctx: &WgpuContext,
    target: Target,
    dout: &PooledBuffer,
    (offsets, positions): (Slice, Slice),
    (b, t, c, v): (usize, usize, usize, usize),
    extra_dwte: Option<(&PooledBuffer, usize)>,
    dests: Option<[Slice; 2]>,
) -> Option<(PooledBuffer, PooledBuffer)> {
    let mut params = Params::new(b, t, c, v);
    if let Some((extra, splits)) = extra_dwte {
        // In u64: wasm32's usize is 32 bits.
        let bytes = [splits, v, c, 4]
            .iter()
            .try_fold(1u64, |n, &x| n.checked_mul(x as u64));
        assert!(
            splits >= 1 && bytes.is_some_and(|bytes| extra.len() as u64 >= bytes),
            "extra dwte: {splits} splits of {v}x{c} in {} bytes",
            extra.len()
        );
        params.extra_splits = u32::try_from(splits).expect("splits of a binding fit in u32");
    }
    let extra_dwte = extra_dwte.map(|(extra, _)| extra);
    if let Some([dwte, dwpe]) = &dests {
        assert!(
            dwte.size() == (v * c * 4) as u64 && dwpe.size() == (t * c * 4) as u64,
            "destinations of {v}x{c} and {t}x{c} floats"
        );
    }
    let made = dests
        .is_none()
        .then(|| (ctx.create_pooled(v * c * 4), ctx.create_pooled(t * c * 4)));
    let [dwte, dwpe]: [Slice; 2] = match (&made, dests) {
        (Some((w, p)), _) => [w.into(), p.into()],
        (None, Some(dests)) => dests,
        (None, None) => unreachable!(),
    };
    match target {
        // A workgroup a token and DWTE_CHANNELS channels (embedding.wgsl's CB), then
        // dwpe's workgroups of WG elements, spread over x and y like a 1-D launch of
        // single-thread groups.
        Target::Gpu => {
            let groups = v * c.div_ceil(DWTE_CHANNELS) + (t * c).div_ceil(WG as usize);
            ctx.dispatch_slices(
                &DWTE_DWPE,
                &params,
                &[
                    dout.into(),
                    offsets,
                    positions,
                    dwte,
                    extra_dwte.unwrap_or(dout).into(),
                    dwpe,
                ],
                grid_1d(groups as u32, 1),
            );
        }
        Target::Cpu => {
            let grid = grid_1d((v * c) as u32, WG);
            match extra_dwte {
                Some(extra) => ctx.dispatch_slices(
                    &DWTE_ROWS_EXTRA,
                    &params,
                    &[dout.into(), offsets, positions, dwte, extra.into()],
                    grid,
                ),
                None => ctx.dispatch_slices(
                    &DWTE_ROWS,
                    &params,
                    &[dout.into(), offsets, positions, dwte],
                    grid,
                ),
            }
            let bound = [dout.into(), dwpe];
            ctx.dispatch_slices(&DWPE, &params, &bound, grid_1d((t * c) as u32, WG));
        }
    }
    made
}

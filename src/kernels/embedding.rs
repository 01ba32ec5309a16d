//! Token + position embedding (llm.c's encoder), forward and backward.

use crate::gpu::{grid_1d, Kernel, PooledBuffer, Slice, WgpuContext};
pub use crate::reference::EmbeddingShape;
use crate::reference::{dropout_mask_params, DropoutMask};
use crate::tuning::Target;

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

/// A batch's tokens grouped by token id ([`token_index`]'s `offsets` and
/// `positions`, uploaded as u32): the backward gathers each token's rows.
#[derive(Clone, Copy, Debug)]
pub struct TokenIndex<'a> {
    pub offsets: Slice<'a>,
    pub positions: Slice<'a>,
}

/// An extra term of the token embedding's gradient (the tied output head's), as
/// `splits` partials `[splits, v*c]` (1: whole) added in the order of their sum (a
/// head gradient left by [`crate::kernels::SplitSums::for_optimizer`]).
#[derive(Clone, Copy, Debug)]
pub struct ExtraGrad<'a> {
    pub grad: &'a PooledBuffer,
    pub splits: usize,
}

/// Token plus position embedding (llm.c's encoder), forward and backward. The
/// backward is deterministic: every element's terms are summed in a fixed order, on
/// GPUs by a workgroup a token for 32 channels, eight rows at a time; on CPU
/// adapters by a thread a channel.
#[derive(Clone, Copy, Debug, Default)]
pub struct Embedding {
    /// The kernels' tuning (`None`: the context's).
    pub target: Option<Target>,
    /// Forward: the output through this dropout mask (element `r * c + i` of it),
    /// the training forward's first op.
    pub dropout: Option<DropoutMask>,
}

impl Embedding {
    /// `out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]`: `tokens` is `b*t` u32, `wte`
    /// `v*c`, `wpe` at least `t*c`; returns `b*t*c` floats.
    pub fn forward<'a>(
        &self,
        ctx: &WgpuContext,
        tokens: impl Into<Slice<'a>>,
        wte: impl Into<Slice<'a>>,
        wpe: impl Into<Slice<'a>>,
        shape: EmbeddingShape,
    ) -> PooledBuffer {
        let EmbeddingShape { b, t, c, .. } = shape;
        let n = b * t * c;
        let out = ctx.create_pooled(n * 4);
        let mut params = Params::new(b, t, c, 0);
        if let Some(m) = self.dropout {
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

    /// The gradients of [`Embedding::forward`] from `dout` (`b*t*c`): `dwte` (`v*c`,
    /// plus `extra` when given) and `dwpe` (`t*c`, summed over the batch).
    pub fn backward(
        &self,
        ctx: &WgpuContext,
        dout: &PooledBuffer,
        index: TokenIndex,
        shape: EmbeddingShape,
        extra: Option<ExtraGrad>,
    ) -> (PooledBuffer, PooledBuffer) {
        let made = self.backward_to(ctx, dout, index, shape, extra, None);
        made.expect("made without destinations")
    }

    /// [`Embedding::backward`] with dwte and dwpe written into `dests` (ranges of
    /// the trainer's [`crate::kernels::GradArena`]).
    pub(crate) fn backward_into(
        &self,
        ctx: &WgpuContext,
        dout: &PooledBuffer,
        index: TokenIndex,
        shape: EmbeddingShape,
        extra: Option<ExtraGrad>,
        dests: [Slice; 2],
    ) {
        self.backward_to(ctx, dout, index, shape, extra, Some(dests));
    }

    fn backward_to(
        &self,
        ctx: &WgpuContext,
        dout: &PooledBuffer,
        index: TokenIndex,
        shape: EmbeddingShape,
        extra: Option<ExtraGrad>,
        dests: Option<[Slice; 2]>,
    ) -> Option<(PooledBuffer, PooledBuffer)> {
        let EmbeddingShape { b, t, c, v } = shape;
        let TokenIndex { offsets, positions } = index;
        let target = self.target.unwrap_or(ctx.kernel_target());
        let mut params = Params::new(b, t, c, v);
        if let Some(ExtraGrad {
            grad: extra,
            splits,
        }) = extra
        {
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
        let extra_dwte = extra.map(|e| e.grad);
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
}

/// Groups the rows of `tokens` (`b*t` of them) by token, for [`Embedding::backward`]:
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

/// Every kernel of this op.
pub(super) fn catalog() -> Vec<Kernel> {
    vec![FORWARD, DWTE_DWPE, DWTE_ROWS, DWTE_ROWS_EXTRA, DWPE]
}

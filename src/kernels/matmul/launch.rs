//! The dispatches of each product: the GEMM itself, and where its reduction was
//! split, the fixed-order sum of the partials (with the epilogue the partials left
//! out), or for weight gradients the partials as they are ([`Partials`]).

use super::operands::{Fusion, Layout, Linear};
use super::source::{
    binds_views, dweight_bias, fuse, kernel, kernel_f16_weights, specialized, writes_vec4, COLSUM,
    SUM_SPLITS_FUSED,
};
use super::split_sums::Partials;
use super::variant::MatmulVariant;
use crate::gpu::{grid_1d, Kernel, PooledBuffer, Slice, WgpuContext};
use crate::kernels::arenas::GradDest;
use crate::kernels::bounds::check_len;
use crate::kernels::multi_tensor::sum_splits;
use crate::reference::{dropout_mask_params, MatmulShape};

/// `Params` of the GEMM preludes (matmul_nt / _nn / _tn.wgsl).
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct GemmParams {
    m: u32,
    n: u32,
    k: u32,
    k_chunk: u32,
    flags: u32,
    /// The dropout mask of a fused residual branch (`fuse::DROPOUT`).
    seed: u32,
    threshold: u32,
    scale: f32,
}

impl GemmParams {
    fn new(m: usize, n: usize, k: usize, chunk: usize, flags: u32) -> Self {
        GemmParams {
            m: u32_of(m, "m"),
            n: u32_of(n, "n"),
            k: u32_of(k, "k"),
            k_chunk: u32_of(chunk, "chunk"),
            flags,
            seed: 0,
            threshold: 0,
            scale: 1.0,
        }
    }
}

/// `Params` of matmul_reduce.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct ReduceParams {
    len: u32,
    splits: u32,
    rows: u32,
    row_chunk: u32,
    flags: u32,
    seed: u32,
    threshold: u32,
    scale: f32,
}

impl ReduceParams {
    /// A sum of `splits` partials of `len` floats, with the epilogue `flags`.
    fn new(len: usize, splits: usize, flags: u32) -> Self {
        ReduceParams {
            len: u32_of(len, "len"),
            splits: u32_of(splits, "splits"),
            rows: 0,
            row_chunk: 0,
            flags,
            seed: 0,
            threshold: 0,
            scale: 1.0,
        }
    }
}

/// `bound` for `variant`'s kernel: as it is, or where the core reads vec4 views of
/// its operands (`source::binds_views`), with the operands (bindings 1 and 2) bound
/// again after it, B's as `b_view` where given (an f16 copy of the weights).
fn with_views<'a>(
    ctx: &'a WgpuContext,
    variant: MatmulVariant,
    bound: &[Slice<'a>],
    b_view: Option<Slice<'a>>,
) -> Vec<Slice<'a>> {
    let mut all = bound.to_vec();
    if binds_views(variant) {
        // A vec4 array needs 16 bytes; the cores check that a view holds its whole
        // operand before reading it (`views_whole`), so a smaller operand's view can
        // be a range nothing reads.
        let view = |s: Slice<'a>| {
            if s.size() >= 16 {
                s
            } else {
                ctx.memory.unread_range()
            }
        };
        all.extend([view(bound[0]), view(b_view.unwrap_or(bound[1]))]);
    }
    all
}

/// Dispatches `variant`'s `kernel` (unspecialized) with `params` over `bound`, the
/// operands' vec4 views added where `views` and the core reads them (B's from
/// `b_view` where given), then `tail` (bindings after the views), and with
/// `fuse::WHOLE_TILES` where every tile and step lies inside the product and the
/// views will be bound as they are (a dispatch that binds everything read_write puts
/// stand-ins in their place, and then the guarded loads run).
fn dispatch_gemm<'a>(
    ctx: &'a WgpuContext,
    (variant, kernel, views): (MatmulVariant, &'static Kernel, bool),
    b_view: Option<Slice<'a>>,
    mut params: GemmParams,
    (bound, tail): (&[Slice<'a>], &[Slice<'a>]),
    groups: [u32; 3],
) {
    let mut bound = if views {
        with_views(ctx, variant, bound, b_view)
    } else {
        bound.to_vec()
    };
    bound.extend_from_slice(tail);
    let size = |x: u32| x as usize;
    let (m, n, k, chunk) = (
        size(params.m),
        size(params.n),
        size(params.k),
        size(params.k_chunk),
    );
    let empty = m == 0 || n == 0 || k == 0;
    if views && !empty && variant.whole_tiles(m, n, k, chunk) {
        let whole = specialized(kernel, params.flags | fuse::WHOLE_TILES);
        if !ctx.binds_read_write(whole, &bound) {
            params.flags |= fuse::WHOLE_TILES;
        }
    }
    // The OUT4 twin reads and writes 4 columns as one vec4: the output's width a
    // multiple of 4, and the stand-ins of absent epilogue operands (A, m x k) 16
    // bytes or more, as a vec4 array needs.
    if !empty && n % 4 == 0 && m * k >= 4 && writes_vec4(kernel) {
        let out4 = specialized(kernel, params.flags | fuse::OUT_VEC4);
        if !ctx.binds_read_write(out4, &bound) {
            params.flags |= fuse::OUT_VEC4;
        }
    }
    ctx.dispatch_slices(specialized(kernel, params.flags), &params, &bound, groups);
}

fn u32_of(x: usize, what: &str) -> u32 {
    u32::try_from(x).unwrap_or_else(|_| panic!("{what} = {x} does not fit in u32"))
}

/// `out = resid + dropout(act(inp) · weightᵀ + bias)` by `variant`. Split over k,
/// the partials are plain products (the prologue applies per loaded element, so in
/// every split) and the epilogue runs once, on their sum, in the reduce pass.
pub(super) fn forward(
    ctx: &WgpuContext,
    variant: MatmulVariant,
    x: Linear,
    shape: MatmulShape,
    fusion: &Fusion,
) -> PooledBuffer {
    let MatmulShape { rows, k, n } = shape;
    let Linear {
        inp,
        weight,
        bias,
        weight_f16,
    } = x;
    check_len(inp, rows * k, "matmul forward inp");
    check_len(weight, n * k, "matmul forward weight");
    if let Some(bias) = bias {
        check_len(bias, n, "matmul forward bias");
    }
    if let Some(resid) = fusion.residual {
        check_len(resid, rows * n, "matmul forward residual");
    }
    let (act, prologue) = gelu_operand(ctx, variant, inp, rows * k, fusion.gelu_inp);
    let inp = act.as_ref().unwrap_or(inp);
    let mut flags = if bias.is_some() { fuse::BIAS } else { 0 };
    let (mut seed, mut threshold, mut scale) = (0, 0, 1.0);
    if let Some(mask) = fusion.dropout {
        (threshold, scale) = dropout_mask_params(mask.p);
        seed = mask.seed;
        flags |= fuse::DROPOUT;
    }
    if fusion.residual.is_some() {
        flags |= fuse::RESIDUAL;
    }
    let epilogue = flags;
    let out = ctx.create_pooled(rows * n * 4);
    let (chunk, splits) = variant.split_of(Layout::Forward, rows, k, n);
    let (kernel, b_view) = weight_kernel(variant, Layout::Forward, weight_f16, n * k);
    let groups = variant.launch_grid(rows, n, splits);
    // Bindings a launch does not use still need a buffer; the shader never reads it.
    let bias_or_any = bias.unwrap_or(inp.into());
    let resid_or_any = fusion.residual.unwrap_or(inp);
    // Split, the GEMM writes each split's partials and the epilogue runs on their sum.
    let part = (splits > 1).then(|| ctx.create_pooled(splits * rows * n * 4));
    let (params, dest) = match &part {
        None => (
            GemmParams {
                seed,
                threshold,
                scale,
                ..GemmParams::new(rows, n, k, chunk, prologue | epilogue)
            },
            &out,
        ),
        Some(part) => (GemmParams::new(rows, n, k, chunk, prologue), part),
    };
    let bound = [
        inp.into(),
        weight,
        bias_or_any,
        dest.into(),
        resid_or_any.into(),
    ];
    dispatch_gemm(
        ctx,
        (variant, kernel, true),
        b_view,
        params,
        (&bound, &[]),
        groups,
    );
    if let Some(part) = part {
        let reduce = ReduceParams {
            row_chunk: u32_of(n, "n"),
            seed,
            threshold,
            scale,
            ..ReduceParams::new(rows * n, splits, epilogue)
        };
        if epilogue == 0 {
            sum_splits(ctx, (&part).into(), (&out).into(), rows * n, splits);
        } else {
            sum_splits_fused(
                ctx,
                &reduce,
                &part,
                &out,
                [bias_or_any, (&part).into(), resid_or_any.into()],
            );
        }
    }
    out
}

/// `dinp = dout · weight` (`[rows, n]` by `[n, k]`) by `variant`, times
/// `gelu'(gelu_of)` elementwise when `gelu_of` (`[rows, k]`) is given. Split over
/// n, the epilogue runs once, on the partials' sum.
pub(super) fn dinp(
    ctx: &WgpuContext,
    variant: MatmulVariant,
    dout: &PooledBuffer,
    (weight, weight_f16): (Slice, Option<Slice>),
    shape: MatmulShape,
    gelu_of: Option<&PooledBuffer>,
) -> PooledBuffer {
    let MatmulShape { rows, k, n } = shape;
    check_len(dout, rows * n, "matmul dinp dout");
    check_len(weight, n * k, "matmul dinp weight");
    if let Some(x) = gelu_of {
        check_len(x, rows * k, "matmul dinp gelu input");
    }
    let epilogue = if gelu_of.is_some() {
        fuse::GELU_GRAD
    } else {
        0
    };
    let aux = gelu_of.unwrap_or(dout);
    let dinp = ctx.create_pooled(rows * k * 4);
    let (chunk, splits) = variant.split_of(Layout::Dinp, rows, k, n);
    let (kernel, b_view) = weight_kernel(variant, Layout::Dinp, weight_f16, n * k);
    let groups = variant.launch_grid(rows, k, splits);
    if splits == 1 {
        let params = GemmParams::new(rows, k, n, chunk, epilogue);
        let bound = [dout.into(), weight, (&dinp).into(), aux.into()];
        dispatch_gemm(
            ctx,
            (variant, kernel, true),
            b_view,
            params,
            (&bound, &[]),
            groups,
        );
    } else {
        let params = GemmParams::new(rows, k, n, chunk, 0);
        let part = ctx.create_pooled(splits * rows * k * 4);
        let bound = [dout.into(), weight, (&part).into(), aux.into()];
        dispatch_gemm(
            ctx,
            (variant, kernel, true),
            b_view,
            params,
            (&bound, &[]),
            groups,
        );
        if epilogue == 0 {
            sum_splits(ctx, (&part).into(), (&dinp).into(), rows * k, splits);
        } else {
            let reduce = ReduceParams::new(rows * k, splits, epilogue);
            let part_slice = (&part).into();
            sum_splits_fused(
                ctx,
                &reduce,
                &part,
                &dinp,
                [part_slice, aux.into(), part_slice],
            );
        }
    }
    dinp
}

/// Where a backward's weight gradients go: `dweight`'s destination, if any; and
/// `bias`: `None` without a bias gradient, else its destination, if any.
#[derive(Clone, Copy, Default)]
pub(super) struct WeightDests<'d> {
    pub dweight: Option<GradDest<'d>>,
    pub bias: Option<Option<GradDest<'d>>>,
}

/// `dweight = doutᵀ · act(inp)` (`[n, k]`, summed over all `rows`) by `variant`, up
/// to its split partials, into its destination where given; with a bias, where the
/// variant's core can (`MatmulVariant::sums_bias`), also dbias's partials from the
/// same pass, split as dweight's, else by a pass of its own.
pub(super) fn weight_partials<'d>(
    ctx: &WgpuContext,
    variant: MatmulVariant,
    dout: &PooledBuffer,
    (inp, gelu_inp): (&PooledBuffer, bool),
    shape: MatmulShape,
    dests: WeightDests<'d>,
) -> (Partials<'d>, Option<Partials<'d>>) {
    let MatmulShape { rows, k, n } = shape;
    check_len(dout, rows * n, "matmul dweight dout");
    check_len(inp, rows * k, "matmul dweight inp");
    let (chunk, splits) = variant.split_of(Layout::Dweight, rows, k, n);
    let (act, prologue) = gelu_operand(ctx, variant, inp, rows * k, gelu_inp);
    let inp = act.as_ref().unwrap_or(inp);
    let fused_bias = dests.bias.filter(|_| variant.sums_bias());
    let params = GemmParams::new(n, k, rows, chunk, prologue);
    let kernel = if fused_bias.is_some() {
        dweight_bias(variant)
    } else {
        kernel(variant, Layout::Dweight)
    };
    let groups = variant.launch_grid(n, k, splits);
    let dweight = Partials::new(ctx, n * k, splits, dests.dweight);
    let dbias = fused_bias.map(|dest| Partials::new(ctx, n, splits, dest));
    let bound = [dout.into(), inp.into(), dweight.target()];
    // A dweight that sums dbias too binds dbias's partials after the operands' views.
    let sums: Vec<Slice> = dbias.iter().map(Partials::target).collect();
    dispatch_gemm(
        ctx,
        (variant, kernel, true),
        None,
        params,
        (&bound, &sums),
        groups,
    );
    let dbias = match (dbias, dests.bias) {
        (Some(fused), _) => Some(fused),
        (None, Some(dest)) => Some(dbias_partials(ctx, variant, dout, shape, dest)),
        (None, None) => None,
    };
    (dweight, dbias)
}

/// `variant`'s kernel of `layout`'s product (forward or dinp) and the view of the
/// weight it reads: the twin reading `weight_f16` (`len` halves at least) where
/// both the core and the caller have one, else the kernel reading the f32 weight.
fn weight_kernel<'a>(
    variant: MatmulVariant,
    layout: Layout,
    weight_f16: Option<Slice<'a>>,
    len: usize,
) -> (&'static Kernel, Option<Slice<'a>>) {
    match (kernel_f16_weights(variant, layout), weight_f16) {
        (Some(twin), Some(halves)) => {
            assert!(
                halves.size() >= len as u64 * 2,
                "matmul {}: the f16 weight holds {} bytes, under {len} halves",
                layout.name(),
                halves.size()
            );
            (twin, Some(halves))
        }
        _ => (kernel(variant, layout), None),
    }
}

/// How `variant` reads GELU of `inp` (`len` floats) when `gelu`: a prologue flag, or
/// (see [`MatmulVariant::gelu_on_load`]) a transient buffer holding it.
fn gelu_operand(
    ctx: &WgpuContext,
    variant: MatmulVariant,
    inp: &PooledBuffer,
    len: usize,
    gelu: bool,
) -> (Option<PooledBuffer>, u32) {
    match (gelu, variant.gelu_on_load()) {
        (false, _) => (None, 0),
        (true, true) => (None, fuse::GELU_INP),
        (true, false) => (Some(crate::kernels::gelu::gelu_forward(ctx, inp, len)), 0),
    }
}

/// `dbias[j] = sum_r dout[r, j]`, split over rows as `variant` splits the weight
/// gradient beside it, up to its partials.
fn dbias_partials<'d>(
    ctx: &WgpuContext,
    variant: MatmulVariant,
    dout: &PooledBuffer,
    shape: MatmulShape,
    dest: Option<GradDest<'d>>,
) -> Partials<'d> {
    let MatmulShape { rows, n, .. } = shape;
    check_len(dout, rows * n, "matmul dbias dout");
    let col_groups = n.div_ceil(super::variant::COLSUM_COLS);
    let (chunk, splits) = variant.dbias_split(rows, n);
    let params = ReduceParams {
        rows: u32_of(rows, "rows"),
        row_chunk: u32_of(chunk, "chunk"),
        ..ReduceParams::new(n, splits, 0)
    };
    let groups = [col_groups as u32, splits as u32, 1];
    let dbias = Partials::new(ctx, n, splits, dest);
    ctx.dispatch_slices(&COLSUM, &params, &[dout.into(), dbias.target()], groups);
    dbias
}

/// The sum of split-K partials, then the epilogue of `params.flags`, reading
/// `inputs` (bias, aux, resid: each bound to `part` where unused).
fn sum_splits_fused(
    ctx: &WgpuContext,
    params: &ReduceParams,
    part: &PooledBuffer,
    out: &PooledBuffer,
    [bias, aux, resid]: [Slice; 3],
) {
    let groups = grid_1d(params.len, 256);
    ctx.dispatch_slices(
        specialized(&SUM_SPLITS_FUSED, params.flags),
        params,
        &[part.into(), out.into(), bias, aux, resid],
        groups,
    );
}

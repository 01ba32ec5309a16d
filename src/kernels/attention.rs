//! Causal multi-head self-attention, forward and backward, flash style: the forward
//! saves one logsumexp per row instead of the `b*nh*t*t` probabilities.

use std::sync::OnceLock;

use super::attention_coop as coop;
use super::attention_tiled as tiled;
use super::bounds::check_len;
use super::wgsl::{loop_lines, select, unroll, ENABLE_SUBGROUPS};
use crate::config::Precision;
use crate::gpu::{Kernel, PooledBuffer, WgpuContext};
pub use crate::reference::AttentionShape;
use crate::reference::{dropout_mask_params, AttnDropout};
use crate::tuning::Target;

/// Queries (forward, dq) or keys (dkdv) of one workgroup of the GPU kernels (`BQ`
/// in their shaders).
const BLOCK: usize = 64;
/// Keys a step of the GPU forward stages in workgroup memory (`BKV`), and rows of
/// the other side a step of the GPU backward does (`BT`). On an H200 (the
/// shakespeare shape, vec4 variant) the backward took 0.66 ms at BT 4, 0.79 at 8,
/// 0.82 at 2 and 1.12 at 16 (a longer unrolled step holds more registers, the
/// likeliest cause); the forward 0.28 ms at BKV 8 or 16 and 0.30 at 32.
const FORWARD_KEYS: usize = 16;
const BACKWARD_TILE: usize = 4;
/// Threads a row of the paired GPU forward (`P`): 2 with the shared-memory exchange
/// of partial dots, `SHUFFLE_ROW_THREADS` with subgroup shuffles. On an H200 (the
/// shakespeare shape) 4 threads a row took 0.23 ms against 0.27 for 2 (each holds
/// half the registers, so more of them can fit an SM); 8 a row took 0.28 (a third
/// round of shuffles for a quarter of the registers). The backward has 2 a row with
/// either exchange: 4 took it from 0.66 ms to 0.96 (0.89 streaming 8 rows a step);
/// its dq and dk/dv blocks as two dispatches (each entry point compiled on its own)
/// took 0.75.
const SHARED_ROW_THREADS: usize = 2;
pub const SHUFFLE_ROW_THREADS: usize = 4;
/// Threads of the GPU backward's workgroups (its partial dots are one a thread): two
/// groups of 32 rows, 2 threads a row.
const BACKWARD_THREADS: usize = 128;
/// Head-size bounds of the compiled variants, in vec4s, by [`Target`]: hs <= 16,
/// 64, 128 on GPUs, and also 32 on CPUs, where every channel of padding costs (the
/// `small` preset's heads).
const HS4S: [&[usize]; 2] = [&[4, 16, 32], &[4, 8, 16, 32]];
/// Rows a lane of the CPU kernels, by variant (`R` in their shaders): each key
/// (query) load serves that many query (key) rows.
const CPU_ROWS: [usize; 4] = [4, 2, 2, 2];
/// The most vec4s of a tensor's per-lane state (R * HS4) the CPU kernels keep in
/// named variables; larger heads loop over arrays instead. SwiftShader runs named
/// variables several times faster, but its compile time and memory grow steeply
/// with their number (8 rows of hs 16 did not finish compiling; BENCHMARKS.md:
/// CPU adapters).
const CPU_UNROLLED: usize = 16;
/// Lanes a workgroup of the CPU kernels (`LANES` in their shaders).
const CPU_LANES: usize = 8;

/// The shaders guard every index (head channels past `hs`, rows past `t`) and the
/// launchers check buffer sizes, so all variants compile unchecked
/// (`Kernel::unchecked`).
const FORWARD_WGSL: &str = with_dropout_mask!("attention.wgsl");
const BACKWARD_WGSL: &str = with_dropout_mask!("attention_backward.wgsl");
/// The CPU adapters' variant ([`Target::Cpu`]): a few rows an invocation, no
/// workgroup memory, no barriers; same bindings and results.
const FORWARD_CPU_WGSL: &str = with_dropout_mask!("attention_cpu.wgsl");
const BACKWARD_CPU_WGSL: &str = with_dropout_mask!("attention_backward_cpu.wgsl");

/// Expands a paired GPU kernel's template for heads of up to `4 * hs4` channels and
/// `p` threads a row (the backward's template has 2). It prepends `const HS4`,
/// `const P`, `const HP` (`hs4 / p`: each thread holds every pth vec4 of a head) and
/// the forward's `BKV` and the backward's `BT`; every code line holding `#D` works on
/// one vec4 `#D` of that share.
///
/// Natively such a line is repeated for #D = 0 .. HP-1 (`qa#D` becomes `qa0`,
/// `qa1`.., `#Du` the index): the head lives in named registers, with no
/// dynamically indexed local array for the driver to spill (12% off the backward
/// on an H200). In the browser it becomes a loop over `array<vec4<f32>, HP>`
/// instead (`var qa#D = e;` declares the array and fills it): the same arithmetic
/// in a fraction of the shader, which WebGPU implementations compile several times
/// faster (seconds less per pipeline on SwiftShader).
fn expand(template: &str, hs4: usize, p: usize, compact: bool) -> String {
    let hp = hs4 / p;
    let head = format!(
        "const HS4: u32 = {hs4}u;\nconst P: u32 = {p}u;\nconst HP: u32 = {hp}u;\n\
         const BKV: u32 = {FORWARD_KEYS}u;\nconst BT: u32 = {BACKWARD_TILE}u;\n"
    );
    if compact {
        head + &loop_lines(template, "#D", "HP")
    } else {
        head + &unroll(template, "#D", hp)
    }
}

/// Expands a CPU kernel's template for heads of up to `4 * hs4` channels and `rows`
/// rows a lane: prepends `const HS4` and `const R`, and writes each line holding `#R`
/// out once a row ([`unroll`]) and each holding `#C` once a vec4 of the head, or as
/// a loop over the head ([`loop_lines`]) where that would pass `CPU_UNROLLED` vec4s.
fn expand_cpu(template: &str, hs4: usize, rows: usize) -> String {
    let rows_out = unroll(template, "#R", rows);
    let head = format!("const HS4: u32 = {hs4}u;\nconst R: u32 = {rows}u;\n");
    if rows * hs4 <= CPU_UNROLLED {
        head + &unroll(&rows_out, "#C", hs4)
    } else {
        head + &loop_lines(&rows_out, "#C", "HS4")
    }
}

/// Whether the GPU kernels on `ctx` add the partner threads' partial dots by
/// subgroup shuffles (else through shared memory): where the context uses subgroups
/// ([`WgpuContext::subgroups`]) and every subgroup holds a row's partners (at least
/// [`SHUFFLE_ROW_THREADS`] wide). The CPU tuning has no partners.
pub fn attention_subgroups(ctx: &WgpuContext) -> bool {
    ctx.subgroups() && ctx.adapter_info().subgroup_min_size as usize >= SHUFFLE_ROW_THREADS
}

/// Threads a row of the paired GPU forward with either exchange of partial dots.
fn row_threads(subgroups: bool) -> usize {
    if subgroups {
        SHUFFLE_ROW_THREADS
    } else {
        SHARED_ROW_THREADS
    }
}

/// A GPU kernel's template with one exchange of partial dots: lines tagged `#SG `
/// (subgroup shuffles) where `subgroups`, else those tagged `#SM ` (shared
/// memory).
fn pair_exchange(template: &str, subgroups: bool) -> String {
    let on = if subgroups { "SG" } else { "SM" };
    select(template, &["SG", "SM"], &[on])
}

/// A paired GPU kernel's template for heads whose channels come in whole vec4s (`V4`:
/// tensors bound as vec4 arrays, one load a vec4) or for any head (`V1`: guarded
/// floats).
fn vec4_access(template: &str, vec4: bool) -> String {
    let on = if vec4 { "V4" } else { "V1" };
    select(template, &["V4", "V1"], &[on])
}

/// Whether the paired GPU kernels take their vec4 variant for `shape`: every head's
/// row of qkv, out and their gradients then starts on a vec4.
fn whole_vec4s(shape: AttentionShape) -> bool {
    let hs = shape.c / shape.heads.max(1);
    shape.c.is_multiple_of(4) && hs.is_multiple_of(4)
}

/// The GPU tuning's two sets of kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuAttention {
    /// `attention.wgsl` / `attention_backward.wgsl`: a few threads a row, each a
    /// share of the head, 64 rows a workgroup; heads of up to 128 channels.
    Paired,
    /// `attention_tiled*.wgsl` (`attention_tiled.rs`): small register-tiled matrix
    /// products, the forward 32 queries a workgroup, the backward a head a
    /// workgroup; heads of up to 64 channels, where the device has the workgroup
    /// memory ([`Attention::tiled_runs`]).
    Tiled,
    /// `attention_coop*.wgsl` (`attention_coop.rs`): the products on tensor cores
    /// in f16, 64 rows a workgroup; heads of up to 64 channels, where the tensor-core
    /// GEMMs run ([`Attention::coop_runs`]). Chosen, where no kernels are named, for
    /// `--precision f16` when [`crate::gpu::ContextOptions::f16_attention`] asks.
    Coop,
}

/// The GPU kernels an [`Attention`]'s forward runs where it is not told which
/// (`Tiled` only where it runs, else `Paired`). `gpu-run.sh gemm-sweep` times both
/// on the shakespeare shape: on an H200 `Paired` took 0.23 ms forward, `Tiled` 0.65
/// (BENCHMARKS.md, attention).
pub const GPU_ATTENTION: GpuAttention = GpuAttention::Paired;
/// The same for the backward. The tiled backward, a workgroup a head, works out
/// each score once where the paired one works out its scores and dp twice (for dq,
/// then for dk and dv), but its register tiles read workgroup memory about twice as
/// often a multiply-add as the paired kernels' rows held in registers: on an H100
/// (the shakespeare shape, 384 heads) it took 0.77 ms with its D pass against the
/// paired kernels' 0.66, and 0.24 against 0.11 for 24 heads.
pub const GPU_ATTENTION_BACKWARD: GpuAttention = GpuAttention::Paired;

/// The compiled variants: the paired GPU kernels with either pair exchange
/// ([`attention_subgroups`]) and either access ([`whole_vec4s`]), the tiled GPU
/// kernels, or the CPU tuning.
#[derive(Clone, Copy)]
enum Variant {
    Gpu { subgroups: bool, vec4: bool },
    Tiled,
    Coop,
    Cpu,
}

impl Variant {
    /// Every variant, in [`Variant::index`]'s order.
    const ALL: [Variant; 7] = [
        Variant::Gpu {
            subgroups: false,
            vec4: false,
        },
        Variant::Gpu {
            subgroups: true,
            vec4: false,
        },
        Variant::Gpu {
            subgroups: false,
            vec4: true,
        },
        Variant::Gpu {
            subgroups: true,
            vec4: true,
        },
        Variant::Cpu,
        Variant::Tiled,
        Variant::Coop,
    ];

    fn index(self) -> usize {
        match self {
            Variant::Gpu { subgroups, vec4 } => subgroups as usize + 2 * vec4 as usize,
            Variant::Cpu => 4,
            Variant::Tiled => 5,
            Variant::Coop => 6,
        }
    }

    /// The head-size bounds of the variant's kernels, in vec4s.
    fn hs4s(self) -> &'static [usize] {
        match self {
            Variant::Gpu { .. } => HS4S[Target::Gpu as usize],
            Variant::Cpu => HS4S[Target::Cpu as usize],
            Variant::Tiled => &tiled::HS4S,
            Variant::Coop => &[coop::MAX_HEAD / 4],
        }
    }

    /// Rows (queries of the forward) of one workgroup.
    fn block(self, v: usize) -> usize {
        match self {
            Variant::Gpu { .. } => BLOCK,
            Variant::Tiled => tiled::BLOCK,
            Variant::Coop => coop::BLOCK,
            Variant::Cpu => CPU_LANES * CPU_ROWS[v],
        }
    }
}

/// A variant's kernels: the forward, and the backward in one dispatch (paired GPU
/// kernels: dq blocks then dk/dv blocks), in one after D's pass (tensor cores: dq
/// blocks then dk/dv blocks; tiled: a workgroup a head), or in two (CPUs: dq, which
/// writes D, then dk/dv).
struct Kernels {
    forward: Kernel,
    backward: Backward,
}

enum Backward {
    Fused(Kernel),
    Presummed { dsum: Kernel, fused: Kernel },
    PerHead { dsum: Kernel, fused: Kernel },
    Split { dq: Kernel, dkdv: Kernel },
}

/// The kernels of `variant`, for heads of at most `4 * variant.hs4s()[v]`
/// channels, expanded once.
fn kernels(variant: Variant, v: usize) -> &'static Kernels {
    static VARIANTS: [[OnceLock<Kernels>; 4]; Variant::ALL.len()] =
        [const { [const { OnceLock::new() }; 4] }; Variant::ALL.len()];
    VARIANTS[variant.index()][v].get_or_init(|| build(variant, v, cfg!(target_arch = "wasm32")))
}

/// The kernels of `variant` for heads of at most `4 * variant.hs4s()[v]` channels,
/// the paired GPU kernels' head in loops where `compact` (see [`expand`]).
fn build(variant: Variant, v: usize, compact: bool) -> Kernels {
    {
        let hs4 = variant.hs4s()[v];
        // Names tell the pair exchanges apart: pipelines are cached by name.
        let (fwd, bwd, prefix) = match variant {
            Variant::Gpu { subgroups, vec4 } => {
                let (enable, prefix) = match (subgroups, vec4) {
                    (true, true) => (ENABLE_SUBGROUPS, "attention_sg_v4"),
                    (true, false) => (ENABLE_SUBGROUPS, "attention_sg"),
                    (false, true) => ("", "attention_v4"),
                    (false, false) => ("", "attention"),
                };
                let gpu = |template, p| {
                    let variant = vec4_access(&pair_exchange(template, subgroups), vec4);
                    format!("{enable}{}", expand(&variant, hs4, p, compact))
                };
                (
                    gpu(FORWARD_WGSL, row_threads(subgroups)),
                    gpu(BACKWARD_WGSL, SHARED_ROW_THREADS),
                    prefix,
                )
            }
            Variant::Tiled => {
                let (fwd, bwd) = tiled::sources(v);
                (fwd, bwd, "attention_tiled")
            }
            Variant::Coop => {
                let (fwd, bwd) = coop::sources();
                (fwd, bwd, "attention_coop")
            }
            Variant::Cpu => (
                expand_cpu(FORWARD_CPU_WGSL, hs4, CPU_ROWS[v]),
                expand_cpu(BACKWARD_CPU_WGSL, hs4, CPU_ROWS[v]),
                "attention_cpu",
            ),
        };
        // Leaked once a variant a process: kernels are `'static` like the others.
        let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
        let (fwd, bwd) = (leak(fwd), leak(bwd));
        let kernel = |which: &str, source, entry| Kernel {
            name: leak(format!("{prefix}_{which}_hs{}", 4 * hs4)),
            source,
            entry,
            unchecked: true,
        };
        // The same source for every head size: it reads hs from the uniform.
        let dsum = Kernel {
            name: "attention_dsum",
            source: tiled::DSUM_WGSL,
            entry: "main",
            unchecked: true,
        };
        let backward = match variant {
            Variant::Gpu { .. } => Backward::Fused(kernel("backward", bwd, "main")),
            Variant::Tiled => Backward::PerHead {
                dsum,
                fused: kernel("backward", bwd, "main"),
            },
            Variant::Coop => Backward::Presummed {
                dsum,
                fused: kernel("backward", bwd, "main"),
            },
            Variant::Cpu => Backward::Split {
                dq: kernel("dq", bwd, "dq"),
                dkdv: kernel("dkdv", bwd, "dkdv"),
            },
        };
        Kernels {
            forward: kernel("forward", fwd, "main"),
            backward,
        }
    }
}

/// Every kernel of every variant, natively compiled (`compact` false) or as the
/// browser compiles them (no tensor-core kernels: wgpu offers cooperative matrices
/// natively only).
pub(super) fn catalog(compact: bool) -> Vec<Kernel> {
    let mut all = Vec::new();
    for variant in Variant::ALL {
        if compact && matches!(variant, Variant::Coop) {
            continue;
        }
        for v in 0..variant.hs4s().len() {
            let k = build(variant, v, compact);
            all.push(k.forward);
            match k.backward {
                Backward::Fused(b) => all.push(b),
                Backward::PerHead { dsum, fused } => {
                    // One D pass serves every head size, the tensor-core kernels too.
                    if v == 0 {
                        all.push(dsum);
                    }
                    all.push(fused);
                }
                Backward::Presummed { fused, .. } => all.push(fused),
                Backward::Split { dq, dkdv } => all.extend([dq, dkdv]),
            }
        }
    }
    all
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    t: u32,
    c: u32,
    nh: u32,
    hs: u32,
    scale: f32,
    /// Attention-probability dropout: mask seed, keep threshold (`>=` keeps; 0
    /// keeps all) and the kept probabilities' factor (1 without dropout).
    seed: u32,
    threshold: u32,
    keep_scale: f32,
}

/// What the forward saved for the backward: its input, its output and each row's
/// logsumexp (`lse`; from the tensor-core kernels with dropout, the dropout mask's
/// bits after them, which their backward reads instead of hashing).
#[derive(Clone, Copy, Debug)]
pub struct AttentionSaved<'a> {
    pub qkv: &'a PooledBuffer,
    pub out: &'a PooledBuffer,
    pub lse: &'a PooledBuffer,
}

/// Causal multi-head self-attention, flash style: the forward saves one logsumexp
/// per row instead of the `b*heads*t*t` probabilities, and the backward recomputes
/// them (and the dropout mask, but for the tensor-core kernels, whose forward saves
/// it as bits: `b*heads*t*ceil(t/16)` words).
#[derive(Clone, Copy, Debug, Default)]
pub struct Attention {
    /// The kernels' tuning (`None`: the context's).
    pub target: Option<Target>,
    /// Dropout on the probabilities, as [`crate::reference::attention_forward`]
    /// masks them (in the numerator only: the softmax's sum and the logsumexp are of
    /// the undropped probabilities).
    pub dropout: Option<AttnDropout>,
    /// The GPU tuning's kernels (`None`: [`GPU_ATTENTION`] where it runs, else
    /// `Paired`). `Tiled` where [`Attention::tiled_runs`] says no panics: a test
    /// must not pass on the other kernels. The CPU tuning has its own.
    pub gpu_kernels: Option<GpuAttention>,
}

impl Attention {
    /// `out` `[b, t, c]` of `qkv` `[b, t, 3c]` (queries, keys, values along
    /// channels), and the logsumexp of each row's scaled scores, `[b, heads, t]`
    /// (followed by the dropout mask where [`AttentionSaved`] says).
    pub fn forward(
        &self,
        ctx: &WgpuContext,
        qkv: &PooledBuffer,
        shape: AttentionShape,
    ) -> (PooledBuffer, PooledBuffer) {
        let (params, kernels, groups, stats) = self.setup(ctx, shape, GPU_ATTENTION);
        let AttentionShape { b, t, c, .. } = shape;
        check_len(qkv, b * t * 3 * c, "attention forward qkv");
        let out = ctx.create_pooled(b * t * c * 4);
        let lse = ctx.create_pooled(stats * 4);
        ctx.dispatch(&kernels.forward, &params, &[qkv, &out, &lse], groups);
        (out, lse)
    }

    /// The gradient with respect to `qkv`, `dqkv` `[b, t, 3c]`, from `dout` `[b, t,
    /// c]` and what the forward saved.
    pub fn backward(
        &self,
        ctx: &WgpuContext,
        dout: &PooledBuffer,
        saved: AttentionSaved,
        shape: AttentionShape,
    ) -> PooledBuffer {
        let (params, kernels, groups, stats) = self.setup(ctx, shape, GPU_ATTENTION_BACKWARD);
        let AttentionShape { b, t, c, heads } = shape;
        let AttentionSaved { qkv, out, lse } = saved;
        check_len(dout, b * t * c, "attention backward dout");
        check_len(qkv, b * t * 3 * c, "attention backward qkv");
        check_len(out, b * t * c, "attention backward out");
        check_len(lse, stats, "attention backward saved");
        let dqkv = ctx.create_pooled(b * t * 3 * c * 4);
        match &kernels.backward {
            Backward::Fused(kernel) => {
                let [x, y, z] = groups;
                let fused = [2 * x, y, z];
                ctx.dispatch(kernel, &params, &[dout, qkv, lse, &dqkv, out], fused);
            }
            Backward::Presummed { dsum, fused } | Backward::PerHead { dsum, fused } => {
                let [x, y, z] = groups;
                let dsum_groups = [t.div_ceil(tiled::DSUM_ROWS) as u32, y, z];
                let sums = ctx.create_pooled(b * heads * t * 4);
                ctx.dispatch(dsum, &params, &[dout, out, &sums], dsum_groups);
                // Dq blocks then dk/dv blocks, or one workgroup a head.
                let x = match &kernels.backward {
                    Backward::PerHead { .. } => 1,
                    _ => 2 * x,
                };
                ctx.dispatch(fused, &params, &[dout, qkv, lse, &sums, &dqkv], [x, y, z]);
            }
            Backward::Split { dq, dkdv } => {
                // D_i = dout_i · out_i, written by the dq pass for the dk/dv pass.
                let dsum = ctx.create_pooled(b * heads * t * 4);
                ctx.dispatch(dq, &params, &[dout, qkv, lse, &dsum, &dqkv, out], groups);
                ctx.dispatch(dkdv, &params, &[dout, qkv, lse, &dsum, &dqkv], groups);
            }
        }
        dqkv
    }

    /// Whether the tiled GPU kernels run heads of `hs` channels on `ctx`: heads of
    /// up to 64 channels, where the device has their workgroup memory.
    pub fn tiled_runs(ctx: &WgpuContext, hs: usize) -> bool {
        tiled::workgroup_bytes(hs)
            .is_some_and(|need| need <= u64::from(ctx.limits().max_compute_workgroup_storage_size))
    }

    /// Whether the tensor-core kernels run `shape` on `ctx`, or why not: where the
    /// tensor-core GEMMs run, for heads of up to 64 channels in whole vec4s.
    pub fn coop_runs(ctx: &WgpuContext, shape: AttentionShape) -> Result<(), String> {
        coop::runs(ctx, shape.c, shape.heads)
    }

    /// Bytes of workgroup memory attention with heads of `hs` channels needs on
    /// adapters of `target`: the most the paired GPU kernels take with either
    /// exchange of partial dots on GPUs, whose tiled kernels run only where the
    /// device has theirs too ([`Attention::tiled_runs`]). The paired forward stages
    /// keys and values (and partial dots with the shared-memory exchange), the
    /// backward a tile, partial dots (one a thread), row statistics and the dropout
    /// mask's factors of the tile against the block.
    pub fn workgroup_bytes(target: Target, hs: usize) -> u64 {
        if target == Target::Cpu {
            return 0;
        }
        let hs4 = HS4S[0].iter().copied().find(|&h| hs <= 4 * h).unwrap_or(32);
        let forward = 2 * FORWARD_KEYS * hs4 * 16 + FORWARD_KEYS * 32 * 16;
        let backward = 2 * BACKWARD_TILE * hs4 * 16
            + BACKWARD_TILE * BACKWARD_THREADS * 8
            + 2 * BACKWARD_TILE * 4
            + BACKWARD_TILE * hs4 * 4
            + BACKWARD_TILE * BLOCK * 4;
        forward.max(backward) as u64
    }

    /// The largest grid of a launch over `shape` on adapters of `target` (on GPUs,
    /// the tiled forward's blocks or the paired backward's dq blocks and dk/dv
    /// blocks, whichever are more).
    pub fn grid(target: Target, shape: AttentionShape) -> [u64; 3] {
        let AttentionShape { b, t, c, heads } = shape;
        let hs = c / heads.max(1);
        let blocks = match target {
            Target::Gpu => t.div_ceil(tiled::BLOCK).max(2 * t.div_ceil(BLOCK)),
            Target::Cpu => {
                let v = HS4S[1].iter().position(|&h| hs <= 4 * h).unwrap_or(3);
                t.div_ceil(CPU_LANES * CPU_ROWS[v])
            }
        };
        [blocks as u64, b as u64 * heads as u64, 1]
    }

    /// The uniform, the kernels and the grid of a launch over `shape`, the GPU
    /// tuning's kernels `default` where `self` names none (and they run).
    fn setup(
        &self,
        ctx: &WgpuContext,
        shape: AttentionShape,
        default: GpuAttention,
    ) -> (Params, &'static Kernels, [u32; 3], usize) {
        let AttentionShape { b, t, c, heads: nh } = shape;
        let target = self.target.unwrap_or(ctx.kernel_target());
        assert!(b > 0 && t > 0 && nh > 0, "attention of an empty tensor");
        assert!(
            c.is_multiple_of(nh),
            "c = {c} does not split into nh = {nh} heads"
        );
        let hs = c / nh;
        let paired = Variant::Gpu {
            subgroups: attention_subgroups(ctx),
            vec4: whole_vec4s(shape),
        };
        let variant = match (target, self.gpu_kernels) {
            (Target::Cpu, _) => Variant::Cpu,
            (Target::Gpu, Some(GpuAttention::Paired)) => paired,
            (Target::Gpu, Some(GpuAttention::Tiled)) => {
                assert!(
                    Self::tiled_runs(ctx, hs),
                    "the tiled attention kernels do not run heads of {hs} channels here \
                     (at most 64, and {:?} bytes of workgroup memory)",
                    tiled::workgroup_bytes(hs)
                );
                Variant::Tiled
            }
            (Target::Gpu, Some(GpuAttention::Coop)) => {
                if let Err(why) = Self::coop_runs(ctx, shape) {
                    panic!("the tensor-core attention kernels do not run here: {why}");
                }
                Variant::Coop
            }
            (Target::Gpu, None)
                if ctx.precision() == Precision::F16
                    && ctx.f16_attention()
                    && Self::coop_runs(ctx, shape).is_ok() =>
            {
                Variant::Coop
            }
            (Target::Gpu, None) => match default {
                GpuAttention::Tiled if Self::tiled_runs(ctx, hs) => Variant::Tiled,
                _ => paired,
            },
        };
        let v = variant
            .hs4s()
            .iter()
            .position(|&hs4| hs <= 4 * hs4)
            .unwrap_or_else(|| panic!("attention supports head sizes up to 128, not {hs}"));
        let kernels = kernels(variant, v);
        // Workgroups of the forward and of each backward pass (the fused backward
        // takes twice as many: its dq blocks, then its dk/dv blocks).
        let groups = [t.div_ceil(variant.block(v)) as u32, (b * nh) as u32, 1];
        assert!(
            b * nh <= 65535,
            "b * nh = {} exceeds one grid dimension",
            b * nh
        );
        let mut params = Params {
            t: t as u32,
            c: c as u32,
            nh: nh as u32,
            hs: hs as u32,
            scale: 1.0 / (hs as f32).sqrt(),
            seed: 0,
            threshold: 0,
            keep_scale: 1.0,
        };
        if let Some(d) = self.dropout {
            let (threshold, keep_scale) = dropout_mask_params(d.p);
            (params.seed, params.threshold, params.keep_scale) = (d.seed, threshold, keep_scale);
        }
        // The tensor-core kernels keep the dropout mask beside the logsumexps.
        let stats = match variant {
            Variant::Coop => coop::stats_words(shape, params.threshold != 0),
            _ => b * nh * t,
        };
        (params, kernels, groups, stats)
    }
}

#[cfg(test)]
mod tests {
    use super::{build, pair_exchange, vec4_access, Variant, BACKWARD_WGSL, FORWARD_WGSL};

    /// The block sizes `Attention::workgroup_bytes` and `Attention::grid` count
    /// with are the shaders' (the streamed tiles' as `expand` prepends them).
    #[test]
    fn block_sizes_are_the_shaders() {
        for subgroups in [false, true] {
            let gpu = build(
                Variant::Gpu {
                    subgroups,
                    vec4: true,
                },
                1,
                false,
            );
            let (forward, backward) = match gpu.backward {
                super::Backward::Fused(b) => (gpu.forward.source, b.source),
                _ => panic!("the paired backward is one kernel"),
            };
            let p = super::row_threads(subgroups);
            let consts = [
                (FORWARD_WGSL, format!("const BQ: u32 = {}u;", super::BLOCK)),
                (
                    forward,
                    format!("const BKV: u32 = {}u;", super::FORWARD_KEYS),
                ),
                (forward, format!("const P: u32 = {p}u;")),
                (forward, "const WG: u32 = 32u * P;".to_string()),
                (BACKWARD_WGSL, format!("const BQ: u32 = {}u;", super::BLOCK)),
                (
                    backward,
                    format!("const BT: u32 = {}u;", super::BACKWARD_TILE),
                ),
                (
                    BACKWARD_WGSL,
                    format!("@workgroup_size({})", super::BACKWARD_THREADS),
                ),
            ];
            for (source, line) in consts {
                assert!(source.contains(&line), "{line}");
            }
        }
    }

    /// The vec4 variant binds qkv (and the backward's other tensors but lse) as vec4
    /// arrays and reads no float of them; the other reads floats; neither keeps a tag.
    #[test]
    fn vec4_access_keeps_one_variant() {
        for template in [FORWARD_WGSL, BACKWARD_WGSL] {
            let (v4, v1) = (vec4_access(template, true), vec4_access(template, false));
            for wgsl in [&v4, &v1] {
                assert!(!wgsl
                    .lines()
                    .any(|l| l.starts_with("#V4") || l.starts_with("#V1")));
                assert!(!wgsl.contains("{V4:") && !wgsl.contains("{V1:"));
            }
            assert!(v4.contains("qkv: array<vec4<f32>>") && !v4.contains("qkv[base + 1u]"));
            assert!(v1.contains("qkv: array<f32>") && v1.contains("qkv[base + 1u]"));
            assert!(v4.contains("lse: array<f32>"));
        }
    }

    #[test]
    fn pair_exchange_keeps_one_variant_and_drops_the_markers() {
        let barriers = |s: &str| s.matches("workgroupBarrier()").count();
        for template in [FORWARD_WGSL, BACKWARD_WGSL] {
            let (sg, sm) = (
                pair_exchange(template, true),
                pair_exchange(template, false),
            );
            for wgsl in [&sg, &sm] {
                assert!(!wgsl
                    .lines()
                    .any(|l| l.starts_with("#SG") || l.starts_with("#SM")));
            }
            assert!(sg.contains("subgroupShuffleXor") && !sm.contains("subgroupShuffle"));
            assert!(sm.contains("var<workgroup> part"));
            if template == FORWARD_WGSL {
                // No `part`, one barrier fewer a key tile.
                assert!(!sg.contains("part["));
                assert_eq!(barriers(&sg) + 1, barriers(&sm));
            } else {
                // The groups still meet in `part`: every barrier stays.
                assert_eq!(barriers(&sg), barriers(&sm));
            }
        }
    }
}

//! Kernels over many tensors a dispatch, stamped from one template
//! (`multi_tensor.wgsl`) for the number of tensors a dispatch binds: the
//! optimizer's two passes (sums of squares, AdamW; driven by
//! [`super::OptimizerStep`]) and the sums of weight gradients' split partials
//! ([`sum_splits_together`]).
//!
//! WGSL has no arrays of buffers, so a kernel for k tensors declares a binding for
//! each one's buffers; the template's `//#each` blocks are copied once a tensor.

use std::fmt::Write;
use std::sync::Mutex;

use super::wgsl::PRELUDE;
use crate::gpu::{grid_1d, Kernel, Slice, WgpuContext};
use crate::tuning::Target;

const TEMPLATE: &str = include_str!("multi_tensor.wgsl");

/// Workgroup size of every entry point (`WG` in multi_tensor.wgsl).
pub(super) const WG: u32 = 256;

/// Most tensors one dispatch takes, whatever the device allows: it bounds the
/// generated kernels (and the uniform's table) at a size that compiles quickly.
pub const MAX_TENSORS_PER_DISPATCH: usize = 32;
pub(super) const MAX_K: usize = MAX_TENSORS_PER_DISPATCH;
// The table of splits packs four tensors a vec4.
const _: () = assert!(MAX_K.is_multiple_of(4));

/// `TensorsParams` in multi_tensor.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(super) struct TensorsParams {
    pub decay: u32,
    pub groups: u32,
    /// adamw: where v starts in the moments' buffer (the chunk's length).
    pub vbase: u32,
    pub _pad0: u32,
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
    pub bc1: f32,
    pub bc2: f32,
    pub _pad1: f32,
    pub tensors: [[u32; 4]; MAX_K],
    /// sumsq, adamw: tensor t's gradient is `splits[t / 4][t % 4]` split partials...
    pub splits: [[u32; 4]; MAX_K / 4],
    /// ...from float `grad_offsets[t / 4][t % 4]` of the gradients' chunk.
    pub grad_offsets: [[u32; 4]; MAX_K / 4],
}

/// How many tensors one dispatch of each multi-tensor kernel takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorsPerDispatch {
    /// `sumsq` binds a chunk of the gradients and the partials, whatever the tensors.
    pub sumsq: usize,
    /// `adamw` binds a chunk of the gradients, of the parameters and of the moments.
    pub adamw: usize,
    /// `sum_splits` binds two a sum (partials, sum).
    pub sums: usize,
}

impl TensorsPerDispatch {
    /// As many as a shader stage may bind (`max_storage` storage buffers, `max_buffers`
    /// buffers of every kind, the uniform included), at most
    /// [`MAX_TENSORS_PER_DISPATCH`]: the optimizer's passes bind a few arenas, so
    /// they take that many on any device; sums of partials take half of what a
    /// stage binds (WebGPU's default of 8 storage buffers gives 4; Dawn on GPUs 16,
    /// 8; lavapipe 32, 16). Metal counts storage and uniform buffers against one
    /// limit (29 in wgpu).
    pub fn for_limits(max_storage: u32, max_buffers: u32) -> Self {
        let n = max_storage.min(max_buffers.saturating_sub(1)) as usize;
        TensorsPerDispatch {
            sumsq: MAX_K,
            adamw: MAX_K,
            sums: (n / 2).clamp(1, MAX_K),
        }
    }

    /// For the device of `ctx` (which asks for the adapter's own limits).
    pub fn of(ctx: &WgpuContext) -> Self {
        let l = ctx.limits();
        Self::for_limits(
            l.max_storage_buffers_per_shader_stage,
            l.max_buffers_and_acceleration_structures_per_shader_stage,
        )
    }

    /// What the `target` tuning uses of these. CPU adapters run every case of the
    /// sums' switch on the tensor under a lane mask, so each sum a dispatch costs
    /// every workgroup: they take at most 4 there (`CPU_SUMS_TENSORS`).
    pub fn for_target(self, target: Target) -> Self {
        match target {
            Target::Gpu => self,
            Target::Cpu => TensorsPerDispatch {
                sums: self.sums.min(CPU_SUMS_TENSORS),
                ..self
            },
        }
    }
}

/// Sums of split partials a dispatch on CPU adapters: the fastest on lavapipe of 1
/// to 15 for AdamW when it had a case a tensor (BENCHMARKS.md).
const CPU_SUMS_TENSORS: usize = 4;

// ---- sums of split partials ---------------------------------------------------------

/// One sum of split partials: `out[i] = sum over s of part[s * len + i]`.
pub struct SplitSum<'a> {
    pub part: Slice<'a>,
    /// `len` floats (several sums' outs may be ranges of one buffer: WebGPU lets a
    /// dispatch write disjoint ranges of a buffer through several bindings).
    pub out: Slice<'a>,
    pub len: usize,
    pub splits: usize,
}

/// Every sum of `sums`, `per.sums` a dispatch, each with the same bits as
/// matmul_reduce.wgsl's `sum_splits` alone.
pub fn sum_splits_together(ctx: &WgpuContext, per: TensorsPerDispatch, sums: &[SplitSum]) {
    assert!((1..=MAX_K).contains(&per.sums));
    let u = |x: usize| u32::try_from(x).expect("partials of a binding fit in u32");
    for group in sums.chunks(per.sums) {
        let mut params: TensorsParams = bytemuck::Zeroable::zeroed();
        let mut bound: Vec<Slice> = Vec::with_capacity(2 * group.len());
        for (entry, sum) in params.tensors.iter_mut().zip(group) {
            *entry = [params.groups, u(sum.len), u(sum.splits), 0];
            params.groups += u(sum.len.div_ceil(WG as usize));
            bound.extend([sum.part, sum.out]);
        }
        let kernel = tensors_kernel(Pass::SumSplits, group.len());
        ctx.dispatch_slices(&kernel, &params, &bound, grid_1d(params.groups, 1));
    }
}

/// `out[i] = sum_s part[s * len + i]` (the kernel with one tensor).
pub(crate) fn sum_splits(ctx: &WgpuContext, part: Slice, out: Slice, len: usize, splits: usize) {
    let sum = SplitSum {
        part,
        out,
        len,
        splits,
    };
    sum_splits_together(ctx, TensorsPerDispatch::of(ctx), &[sum]);
}

// ---- the generated kernels ---------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pass {
    Sumsq,
    Adamw,
    SumSplits,
}

impl Pass {
    fn name(self) -> &'static str {
        match self {
            Pass::Sumsq => "sumsq",
            Pass::Adamw => "adamw",
            Pass::SumSplits => "sum_splits",
        }
    }
}

/// Every kernel of the template: the optimizer's passes over `MAX_K` tensors and
/// the sums of 1 to `MAX_K`.
pub(super) fn catalog() -> Vec<Kernel> {
    let mut all = vec![
        tensors_kernel(Pass::Sumsq, MAX_K),
        tensors_kernel(Pass::Adamw, MAX_K),
    ];
    all.extend((1..=MAX_K).map(|k| tensors_kernel(Pass::SumSplits, k)));
    all
}

/// The kernel of `pass` for `k` tensors, generated on first use.
pub(super) fn tensors_kernel(pass: Pass, k: usize) -> Kernel {
    assert!((1..=MAX_K).contains(&k), "{k} tensors a dispatch");
    // Each (pass, k) is generated once and leaked: `Kernel` and the pipeline cache
    // hold `&'static str`s, and k <= MAX_K bounds the whole set at 3 * MAX_K small
    // sources a process (a model uses a few).
    static MADE: Mutex<Vec<(Pass, usize, Kernel)>> = Mutex::new(Vec::new());
    let mut made = crate::gpu::lock(&MADE);
    if let Some((.., kernel)) = made.iter().find(|(p, n, _)| (*p, *n) == (pass, k)) {
        return *kernel;
    }
    let kernel = Kernel {
        name: Box::leak(
            match pass {
                Pass::SumSplits => format!("matmul_sum_splits_of_{k}"),
                _ => format!("optimizer_{}_{k}", pass.name()),
            }
            .into_boxed_str(),
        ),
        source: Box::leak(tensors_source(pass, k).into_boxed_str()),
        entry: pass.name(),
        unchecked: false,
    };
    made.push((pass, k, kernel));
    kernel
}

/// WGSL of `pass` for `k` tensors: the prelude, the bindings, and the template's
/// shared part and `pass`'s section with each `//#each` block copied `k` times.
fn tensors_source(pass: Pass, k: usize) -> String {
    let mut out = String::from(PRELUDE);
    let mut bind = |binding: usize, access: &str, name: String| {
        writeln!(
            out,
            "@group(0) @binding({binding}) var<storage, {access}> {name}: array<f32>;"
        )
        .expect("writing to a String");
    };
    match pass {
        Pass::Sumsq => {
            bind(1, "read", "grads".into());
            bind(2, "read_write", "partials".into());
        }
        Pass::Adamw => {
            bind(1, "read", "grads".into());
            bind(2, "read_write", "param".into());
            bind(3, "read_write", "mv".into());
        }
        Pass::SumSplits => {
            // The partials as `grad{i}`: the template's `grad_at_#` adds them.
            for i in 0..k {
                bind(1 + 2 * i, "read", format!("grad{i}"));
                bind(2 + 2 * i, "read_write", format!("out{i}"));
            }
        }
    }
    writeln!(out, "const K: u32 = {k}u;\nconst MAX_K: u32 = {MAX_K}u;")
        .expect("writing to a String");
    let mut skipping = false;
    let mut block: Option<Vec<&str>> = None;
    for line in TEMPLATE.lines() {
        match line.trim() {
            t if t.starts_with("//#if ") => {
                skipping = !t["//#if ".len()..]
                    .split_whitespace()
                    .any(|name| name == pass.name())
            }
            "//#endif" => skipping = false,
            _ if skipping => {}
            "//#each" => block = Some(Vec::new()),
            "//#end" => {
                let lines = block.take().expect("//#end closes an //#each");
                for i in 0..k {
                    for l in &lines {
                        out.push_str(&l.replace('#', &i.to_string()));
                        out.push('\n');
                    }
                }
            }
            _ => match &mut block {
                Some(lines) => lines.push(line),
                None => {
                    out.push_str(line);
                    out.push('\n');
                }
            },
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_kernels_bind_k_tensors() {
        let src = tensors_source(Pass::Adamw, MAX_K);
        assert!(src.contains("@binding(1) var<storage, read> grads: array<f32>;"));
        assert!(src.contains("@binding(2) var<storage, read_write> param: array<f32>;"));
        assert!(src.contains("@binding(3) var<storage, read_write> mv: array<f32>;"));
        assert!(src.contains("fn grad_at(") && src.contains("fn adamw("));
        assert!(!src.contains("fn sumsq") && !src.contains("fn sum_splits"));
        let src = tensors_source(Pass::Sumsq, MAX_K);
        assert!(src.contains("@binding(2) var<storage, read_write> partials"));
        assert!(src.contains("fn grad_at(") && !src.contains("fn adamw"));
        let src = tensors_source(Pass::SumSplits, 2);
        assert!(src.contains("@binding(4) var<storage, read_write> out1"));
        assert!(src.contains("case 1u: { out1[i] = grad_at_1("));
        assert!(
            !src.contains("case 2u") && !src.contains("fn adamw") && !src.contains("fn grad_at(")
        );
        assert!(
            !src.contains("_#") && !src.contains("#["),
            "placeholders replaced"
        );
    }

    #[test]
    fn tensors_per_dispatch_follow_the_binding_limit() {
        let per = |storage, all| {
            let t = TensorsPerDispatch::for_limits(storage, all);
            (t.sumsq, t.adamw, t.sums)
        };
        assert_eq!(per(8, u32::MAX), (MAX_K, MAX_K, 4));
        assert_eq!(per(10, u32::MAX), (MAX_K, MAX_K, 5));
        assert_eq!(per(16, u32::MAX), (MAX_K, MAX_K, 8));
        assert_eq!(per(32, u32::MAX), (MAX_K, MAX_K, 16));
        assert_eq!(per(1_000_000, u32::MAX), (MAX_K, MAX_K, MAX_K));
        // Metal: 29 buffers of all kinds, one of them the uniform.
        assert_eq!(per(29, 29), (MAX_K, MAX_K, 14));
        let lavapipe = TensorsPerDispatch::for_limits(32, u32::MAX);
        assert_eq!(lavapipe.for_target(Target::Gpu), lavapipe);
        let cpu = lavapipe.for_target(Target::Cpu);
        assert_eq!(
            (cpu.sumsq, cpu.adamw, cpu.sums),
            (MAX_K, MAX_K, CPU_SUMS_TENSORS)
        );
    }
}

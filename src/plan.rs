//! Does a training configuration fit a device? One check, run before any GPU work
//! (natively and in the browser), from the device's real limits.
//!
//! It lists every buffer a training step creates (parameters, gradients, AdamW
//! state, activations, matmul partial sums, uploads and readbacks) at the size the
//! pool gives it under the configured [`SizePolicy`], in u64 with checked
//! arithmetic (wasm32's `usize` is 32 bits), plus the dispatch grids and the
//! workgroup memory of the kernels. The launchers keep their asserts as debug
//! checks; a config that passes here never reaches them.

use crate::config::TrainConfig;
use crate::error::{Error, Result};
use crate::fmt_bytes;
use crate::gpu::WgpuContext;
use crate::kernels::matmul::{self, Layout};
use crate::kernels::{Attention, CrossEntropy, LayerNorm, MAX_STORAGE_BUFFERS, MAX_WORKGROUP_SIZE};
use crate::model::{GptConfig, Shapes};
use crate::pool::{BufferPoolConfig, SizePolicy, SIZE_ALIGNMENT};
use crate::reference::AttentionShape;
use crate::tuning::Target;

/// The limits a plan is checked against, read as u64 so that a 4 GiB limit is not
/// truncated on wasm32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DeviceLimits {
    /// The largest buffer one kernel binding can address: the smaller of
    /// `maxStorageBufferBindingSize` and `maxBufferSize`.
    pub max_binding_bytes: u64,
    pub max_workgroups_per_dimension: u64,
    pub max_workgroup_storage_bytes: u64,
    pub max_invocations_per_workgroup: u64,
    pub max_storage_buffers_per_stage: u64,
    /// The kernels' tuning the device runs (`None`: not known, so the plan must hold
    /// for every tuning: a page's config is checked before its adapter is).
    pub kernels: Option<Target>,
}

impl DeviceLimits {
    pub fn from_wgpu(l: &wgpu::Limits) -> Self {
        DeviceLimits {
            max_binding_bytes: l.max_storage_buffer_binding_size.min(l.max_buffer_size),
            max_workgroups_per_dimension: l.max_compute_workgroups_per_dimension.into(),
            max_workgroup_storage_bytes: l.max_compute_workgroup_storage_size.into(),
            max_invocations_per_workgroup: l.max_compute_invocations_per_workgroup.into(),
            max_storage_buffers_per_stage: l.max_storage_buffers_per_shader_stage.into(),
            kernels: None,
        }
    }

    /// The limits of `ctx`'s device, for the kernels' tuning it runs.
    pub fn of(ctx: &WgpuContext) -> Self {
        DeviceLimits {
            kernels: Some(ctx.kernel_target()),
            ..Self::from_wgpu(ctx.limits())
        }
    }

    /// The tunings a plan must hold for.
    fn targets(&self) -> Vec<Target> {
        match self.kernels {
            Some(target) => vec![target],
            None => Target::ALL.to_vec(),
        }
    }

    /// WebGPU's default limits (what a browser gives without asking for more):
    /// 128 MiB bindings, 16 KiB of workgroup memory.
    pub fn webgpu_default() -> Self {
        Self::from_wgpu(&wgpu::Limits::default())
    }
}

/// One buffer of the plan.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct PlannedBuffer {
    pub name: &'static str,
    /// Bytes requested.
    pub bytes: u64,
    /// Bytes the pool creates for it: its size class, or the request itself (rounded
    /// to the alignment) when the class would pass the largest pooled size.
    pub created: u64,
}

/// What a configuration needs of a device.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Plan {
    pub params: u64,
    /// Parameters, gradients and both AdamW moments, as created, and under precision
    /// f16 the parameters' f16 copy (which only some f16 cores read: at most).
    pub weight_bytes: u64,
    /// Every distinct tensor shape of a step, largest first.
    pub buffers: Vec<PlannedBuffer>,
    pub head_size: u64,
    /// Workgroup memory of the attention kernels this head size selects.
    pub attention_workgroup_bytes: u64,
}

fn too_large(what: String) -> Error {
    Error::TooLarge(what)
}

/// Checked product of factors, or an error naming what overflowed.
fn product(name: &str, factors: &[u64]) -> Result<u64> {
    factors
        .iter()
        .try_fold(1u64, |acc, &f| acc.checked_mul(f))
        .ok_or_else(|| too_large(format!("{name} overflows 64-bit arithmetic; lower it")))
}

fn elements_past_u32(name: &str, elements: u64, setting: &str) -> Error {
    too_large(format!(
        "{name} has {elements} elements; the kernels index at most {} (u32): lower {setting}",
        u32::MAX
    ))
}

/// The attention of a step of `cfg`.
fn attention_shape(cfg: &TrainConfig) -> AttentionShape {
    AttentionShape {
        b: cfg.batch,
        t: cfg.context,
        c: cfg.width,
        heads: cfg.heads,
    }
}

/// Each `Linear` of a step, and the names of its products' split partials (by
/// [`Layout`]); the head has no bias.
const PARTIALS: [(&str, [&str; 3]); 5] = [
    (
        "the attention input",
        [
            "the attention input's split-K partial sums",
            "the attention input gradient's split-K partial sums",
            "the attention weights' partial sums",
        ],
    ),
    (
        "the attention projection",
        [
            "the attention projection's split-K partial sums",
            "the attention projection's input gradient's split-K partial sums",
            "the attention projection's partial sums",
        ],
    ),
    (
        "the MLP",
        [
            "the MLP's split-K partial sums",
            "the MLP's input gradient's split-K partial sums",
            "the MLP weights' partial sums",
        ],
    ),
    (
        "the MLP projection",
        [
            "the MLP projection's split-K partial sums",
            "the MLP projection's input gradient's split-K partial sums",
            "the MLP projection's partial sums",
        ],
    ),
    (
        "the output head",
        [
            "the logits' split-K partial sums",
            "the head's input gradient's split-K partial sums",
            "the output head's partial sums",
        ],
    ),
];

/// Every product of every `Linear` of a step of `cfg` (a corpus of `vocab`), as
/// the matmul launchers will run it on each of `targets`: its grid and workgroup
/// memory checked against `limits`, and its split partials as buffers (the most
/// any target makes). Every shape's elements fit u32 (checked before).
fn matmul_needs(
    cfg: &TrainConfig,
    vocab: u64,
    limits: &DeviceLimits,
    targets: &[Target],
) -> Result<Vec<(&'static str, u64, &'static str)>> {
    let model = GptConfig {
        vocab: vocab as usize,
        context: cfg.context,
        layers: cfg.layers,
        heads: cfg.heads,
        width: cfg.width,
    };
    let shapes = Shapes::new(&model, cfg.batch, cfg.context);
    let linears = [
        shapes.c_attn,
        shapes.attn_proj,
        shapes.c_fc,
        shapes.mlp_proj,
        shapes.head,
    ];
    let mut partials = Vec::new();
    let mut bias_partials = 0;
    for ((layer, names), shape) in PARTIALS.iter().zip(linears) {
        for (layout, name) in Layout::ALL.into_iter().zip(names) {
            let mut most = 0;
            for &target in targets {
                let needs = matmul::needs(target, cfg.precision, layout, shape);
                let (m, n, _) = layout.gemm(shape);
                let what = || {
                    format!(
                        "{layer}'s {} product ({m} x {n}, the {} kernels' {})",
                        layout.name(),
                        target.name(),
                        needs.variant.name()
                    )
                };
                // Workgroups along x (the output's columns) and y (its rows); the
                // rows of the forward and dinp are the batch's tokens.
                let [x, y, _] = needs.grid;
                let rows_setting = if layout == Layout::Dweight {
                    "width"
                } else {
                    "batch or context (batch x context)"
                };
                for (groups, setting) in [(y, rows_setting), (x, "width")] {
                    if groups > limits.max_workgroups_per_dimension {
                        return Err(too_large(format!(
                            "{} needs {groups} workgroups in one dispatch dimension; this \
                             device allows {}: lower {setting}",
                            what(),
                            limits.max_workgroups_per_dimension
                        )));
                    }
                }
                if needs.workgroup_bytes > limits.max_workgroup_storage_bytes {
                    return Err(too_large(format!(
                        "{} needs {} bytes of workgroup memory; this device gives {}",
                        what(),
                        needs.workgroup_bytes,
                        limits.max_workgroup_storage_bytes
                    )));
                }
                most = most.max(needs.partial_floats);
                if *layer != "the output head" {
                    bias_partials = bias_partials.max(needs.bias_partial_floats);
                }
            }
            if most > 0 {
                partials.push((*name, most, "batch or context"));
            }
        }
    }
    if bias_partials > 0 {
        partials.push((
            "a bias gradient's partial sums",
            bias_partials,
            "batch or context",
        ));
    }
    Ok(partials)
}

/// Checks `cfg` (with a corpus of `vocab` characters) against `limits` and returns
/// what it needs. Errors name the limit, the value and the setting to change.
pub fn check(cfg: &TrainConfig, vocab: u64, limits: &DeviceLimits) -> Result<Plan> {
    cfg.validate()?;
    if vocab == 0 {
        return Err(Error::Data("the corpus has no characters".into()));
    }
    let u = |x: usize| x as u64;
    let (l, nh, c, t, b) = (
        u(cfg.layers),
        u(cfg.heads),
        u(cfg.width),
        u(cfg.context),
        u(cfg.batch),
    );
    let v = vocab;
    let hs = c / nh;
    let rows = product("batch x context", &[b, t])?;

    // Kernels: workgroup size, bindings, workgroup memory, as each states them for
    // the tunings the device may run.
    let targets = limits.targets();
    if limits.max_invocations_per_workgroup < MAX_WORKGROUP_SIZE {
        return Err(too_large(format!(
            "the kernels use workgroups of {MAX_WORKGROUP_SIZE} threads; this device \
             allows {}",
            limits.max_invocations_per_workgroup
        )));
    }
    if limits.max_storage_buffers_per_stage < MAX_STORAGE_BUFFERS {
        return Err(too_large(format!(
            "the kernels bind up to {MAX_STORAGE_BUFFERS} storage buffers a dispatch; this \
             device allows {} a shader stage",
            limits.max_storage_buffers_per_stage
        )));
    }
    let wg_attention = targets
        .iter()
        .map(|&target| Attention::workgroup_bytes(target, hs as usize))
        .max()
        .unwrap_or(0);
    let wg_limit = limits.max_workgroup_storage_bytes;
    if wg_attention > wg_limit {
        return Err(too_large(format!(
            "head size {hs} (width {c} / heads {nh}) needs {wg_attention} bytes of workgroup \
             memory in the attention kernels; this device gives {wg_limit}: use more heads \
             so that width / heads is at most 64"
        )));
    }

    // Dispatch grids: one dimension each. The matmuls' are checked with their
    // shapes below.
    let max_groups = limits.max_workgroups_per_dimension;
    let attention_blocks = targets
        .iter()
        .map(|&target| Attention::grid(target, attention_shape(cfg))[0])
        .max()
        .unwrap_or(0);
    let crossentropy_groups = targets
        .iter()
        .map(|&target| CrossEntropy::workgroups(target, rows, v))
        .max()
        .unwrap_or(0);
    let grids: [(u64, String, &str); 4] = [
        (
            b * nh,
            format!("batch x heads = {b} x {nh}"),
            "batch or heads",
        ),
        (
            attention_blocks,
            format!("the attention kernels' blocks of the context ({t})"),
            "context",
        ),
        // grid_1d spreads a one-thread-a-row kernel over x and y, 65535 a row.
        (
            rows.div_ceil(65535),
            format!("batch x context / 65535 = {rows} / 65535"),
            "batch or context",
        ),
        (
            crossentropy_groups.div_ceil(65535),
            format!("the cross-entropy's {crossentropy_groups} workgroups / 65535"),
            "batch or context",
        ),
    ];
    for (groups, what, setting) in grids {
        if groups > max_groups {
            return Err(too_large(format!(
                "{what} needs {groups} workgroups in one dispatch dimension; this device \
                 allows {max_groups}: lower {setting}"
            )));
        }
    }

    // Buffers: (name, elements of 4 bytes, the setting that shrinks it).
    let mut tensors: Vec<(&'static str, u64, &'static str)> = vec![
        (
            "the token embedding and its gradient (vocab x width)",
            product("vocab x width", &[v, c])?,
            "width (or a corpus with fewer distinct characters)",
        ),
        (
            "the position embedding (context x width)",
            product("context x width", &[t, c])?,
            "context or width",
        ),
        (
            "the MLP weights (4 width x width)",
            product("4 x width^2", &[4, c, c])?,
            "width",
        ),
        (
            "the attention weights (3 width x width)",
            product("3 x width^2", &[3, c, c])?,
            "width",
        ),
        (
            "the activations (batch x context x width)",
            product("batch x context x width", &[rows, c])?,
            "batch or context",
        ),
        (
            "the attention input (batch x context x 3 width)",
            product("batch x context x 3 width", &[rows, 3, c])?,
            "batch or context",
        ),
        (
            "the MLP activation (batch x context x 4 width)",
            product("batch x context x 4 width", &[rows, 4, c])?,
            "batch, context or width",
        ),
        (
            "the logits (batch x context x vocab)",
            product("batch x context x vocab", &[rows, v])?,
            "batch or context",
        ),
        (
            "the attention row statistics (batch x heads x context)",
            product("batch x heads x context", &[b, nh, t])?,
            "batch or context",
        ),
        (
            "the layernorm partial sums",
            product(
                "layernorm partials",
                &[LayerNorm::most_scratch_floats(rows, c)],
            )?,
            "batch or context",
        ),
        (
            "the cross-entropy's partial sums",
            CrossEntropy::scratch_floats(rows, v),
            "batch or context",
        ),
    ];
    // Kernels take element counts as u32: past it nothing below is launched, and
    // each shape fits wasm32's usize.
    for &(name, elements, setting) in &tensors {
        if elements > u64::from(u32::MAX) {
            return Err(elements_past_u32(name, elements, setting));
        }
    }
    tensors.extend(matmul_needs(cfg, v, limits, &targets)?);

    let class_limit = limits
        .max_binding_bytes
        .min(BufferPoolConfig::default().max_buffer_size as u64);
    let mut buffers = Vec::with_capacity(tensors.len());
    for (name, elements, setting) in tensors {
        if elements > u64::from(u32::MAX) {
            return Err(elements_past_u32(name, elements, setting));
        }
        let bytes = elements * 4;
        let created = created_size(cfg.policy, bytes, class_limit);
        if created > limits.max_binding_bytes {
            return Err(too_large(format!(
                "{name} needs a {bytes}-byte buffer ({}); this device binds at most {} bytes \
                 ({}): lower {setting}",
                fmt_bytes(bytes),
                limits.max_binding_bytes,
                fmt_bytes(limits.max_binding_bytes)
            )));
        }
        buffers.push(PlannedBuffer {
            name,
            bytes,
            created,
        });
    }
    buffers.sort_by_key(|b| std::cmp::Reverse(b.created));

    // AdamW binds a tensor's two moments side by side after its arena chunk's
    // header (arena::ArenaLayout): a parameter tensor that fits a binding above
    // may still be more than half of one.
    let (largest, what) = [
        (v * c, "the token embedding (vocab x width)"),
        (t * c, "the position embedding (context x width)"),
        (
            product("4 x width^2", &[4, c, c])?,
            "the MLP weights (4 width x width)",
        ),
    ]
    .into_iter()
    .max_by_key(|&(n, _)| n)
    .expect("three tensors");
    let header = crate::arena::HEADER_FLOATS as u64;
    let moments = product("the moments' bytes", &[largest + header, 8])?;
    if moments > limits.max_binding_bytes {
        return Err(too_large(format!(
            "{what} has {largest} floats; AdamW binds its two moments side by side, {moments} \
             bytes with the arena's {header}-float header, and this device binds at most {} \
             bytes ({}): lower width",
            limits.max_binding_bytes,
            fmt_bytes(limits.max_binding_bytes)
        )));
    }
    let per_layer = 12 * c * c + 13 * c;
    let params = product("the parameter count", &[l, per_layer])?
        .checked_add(v * c + t * c + 2 * c)
        .ok_or_else(|| too_large("the parameter count overflows; lower width or layers".into()))?;
    // Parameters, gradients, AdamW's m and v: four copies of every tensor; in f16 an
    // f16 copy of the parameters too (crate::kernels::ParamArena::f16_weights).
    let per_param = match cfg.precision {
        crate::config::Precision::F32 => 16,
        crate::config::Precision::F16 => 18,
    };
    let weight_bytes = product("the weights' bytes", &[params, per_param])?;
    Ok(Plan {
        params,
        weight_bytes,
        buffers,
        head_size: hs,
        attention_workgroup_bytes: wg_attention,
    })
}

/// Bytes the pool creates for a request of `bytes`: its class under `policy`,
/// unless that passes `class_limit`; then the request itself, aligned.
pub fn created_size(policy: SizePolicy, bytes: u64, class_limit: u64) -> u64 {
    let align = SIZE_ALIGNMENT as u64;
    let exact = bytes.max(align).div_ceil(align) * align;
    match policy.class_bytes(bytes) {
        Some(class) if class <= class_limit => class,
        _ => exact,
    }
}

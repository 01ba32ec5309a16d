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
use crate::pool::{BufferPoolConfig, SizePolicy, SIZE_ALIGNMENT};

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
}

impl DeviceLimits {
    pub fn from_wgpu(l: &wgpu::Limits) -> Self {
        DeviceLimits {
            max_binding_bytes: l.max_storage_buffer_binding_size.min(l.max_buffer_size),
            max_workgroups_per_dimension: l.max_compute_workgroups_per_dimension.into(),
            max_workgroup_storage_bytes: l.max_compute_workgroup_storage_size.into(),
            max_invocations_per_workgroup: l.max_compute_invocations_per_workgroup.into(),
            max_storage_buffers_per_stage: l.max_storage_buffers_per_shader_stage.into(),
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
    /// Parameters, gradients and both AdamW moments, as created.
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

/// Workgroup memory of the attention kernels for heads of `hs` channels (the
/// `var<workgroup>` arrays of attention.wgsl and attention_backward.wgsl, whose
/// head size is padded to the variant's 16, 64 or 128).
pub fn attention_workgroup_bytes(hs: u64) -> u64 {
    let hs4 = if hs <= 16 {
        4
    } else if hs <= 64 {
        16
    } else {
        32
    };
    // forward: ks, vs (16 keys x hs4 vec4s each) and 512 vec4 partial dots.
    let forward = 2 * 16 * hs4 * 16 + 512 * 16;
    // backward: a 2 x 8 x hs4 vec4 tile, 8 x 128 vec2 partials, two rows of 8 f32.
    let backward = 2 * 8 * hs4 * 16 + 8 * 128 * 8 + 2 * 8 * 4;
    forward.max(backward)
}

/// Workgroup memory of the tiled matmul (two 512-vec4 tiles).
const MATMUL_WORKGROUP_BYTES: u64 = 2 * 512 * 16;
/// Largest workgroup any kernel declares.
const MAX_WORKGROUP_INVOCATIONS: u64 = 256;
/// Most storage buffers one kernel binds (attention's dq pass).
const MAX_STORAGE_BINDINGS: u64 = 6;

/// The matmul launchers' split of a reduction over `rows` (kernels/matmul.rs
/// `split`): how many partial sums a weight or bias gradient is reduced from.
fn splits(rows: u64, want: u64, align: u64) -> u64 {
    const MIN_SPLIT: u64 = 256;
    let splits = want.clamp(1, rows.div_ceil(MIN_SPLIT).max(1));
    let chunk = rows.div_ceil(splits).div_ceil(align) * align;
    rows.div_ceil(chunk)
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

    // Kernels: workgroup size, bindings, workgroup memory.
    if limits.max_invocations_per_workgroup < MAX_WORKGROUP_INVOCATIONS {
        return Err(too_large(format!(
            "the kernels use workgroups of {MAX_WORKGROUP_INVOCATIONS} threads; this device \
             allows {}",
            limits.max_invocations_per_workgroup
        )));
    }
    if limits.max_storage_buffers_per_stage < MAX_STORAGE_BINDINGS {
        return Err(too_large(format!(
            "the attention kernel binds {MAX_STORAGE_BINDINGS} storage buffers; this device \
             allows {} a shader stage",
            limits.max_storage_buffers_per_stage
        )));
    }
    let wg_attention = attention_workgroup_bytes(hs);
    let wg_limit = limits.max_workgroup_storage_bytes;
    if wg_attention > wg_limit {
        return Err(too_large(format!(
            "head size {hs} (width {c} / heads {nh}) needs {wg_attention} bytes of workgroup \
             memory in the attention kernels; this device gives {wg_limit}: use more heads \
             so that width / heads is at most 64"
        )));
    }
    if MATMUL_WORKGROUP_BYTES > wg_limit {
        return Err(too_large(format!(
            "the matmul kernel needs {MATMUL_WORKGROUP_BYTES} bytes of workgroup memory; \
             this device gives {wg_limit}"
        )));
    }

    // Dispatch grids: one dimension each.
    let max_groups = limits.max_workgroups_per_dimension;
    let grids: [(u64, String, &str); 5] = [
        (
            b * nh,
            format!("batch x heads = {b} x {nh}"),
            "batch or heads",
        ),
        (
            t.div_ceil(64),
            format!("context / 64 = {t} / 64"),
            "context",
        ),
        (
            rows.div_ceil(128),
            format!("batch x context / 128 = {rows} / 128"),
            "batch or context",
        ),
        (
            (4 * c).max(v).div_ceil(128),
            format!("the widest matmul output / 128 = {} / 128", (4 * c).max(v)),
            "width",
        ),
        // grid_1d spreads a one-thread-a-row kernel over x and y, 65535 a row.
        (
            rows.div_ceil(65535),
            format!("batch x context / 65535 = {rows} / 65535"),
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
            product("layernorm partials", &[2, rows.div_ceil(64), c])?,
            "batch or context",
        ),
    ];
    // Weight gradients of each matmul ([n, k] over `rows`), reduced from partial
    // sums as the launcher splits them; the tied head reduces the logits.
    for (name, n, k) in [
        ("the attention weights' partial sums", 3 * c, c),
        ("the attention projection's partial sums", c, c),
        ("the MLP weights' partial sums", 4 * c, c),
        ("the MLP projection's partial sums", c, 4 * c),
        ("the output head's partial sums", v, c),
    ] {
        let tiles = n.div_ceil(128) * k.div_ceil(128);
        let parts = splits(rows, 1024u64.div_ceil(tiles), 8);
        if parts > 1 {
            tensors.push((name, product(name, &[parts, n, k])?, "batch or context"));
        }
        let bias_parts = splits(rows, 1024u64.div_ceil(n.div_ceil(64)), 1);
        if bias_parts > 1 {
            tensors.push((
                "a bias gradient's partial sums",
                product(name, &[bias_parts, n])?,
                "batch or context",
            ));
        }
    }

    let class_limit = limits
        .max_binding_bytes
        .min(BufferPoolConfig::default().max_buffer_size as u64);
    let mut buffers = Vec::with_capacity(tensors.len());
    for (name, elements, setting) in tensors {
        // Kernels take element counts as u32.
        if elements > u64::from(u32::MAX) {
            return Err(too_large(format!(
                "{name} has {elements} elements; the kernels index at most {} (u32): lower {setting}",
                u32::MAX
            )));
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
    // header (kernels::ArenaLayout): a parameter tensor that fits a binding above
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
    let header = crate::kernels::HEADER_FLOATS as u64;
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
    // Parameters, gradients, AdamW's m and v: four copies of every tensor.
    let weight_bytes = product("the weights' bytes", &[params, 16])?;
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

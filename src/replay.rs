//! What-if replay: a recorded step ([`crate::trace::StepTrace`]) run again without the
//! GPU through each size policy and through an offline offset plan, against the
//! lower bound.
//!
//! - **Tensors** are the intervals between a birth event (`hit`, `miss`, `oversize`,
//!   `unpooled`) and the death of the same buffer (`release`, `reject`, `discard`).
//!   A death with no birth in the step was live when the step began (weights,
//!   optimizer state); a birth with no death is live when it ends.
//! - **Lower bound**: the most requested bytes live at once. No allocator can hold
//!   less.
//! - **A size policy**: a pool with that rounding and no caps replays the step from
//!   empty: births take a free buffer of their class or create one, deaths give it
//!   back. Its peak is the most bytes created at once (in use + held free), which is
//!   what a warm pool holds in a steady step.
//! - **A size policy with a fit ratio** (`pow2/8 fit2`): the same pool, where a birth
//!   whose class (of at least [`crate::pool::FIT_MIN_BYTES`]) is empty takes the
//!   smallest free buffer up to that many times its class before creating one
//!   ([`crate::pool::BufferPool::take`]). Which buffer a
//!   birth gets then depends on what earlier steps left free, so the step is
//!   replayed again on the warm pool until a pass creates nothing; the peak counts
//!   every pass.
//! - **Object plan**: whole buffers planned for the step ahead, the best a pool of
//!   whole buffers could do knowing the step (greedy by size for shared objects,
//!   Pisarchyk and Lee 2020): largest tensor first, each into the smallest buffer
//!   already planned that is large enough and holds no tensor live at the same
//!   time, else into a new buffer of its size.
//! - **Offset plan**: every tensor of the step placed at a fixed offset in one arena,
//!   known ahead (a training step repeats exactly), by greedy-by-size (Pisarchyk and
//!   Lee 2020, as TFLite's GPU delegate plans tensors): largest first, each in the
//!   tightest gap left by the already placed tensors whose lifetimes overlap its own,
//!   else on top. Offsets are multiples of [`OFFSET_ALIGNMENT`] (WebGPU's default
//!   `minStorageBufferOffsetAlignment`).

use std::collections::{BTreeMap, HashMap};

use crate::pool::SizePolicy;
use crate::trace::{EventKind, StepTrace};

/// Offsets of the plan are multiples of this (bytes).
pub const OFFSET_ALIGNMENT: u64 = 256;

/// One tensor of a step: `size` bytes requested, live over event positions
/// `start..end` (`start` 0 for tensors live when the step began).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tensor {
    pub size: u64,
    pub start: u32,
    pub end: u32,
    /// `false` for buffers that never join a pool (the seed's `upload`).
    pub poolable: bool,
}

impl Tensor {
    fn overlaps(&self, other: &Tensor) -> bool {
        self.start < other.end && other.start < self.end
    }
}

/// The tensors of a traced step, in birth order.
pub fn tensors(step: &StepTrace) -> Vec<Tensor> {
    let end = step.events.len() as u32 + 1;
    let mut open: HashMap<u64, usize> = HashMap::new();
    let mut out: Vec<Tensor> = Vec::new();
    for (i, e) in step.events.iter().enumerate() {
        let at = i as u32 + 1;
        let poolable = e.purpose == "storage" && e.kind != EventKind::Unpooled;
        if e.kind.is_birth() {
            open.insert(e.buffer, out.len());
            out.push(Tensor {
                size: e.requested,
                start: at,
                end,
                poolable: poolable && e.kind != EventKind::Oversize,
            });
        } else if e.kind.is_death() {
            match open.remove(&e.buffer) {
                Some(j) => out[j].end = at,
                None => out.push(Tensor {
                    size: e.requested,
                    start: 0,
                    end: at,
                    poolable: e.purpose == "storage" && e.kind != EventKind::Discard,
                }),
            }
        }
    }
    out
}

/// The most bytes live at once.
pub fn lower_bound(tensors: &[Tensor]) -> u64 {
    let mut edges: Vec<(u32, i64)> = Vec::with_capacity(tensors.len() * 2);
    for t in tensors {
        edges.push((t.start, t.size as i64));
        edges.push((t.end, -(t.size as i64)));
    }
    // Frees before allocations at one position: intervals are half-open.
    edges.sort_by_key(|&(at, delta)| (at, delta));
    let (mut live, mut peak) = (0i64, 0i64);
    for (_, delta) in edges {
        live += delta;
        peak = peak.max(live);
    }
    peak as u64
}

/// What one allocator would have needed for the step.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ReplayRow {
    /// `pow2`, `pow2/8`, `exact`, `offset plan` or `lower bound`.
    pub allocator: String,
    /// The most bytes it had reserved at once.
    pub peak_bytes: u64,
    /// `peak_bytes` over the lower bound.
    pub ratio: f64,
    /// Buffers it created during the step (the plan: 1, its arena).
    pub buffers_created: u64,
    /// Births served from free buffers (pools only).
    pub hits: u64,
}

/// Replays `tensors` through a pool with `policy` and no caps, from empty
/// (tensors live at the start are created at the start).
pub fn replay_policy(tensors: &[Tensor], policy: SizePolicy, max_buffer_size: u64) -> ReplayRow {
    replay_pool(tensors, policy, 1, max_buffer_size)
}

/// Most passes [`replay_pool`] makes over a step waiting for one that creates
/// nothing (a fitting pool settles in two or three).
pub const MAX_PASSES: u32 = 8;

/// The row label of a pool: its policy, and its fit ratio when above 1.
pub fn pool_label(policy: SizePolicy, fit_ratio: u32) -> String {
    if fit_ratio > 1 {
        format!("{} fit{fit_ratio}", policy.label())
    } else {
        policy.label()
    }
}

/// Replays `tensors` through a pool with `policy`, `fit_ratio` (see
/// [`crate::pool::BufferPoolConfig::fit_ratio`]) and no caps, from empty, pass after
/// pass on the warm pool until one creates nothing (at most [`MAX_PASSES`]).
/// `peak_bytes` is the most bytes reserved over all passes, `buffers_created` all
/// the buffers made, `hits` those of the first pass.
pub fn replay_pool(
    tensors: &[Tensor],
    policy: SizePolicy,
    fit_ratio: u32,
    max_buffer_size: u64,
) -> ReplayRow {
    // (position, is birth, tensor): deaths first at one position.
    let mut events: Vec<(u32, bool, usize)> = Vec::with_capacity(tensors.len() * 2);
    for (i, t) in tensors.iter().enumerate() {
        events.push((t.start, true, i));
        events.push((t.end, false, i));
    }
    events.sort();
    let class_of = |t: &Tensor| -> (u64, bool) {
        let class = policy.size_class(t.size.min(usize::MAX as u64) as usize) as u64;
        if t.poolable && class <= max_buffer_size {
            (class, true)
        } else {
            (t.size.div_ceil(4) * 4, false)
        }
    };
    let fit = u64::from(fit_ratio.max(1));
    // size -> free buffers of that size.
    let mut free: BTreeMap<u64, u64> = BTreeMap::new();
    let (mut in_use, mut held, mut peak) = (0u64, 0u64, 0u64);
    let (mut created, mut hits) = (0u64, 0u64);
    // The size each live tensor was handed.
    let mut given = vec![0u64; tensors.len()];
    for pass in 0..MAX_PASSES {
        let created_before = created;
        for &(_, birth, i) in &events {
            let (class, pooled) = class_of(&tensors[i]);
            if birth {
                let fit = if class < crate::pool::FIT_MIN_BYTES as u64 {
                    1
                } else {
                    fit
                };
                let limit = class.saturating_mul(fit).min(max_buffer_size);
                let slot = if pooled {
                    free.range_mut(class..=limit).find(|(_, n)| **n > 0)
                } else {
                    None
                };
                let size = match slot {
                    Some((&size, n)) => {
                        *n -= 1;
                        held -= size;
                        hits += u64::from(pass == 0);
                        size
                    }
                    None => {
                        created += 1;
                        class
                    }
                };
                given[i] = size;
                in_use += size;
                peak = peak.max(in_use + held);
            } else {
                in_use -= given[i];
                if pooled {
                    *free.entry(given[i]).or_default() += 1;
                    held += given[i];
                }
            }
        }
        if pass > 0 && created == created_before {
            break;
        }
    }
    ReplayRow {
        allocator: pool_label(policy, fit_ratio),
        peak_bytes: peak,
        ratio: 0.0,
        buffers_created: created,
        hits,
    }
}

/// Whole buffers planned for the step ahead (see the module docs): the buffer each
/// tensor gets, and each buffer's size (4-byte aligned). Unpoolable tensors get a
/// buffer of their own.
pub fn object_plan(tensors: &[Tensor]) -> (Vec<usize>, Vec<u64>) {
    let aligned = |t: &Tensor| t.size.max(1).div_ceil(4) * 4;
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(aligned(&tensors[i])), tensors[i].start, i));
    let mut object = vec![0usize; tensors.len()];
    let mut sizes: Vec<u64> = Vec::new();
    let mut members: Vec<Vec<usize>> = Vec::new();
    for i in order {
        let t = &tensors[i];
        let size = aligned(t);
        // Buffers are planned largest tensor first, so every one is large enough;
        // a buffer of an unpoolable tensor is its alone.
        let fits = |o: usize| {
            members[o]
                .iter()
                .all(|&j| tensors[j].poolable && !tensors[j].overlaps(t))
        };
        let best = t
            .poolable
            .then(|| {
                (0..sizes.len())
                    .filter(|&o| fits(o))
                    .min_by_key(|&o| (sizes[o], o))
            })
            .flatten();
        let o = best.unwrap_or_else(|| {
            sizes.push(size);
            members.push(Vec::new());
            sizes.len() - 1
        });
        members[o].push(i);
        object[i] = o;
    }
    (object, sizes)
}

/// Offsets of `tensors` in one arena, greedy by size; see the module docs.
pub fn offset_plan(tensors: &[Tensor]) -> Vec<u64> {
    let aligned = |t: &Tensor| t.size.max(1).div_ceil(OFFSET_ALIGNMENT) * OFFSET_ALIGNMENT;
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(aligned(&tensors[i])), tensors[i].start, i));
    let mut offsets = vec![0u64; tensors.len()];
    let mut placed: Vec<usize> = Vec::with_capacity(tensors.len());
    for i in order {
        let size = aligned(&tensors[i]);
        let mut neighbours: Vec<(u64, u64)> = placed
            .iter()
            .filter(|&&j| tensors[j].overlaps(&tensors[i]))
            .map(|&j| (offsets[j], offsets[j] + aligned(&tensors[j])))
            .collect();
        neighbours.sort_unstable();
        let (mut top, mut best): (u64, Option<(u64, u64)>) = (0, None);
        for (start, end) in neighbours {
            if start >= top {
                let gap = start - top;
                if gap >= size && best.is_none_or(|(g, _)| gap < g) {
                    best = Some((gap, top));
                }
            }
            top = top.max(end);
        }
        offsets[i] = best.map_or(top, |(_, at)| at);
        placed.push(i);
    }
    offsets
}

/// The arena size an offset plan needs.
pub fn plan_peak(tensors: &[Tensor], offsets: &[u64]) -> u64 {
    tensors
        .iter()
        .zip(offsets)
        .map(|(t, &o)| o + t.size.max(1).div_ceil(OFFSET_ALIGNMENT) * OFFSET_ALIGNMENT)
        .max()
        .unwrap_or(0)
}

/// The policies every replay compares.
pub fn policies() -> Vec<SizePolicy> {
    let mut out = vec![SizePolicy::PowerOfTwo];
    for subdivisions in [2, 4, 8, 16] {
        out.push(SizePolicy::Subdivided { subdivisions });
    }
    out.push(SizePolicy::Exact);
    out
}

/// The pools with a fit ratio every replay compares: pow2/8 with ratios 2 (the
/// default, [`crate::pool::DEFAULT_FIT_RATIO`]), 4 and 8, and the default ratio over
/// the coarsest and the finest rounding.
pub fn fitting_pools() -> Vec<(SizePolicy, u32)> {
    let eighths = SizePolicy::Subdivided { subdivisions: 8 };
    let fit = crate::pool::DEFAULT_FIT_RATIO;
    vec![
        (eighths, 2),
        (eighths, 4),
        (eighths, 8),
        (SizePolicy::PowerOfTwo, fit),
        (SizePolicy::Exact, fit),
    ]
}

/// The replay of one step: the lower bound, each policy and the offset plan.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct StepReplay {
    pub step: u32,
    pub label: String,
    pub tensors: usize,
    pub lower_bound: u64,
    pub rows: Vec<ReplayRow>,
}

pub fn replay_step(step: &StepTrace, max_buffer_size: u64) -> StepReplay {
    let tensors = tensors(step);
    let lower = lower_bound(&tensors);
    let ratio = |peak: u64| {
        if lower == 0 {
            1.0
        } else {
            peak as f64 / lower as f64
        }
    };
    let mut rows = vec![ReplayRow {
        allocator: "lower bound".into(),
        peak_bytes: lower,
        ratio: 1.0,
        buffers_created: 0,
        hits: 0,
    }];
    for policy in policies() {
        let mut row = replay_policy(&tensors, policy, max_buffer_size);
        row.ratio = ratio(row.peak_bytes);
        rows.push(row);
    }
    for (policy, fit_ratio) in fitting_pools() {
        let mut row = replay_pool(&tensors, policy, fit_ratio, max_buffer_size);
        row.ratio = ratio(row.peak_bytes);
        rows.push(row);
    }
    let (_, sizes) = object_plan(&tensors);
    let peak = sizes.iter().sum();
    rows.push(ReplayRow {
        allocator: "object plan".into(),
        peak_bytes: peak,
        ratio: ratio(peak),
        buffers_created: sizes.len() as u64,
        hits: 0,
    });
    let offsets = offset_plan(&tensors);
    let peak = plan_peak(&tensors, &offsets);
    rows.push(ReplayRow {
        allocator: "offset plan".into(),
        peak_bytes: peak,
        ratio: ratio(peak),
        buffers_created: u64::from(!tensors.is_empty()),
        hits: 0,
    });
    StepReplay {
        step: step.step,
        label: step.label.clone(),
        tensors: tensors.len(),
        lower_bound: lower,
        rows,
    }
}

/// Every step of a trace file, replayed.
pub fn replay(trace: &crate::trace::Trace) -> Vec<StepReplay> {
    trace
        .steps
        .iter()
        .map(|s| replay_step(s, trace.max_buffer_size))
        .collect()
}

/// A plain-text table of replays.
pub fn table(replays: &[StepReplay]) -> String {
    let mut out = String::new();
    for r in replays {
        out.push_str(&format!(
            "step {} ({}): {} tensors\n{:<14} {:>14} {:>8} {:>8} {:>8}\n",
            r.step, r.label, r.tensors, "allocator", "peak bytes", "x bound", "created", "hits"
        ));
        for row in &r.rows {
            out.push_str(&format!(
                "{:<14} {:>14} {:>8.3} {:>8} {:>8}\n",
                row.allocator, row.peak_bytes, row.ratio, row.buffers_created, row.hits
            ));
        }
        out.push('\n');
    }
    out
}

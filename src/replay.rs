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
//! - **Offset plan**: every tensor of the step placed at a fixed offset in one arena,
//!   known ahead (a training step repeats exactly), by greedy-by-size (Pisarchyk and
//!   Lee 2020, as TFLite's GPU delegate plans tensors): largest first, each in the
//!   tightest gap left by the already placed tensors whose lifetimes overlap its own,
//!   else on top. Offsets are multiples of [`OFFSET_ALIGNMENT`] (WebGPU's default
//!   `minStorageBufferOffsetAlignment`).

use std::collections::HashMap;

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
    let mut free: HashMap<u64, u64> = HashMap::new();
    let (mut in_use, mut held, mut peak) = (0u64, 0u64, 0u64);
    let (mut created, mut hits) = (0u64, 0u64);
    for (_, birth, i) in events {
        let (class, pooled) = class_of(&tensors[i]);
        if birth {
            let slot = free.entry(class).or_default();
            if pooled && *slot > 0 {
                *slot -= 1;
                held -= class;
                hits += 1;
            } else {
                created += 1;
            }
            in_use += class;
            peak = peak.max(in_use + held);
        } else {
            in_use -= class;
            if pooled {
                *free.entry(class).or_default() += 1;
                held += class;
            }
        }
    }
    ReplayRow {
        allocator: policy.label(),
        peak_bytes: peak,
        ratio: 0.0,
        buffers_created: created,
        hits,
    }
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

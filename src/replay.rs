//! What-if replay: a recorded step's tensors run again without the GPU through each
//! size policy and through an offline offset plan, against the lower bound
//! ([`crate::snapshot`] reads the step from a tidepool trace or a PyTorch snapshot).
//!
//! - **Tensors** are allocations from their request to the position from which
//!   their memory may be reused; position 0 for those live when the step began.
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
//!
//! Cost: the lower bound and each pool are O(n log n) in the tensors (a pool with a
//! fit ratio replays the step up to [`MAX_PASSES`] times). The plans find each
//! tensor's neighbours in time through an index of the tensors placed so far
//! (a segment tree over positions): O(n log n + k log k), k the pairs of tensors live together. A step
//! where every tensor overlaps every other makes k quadratic, so past
//! [`PLAN_WORK`] pairs the plans place the remaining tensors on top (a new buffer
//! each), a plan still valid but no longer the greedy one, and their row says so.
//!
//! Sizes: tensors totalling more than [`MAX_TOTAL_BYTES`] are refused by
//! [`check_sizes`] (every sum a replay makes then fits in 64 bits); the replays
//! themselves saturate rather than wrap.

use std::collections::{BTreeMap, BTreeSet};

use crate::pool::SizePolicy;

/// Offsets of the plan are multiples of this (bytes).
pub const OFFSET_ALIGNMENT: u64 = 256;

/// Most bytes the tensors of one replay may total: a pool's classes at most double
/// a size, it replays at most [`MAX_PASSES`] = 8 times and the plans align each
/// tensor, so every sum stays below 2^64.
pub const MAX_TOTAL_BYTES: u64 = 1 << 59;

/// Pairs of tensors live together a plan looks at before it places the rest on
/// top: under half a second of CPU for the offset plan (which sorts each tensor's
/// neighbours). Tensors are placed largest first, so the rest are the smallest.
pub const PLAN_WORK: u64 = 1 << 23;

/// One tensor of a step: `size` bytes requested, live over event positions
/// `start..end` (`start` 0 for tensors live when the step began).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tensor {
    pub size: u64,
    pub start: u32,
    pub end: u32,
    /// `false` for buffers that never join a pool (tidepool's uploads).
    pub poolable: bool,
}

impl Tensor {
    fn overlaps(&self, other: &Tensor) -> bool {
        self.start < other.end && other.start < self.end
    }
}

/// Refuses tensors whose sizes add up past [`MAX_TOTAL_BYTES`].
pub fn check_sizes(tensors: &[Tensor]) -> Result<(), String> {
    let total: u128 = tensors.iter().map(|t| u128::from(t.size)).sum();
    if total > u128::from(MAX_TOTAL_BYTES) {
        return Err(format!(
            "the tensors total {total} bytes; a replay adds up at most {MAX_TOTAL_BYTES} \
             (2^59) bytes"
        ));
    }
    Ok(())
}

/// Births and deaths in replay order: by position, deaths first (lifetimes are
/// half-open), then by tensor.
fn edges(tensors: &[Tensor]) -> Vec<(u32, bool, usize)> {
    let mut edges: Vec<(u32, bool, usize)> = Vec::with_capacity(tensors.len() * 2);
    for (i, t) in tensors.iter().enumerate() {
        edges.push((t.start, true, i));
        edges.push((t.end, false, i));
    }
    edges.sort_unstable();
    edges
}

/// The most bytes live at once (`u64::MAX` past it).
pub fn lower_bound(tensors: &[Tensor]) -> u64 {
    // In 128 bits: 2^32 tensors of 2^64 bytes fit, and a tensor dead where it was
    // born (deaths come first) is never counted live.
    let (mut live, mut peak) = (0i128, 0i128);
    for (_, birth, i) in edges(tensors) {
        let size = i128::from(tensors[i].size);
        live += if birth { size } else { -size };
        peak = peak.max(live);
    }
    u64::try_from(peak).unwrap_or(u64::MAX)
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
    /// Why the figure is not what the row's name promises (a plan cut short).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl ReplayRow {
    fn new(allocator: impl Into<String>, peak_bytes: u64, buffers_created: u64) -> Self {
        ReplayRow {
            allocator: allocator.into(),
            peak_bytes,
            ratio: 0.0,
            buffers_created,
            hits: 0,
            note: None,
        }
    }
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
    let events = edges(tensors);
    let aligned = |size: u64| size.div_ceil(4).saturating_mul(4);
    // (class, pooled) of each tensor: the policy's class, or its own aligned size
    // when it never joins the pool.
    let classes: Vec<(u64, bool)> = tensors
        .iter()
        .map(|t| match policy.class_bytes(t.size) {
            Some(class) if t.poolable && class <= max_buffer_size => (class, true),
            _ => (aligned(t.size), false),
        })
        .collect();
    let fit = u64::from(fit_ratio.max(1));
    // size -> free buffers of that size (never 0: emptied sizes are removed, so the
    // first size in a range is the smallest free buffer there).
    let mut free: BTreeMap<u64, u64> = BTreeMap::new();
    let (mut in_use, mut held, mut peak) = (0u64, 0u64, 0u64);
    let (mut created, mut hits) = (0u64, 0u64);
    // The size each live tensor was handed.
    let mut given = vec![0u64; tensors.len()];
    for pass in 0..MAX_PASSES {
        let created_before = created;
        for &(_, birth, i) in &events {
            let (class, pooled) = classes[i];
            if birth {
                let fit = if class < crate::pool::FIT_MIN_BYTES as u64 {
                    1
                } else {
                    fit
                };
                let limit = class.saturating_mul(fit).min(max_buffer_size);
                let slot = match pooled {
                    true => free.range(class..=limit).next().map(|(&size, _)| size),
                    false => None,
                };
                let size = match slot {
                    Some(size) => {
                        if let Some(n) = free.get_mut(&size) {
                            *n -= 1;
                            if *n == 0 {
                                free.remove(&size);
                            }
                        }
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
                in_use = in_use.saturating_add(size);
                peak = peak.max(in_use.saturating_add(held));
            } else {
                in_use = in_use.saturating_sub(given[i]);
                if pooled {
                    *free.entry(given[i]).or_default() += 1;
                    held = held.saturating_add(given[i]);
                }
            }
        }
        if pass > 0 && created == created_before {
            break;
        }
    }
    let mut row = ReplayRow::new(pool_label(policy, fit_ratio), peak, created);
    row.hits = hits;
    row
}

/// The tensors a plan has placed, found by lifetime: a segment tree over positions
/// holds each placed tensor in the nodes that cover its lifetime (those live at a
/// position are on the path from its leaf to the root), and a set ordered by birth
/// finds those born inside a range. Together: every placed tensor live at the same
/// time as a query, each once.
struct Placed {
    /// Leaves (a power of two, at least the positions).
    leaves: usize,
    /// First entry of each node's list, `NIL` for none.
    head: Vec<u32>,
    /// (tensor, next entry of the same node).
    entries: Vec<(u32, u32)>,
    born: BTreeSet<(u32, u32)>,
}

const NIL: u32 = u32::MAX;

impl Placed {
    fn new(tensors: &[Tensor]) -> Placed {
        let positions = tensors
            .iter()
            .map(|t| t.end as usize + 1)
            .max()
            .unwrap_or(1);
        let leaves = positions.next_power_of_two();
        Placed {
            leaves,
            head: vec![NIL; 2 * leaves],
            entries: Vec::new(),
            born: BTreeSet::new(),
        }
    }

    fn insert(&mut self, i: usize, t: &Tensor) {
        let (mut l, mut r) = (t.start as usize + self.leaves, t.end as usize + self.leaves);
        while l < r {
            if l & 1 == 1 {
                self.link(l, i);
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                self.link(r, i);
            }
            l >>= 1;
            r >>= 1;
        }
        self.born.insert((t.start, i as u32));
    }

    fn link(&mut self, node: usize, i: usize) {
        self.entries.push((i as u32, self.head[node]));
        self.head[node] = (self.entries.len() - 1) as u32;
    }

    /// Calls `f` with each placed tensor live at the same time as `t`.
    fn overlapping(&self, tensors: &[Tensor], t: &Tensor, mut f: impl FnMut(usize)) {
        // Live at t.start: born at or before it.
        let mut node = t.start as usize + self.leaves;
        while node >= 1 {
            let mut e = self.head[node];
            while e != NIL {
                let (j, next) = self.entries[e as usize];
                if tensors[j as usize].overlaps(t) {
                    f(j as usize);
                }
                e = next;
            }
            node >>= 1;
        }
        // Born after t.start, before t.end.
        if t.end > t.start + 1 {
            for &(_, j) in self.born.range((t.start + 1, 0)..(t.end, 0)) {
                if tensors[j as usize].overlaps(t) {
                    f(j as usize);
                }
            }
        }
    }
}

/// Tensors in the order the plans take them: largest (aligned) first, then by birth.
fn largest_first(tensors: &[Tensor], aligned: impl Fn(&Tensor) -> u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_unstable_by_key(|&i| (std::cmp::Reverse(aligned(&tensors[i])), tensors[i].start, i));
    order
}

/// A plan and whether it is the greedy one throughout (`false`: past [`PLAN_WORK`]
/// the remaining tensors went on top).
pub struct Plan<T> {
    pub plan: T,
    pub complete: bool,
}

/// Whole buffers planned for the step ahead (see the module docs): the buffer each
/// tensor gets, and each buffer's size (4-byte aligned). Unpoolable tensors get a
/// buffer of their own.
pub fn object_plan(tensors: &[Tensor]) -> (Vec<usize>, Vec<u64>) {
    object_plan_within(tensors, PLAN_WORK).plan
}

/// [`object_plan`], looking at most at `work` pairs of tensors live together.
pub fn object_plan_within(tensors: &[Tensor], work: u64) -> Plan<(Vec<usize>, Vec<u64>)> {
    let aligned = |t: &Tensor| t.size.max(1).div_ceil(4).saturating_mul(4);
    let mut object = vec![0usize; tensors.len()];
    let mut sizes: Vec<u64> = Vec::new();
    // Buffers that may be shared (none of an unpoolable tensor), in creation order:
    // planned largest tensor first, so their sizes never grow along it.
    let mut shared: Vec<usize> = Vec::new();
    // `busy[o] == stamp`: buffer o holds a tensor live with the current one.
    let mut busy: Vec<usize> = Vec::new();
    let mut placed = Placed::new(tensors);
    let (mut seen, mut complete) = (0u64, true);
    for (stamp, i) in largest_first(tensors, aligned).into_iter().enumerate() {
        let t = &tensors[i];
        let size = aligned(t);
        let mut best = None;
        if t.poolable && complete {
            placed.overlapping(tensors, t, |j| {
                busy[object[j]] = stamp + 1;
                seen += 1;
            });
            if seen > work {
                complete = false;
            } else {
                // The smallest free buffer is the last free one; of equal sizes the
                // first: every one is large enough.
                let free = |&o: &usize| busy[o] != stamp + 1;
                if let Some(&last) = shared.iter().rev().find(|o| free(o)) {
                    let group = shared.partition_point(|&o| sizes[o] > sizes[last]);
                    best = shared[group..].iter().copied().find(|o| free(o));
                }
            }
        }
        let o = best.unwrap_or_else(|| {
            sizes.push(size);
            busy.push(0);
            if t.poolable {
                shared.push(sizes.len() - 1);
            }
            sizes.len() - 1
        });
        object[i] = o;
        placed.insert(i, t);
    }
    Plan {
        plan: (object, sizes),
        complete,
    }
}

/// Offsets of `tensors` in one arena, greedy by size; see the module docs.
pub fn offset_plan(tensors: &[Tensor]) -> Vec<u64> {
    offset_plan_within(tensors, PLAN_WORK).plan
}

/// [`offset_plan`], looking at most at `work` pairs of tensors live together.
pub fn offset_plan_within(tensors: &[Tensor], work: u64) -> Plan<Vec<u64>> {
    let aligned = |t: &Tensor| {
        t.size
            .max(1)
            .div_ceil(OFFSET_ALIGNMENT)
            .saturating_mul(OFFSET_ALIGNMENT)
    };
    let mut offsets = vec![0u64; tensors.len()];
    let mut placed = Placed::new(tensors);
    let (mut seen, mut complete, mut arena) = (0u64, true, 0u64);
    let mut neighbours: Vec<(u64, u64)> = Vec::new();
    for i in largest_first(tensors, aligned) {
        let t = &tensors[i];
        let size = aligned(t);
        let mut offset = arena;
        if complete {
            neighbours.clear();
            placed.overlapping(tensors, t, |j| {
                let o = offsets[j];
                neighbours.push((o, o.saturating_add(aligned(&tensors[j]))));
            });
            seen += neighbours.len() as u64;
            if seen > work {
                complete = false;
            } else {
                neighbours.sort_unstable();
                let (mut top, mut best): (u64, Option<(u64, u64)>) = (0, None);
                for &(start, end) in &neighbours {
                    if start >= top {
                        let gap = start - top;
                        if gap >= size && best.is_none_or(|(g, _)| gap < g) {
                            best = Some((gap, top));
                        }
                    }
                    top = top.max(end);
                }
                offset = best.map_or(top, |(_, at)| at);
            }
        }
        offsets[i] = offset;
        arena = arena.max(offset.saturating_add(size));
        placed.insert(i, t);
    }
    Plan {
        plan: offsets,
        complete,
    }
}

/// The arena size an offset plan needs.
pub fn plan_peak(tensors: &[Tensor], offsets: &[u64]) -> u64 {
    tensors
        .iter()
        .zip(offsets)
        .map(|(t, &o)| {
            o.saturating_add(
                t.size
                    .max(1)
                    .div_ceil(OFFSET_ALIGNMENT)
                    .saturating_mul(OFFSET_ALIGNMENT),
            )
        })
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

/// The replay of one step: the lower bound, each policy and the plans.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct StepReplay {
    /// The recording's place in its file, from 0.
    pub step: u32,
    /// The recording's label (`device 0`, `step 3 (steady)`).
    pub label: String,
    pub tensors: usize,
    pub lower_bound: u64,
    pub rows: Vec<ReplayRow>,
}

/// The rows of a replay of `tensors`: the lower bound, each policy, each fitting
/// pool, the object plan and the offset plan, each against the lower bound.
pub fn rows(tensors: &[Tensor], max_buffer_size: u64) -> Vec<ReplayRow> {
    let mut rows = vec![ReplayRow::new("lower bound", lower_bound(tensors), 0)];
    for policy in policies() {
        rows.push(replay_policy(tensors, policy, max_buffer_size));
    }
    for (policy, fit_ratio) in fitting_pools() {
        rows.push(replay_pool(tensors, policy, fit_ratio, max_buffer_size));
    }
    let cut = |complete: bool| {
        (!complete).then(|| {
            format!(
                "past {PLAN_WORK} pairs of tensors live together the rest went on top: \
                 an upper bound of the greedy plan"
            )
        })
    };
    let objects = object_plan_within(tensors, PLAN_WORK);
    let (_, sizes) = &objects.plan;
    let mut row = ReplayRow::new(
        "object plan",
        sizes.iter().fold(0u64, |a, &b| a.saturating_add(b)),
        sizes.len() as u64,
    );
    row.note = cut(objects.complete);
    rows.push(row);
    let offsets = offset_plan_within(tensors, PLAN_WORK);
    let mut row = ReplayRow::new(
        "offset plan",
        plan_peak(tensors, &offsets.plan),
        u64::from(!tensors.is_empty()),
    );
    row.note = cut(offsets.complete);
    rows.push(row);
    set_ratios(&mut rows, lower_bound(tensors));
    rows
}

/// Sets each row's `ratio`: its peak over `lower` (1 when `lower` is 0).
pub fn set_ratios(rows: &mut [ReplayRow], lower: u64) {
    for row in rows {
        row.ratio = match lower {
            0 => 1.0,
            _ => row.peak_bytes as f64 / lower as f64,
        };
    }
}

/// The rows of one replay as a plain-text table (notes below it).
pub fn rows_table(rows: &[ReplayRow]) -> String {
    let width = rows
        .iter()
        .map(|r| r.allocator.len())
        .max()
        .unwrap_or(0)
        .max(14);
    let mut out = format!(
        "{:<width$} {:>14} {:>8} {:>8} {:>8}\n",
        "allocator", "peak bytes", "x bound", "created", "hits"
    );
    for row in rows {
        out.push_str(&format!(
            "{:<width$} {:>14} {:>8.3} {:>8} {:>8}\n",
            row.allocator, row.peak_bytes, row.ratio, row.buffers_created, row.hits
        ));
    }
    for row in rows {
        if let Some(note) = &row.note {
            out.push_str(&format!("{}: {note}\n", row.allocator));
        }
    }
    out
}

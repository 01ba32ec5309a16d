//! The memory plan of a training step: every storage tensor the step asks for gets
//! a fixed, aligned range of one of a few arenas, worked out from one traced step.
//!
//! A step repeats exactly, so the sizes and lifetimes of its tensors are known after
//! the first one, as a static-graph compiler knows them ahead. The plan is greedy by
//! size (Pisarchyk and Lee, 2020): largest tensor first, each in the tightest gap
//! its already placed contemporaries leave in the first arena with room under the
//! device's limit, else on top of it, else in a new arena.
//!
//! Ranges of tensors alive at the same time never overlap, so under the binding rule
//! the planned policy uses (every storage operand bound `read_write`, see
//! docs/memory.md) any dispatch of the step may bind any of them together. Pure
//! arithmetic: [`crate::gpu`] makes the arenas and hands the ranges out.

/// One tensor of the traced step: `size` bytes asked for, live from event `birth`
/// until event `death` (exclusive; the step's events are its births and deaths in
/// order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lifetime {
    pub size: u64,
    pub birth: u32,
    pub death: u32,
}

impl Lifetime {
    fn overlaps(&self, other: &Lifetime) -> bool {
        self.birth < other.death && other.birth < self.death
    }

    /// Bytes bound: the size rounded up to whole 4-byte words (at least one).
    pub fn bound_bytes(&self) -> u64 {
        self.size.max(4).next_multiple_of(4)
    }
}

/// What the device allows: where a bound range may start, and the largest arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// `minStorageBufferOffsetAlignment`: every offset is a multiple of it (a power
    /// of two, at least 4).
    pub offset_alignment: u64,
    /// The smaller of `maxStorageBufferBindingSize` and `maxBufferSize`: no arena
    /// is larger, so any range of one can be bound.
    pub max_arena_bytes: u64,
}

/// Where one tensor lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    pub arena: usize,
    pub offset: u64,
    /// Bytes bound ([`Lifetime::bound_bytes`]).
    pub size: u64,
}

impl Range {
    pub fn end(&self) -> u64 {
        self.offset + self.size
    }

    /// Whether two ranges share a byte.
    pub fn overlaps(&self, other: &Range) -> bool {
        self.arena == other.arena && self.offset < other.end() && other.offset < self.end()
    }
}

/// A step's plan: a range per tensor (in the trace's order) and each arena's size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryPlan {
    pub ranges: Vec<Range>,
    pub arenas: Vec<u64>,
}

impl MemoryPlan {
    /// Bytes the arenas take together.
    pub fn reserved(&self) -> u64 {
        self.arenas.iter().sum()
    }
}

/// Most tensors a step may plan: the plan looks at every pair live together.
pub const MAX_TENSORS: usize = 1 << 16;

/// The most bytes live at once ([`Lifetime::bound_bytes`] each): no plan holds less.
pub fn lower_bound(tensors: &[Lifetime]) -> u64 {
    let mut edges: Vec<(u32, bool, u64)> = Vec::with_capacity(2 * tensors.len());
    for t in tensors {
        edges.push((t.birth, true, t.bound_bytes()));
        edges.push((t.death, false, t.bound_bytes()));
    }
    // Deaths before births at one position: lifetimes are half-open.
    edges.sort_unstable();
    let (mut live, mut peak) = (0u64, 0u64);
    for (_, birth, size) in edges {
        if birth {
            live = live.saturating_add(size);
            peak = peak.max(live);
        } else {
            live = live.saturating_sub(size);
        }
    }
    peak
}

/// Plans `tensors` for a device with `limits`; an error, before any GPU work, when
/// a tensor or the step cannot be planned there.
pub fn plan(tensors: &[Lifetime], limits: Limits) -> Result<MemoryPlan, String> {
    let Limits {
        offset_alignment: align,
        max_arena_bytes: cap,
    } = limits;
    if !align.is_power_of_two() || align < 4 {
        return Err(format!(
            "minStorageBufferOffsetAlignment must be a power of two of at least 4, got {align}"
        ));
    }
    if tensors.len() > MAX_TENSORS {
        return Err(format!(
            "a step of {} storage tensors passes the planner's {MAX_TENSORS}: use the \
             policy pow2/8",
            tensors.len()
        ));
    }
    if let Some(t) = tensors.iter().find(|t| t.bound_bytes() > cap) {
        return Err(format!(
            "a tensor of {} bytes passes this device's largest binding \
             (maxStorageBufferBindingSize, maxBufferSize: {cap} bytes): lower batch, \
             context or width",
            t.size
        ));
    }
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_unstable_by_key(|&i| {
        let t = &tensors[i];
        (std::cmp::Reverse(t.bound_bytes()), t.birth, i)
    });
    let mut ranges: Vec<Option<Range>> = vec![None; tensors.len()];
    let mut arenas: Vec<u64> = Vec::new();
    let mut placed: Vec<usize> = Vec::with_capacity(tensors.len());
    let mut neighbours: Vec<(u64, u64)> = Vec::new();
    for i in order {
        let t = &tensors[i];
        let size = t.bound_bytes();
        let mut at = None;
        for arena in 0..=arenas.len() {
            neighbours.clear();
            neighbours.extend(placed.iter().filter_map(|&j| {
                let r = ranges[j].expect("placed");
                (r.arena == arena && tensors[j].overlaps(t)).then_some((r.offset, r.end()))
            }));
            neighbours.sort_unstable();
            if let Some(offset) = tightest_gap(&neighbours, size, align, cap) {
                at = Some((arena, offset));
                break;
            }
        }
        // A tensor fits an empty arena (checked above), so the last one tried takes it.
        let (arena, offset) = at.expect("an empty arena holds any tensor under the cap");
        if arena == arenas.len() {
            arenas.push(0);
        }
        arenas[arena] = arenas[arena].max(offset + size);
        ranges[i] = Some(Range {
            arena,
            offset,
            size,
        });
        placed.push(i);
    }
    Ok(MemoryPlan {
        ranges: ranges.into_iter().map(|r| r.expect("placed")).collect(),
        arenas,
    })
}

/// Where a tensor of `size` bytes goes among `neighbours` (ranges sorted by start):
/// the aligned start of the tightest gap between them that holds it, else on top
/// of them if that ends at most at `cap`.
///
/// The room above the top is no gap: taking it grows the arena. Were it a
/// candidate beside the gaps, then where the cap sits just above the step's peak
/// (2 GiB against a 2.07 GB step on an H200) it would often be the tightest one,
/// and tensors that fit a gap below would pile on top instead.
fn tightest_gap(neighbours: &[(u64, u64)], size: u64, align: u64, cap: u64) -> Option<u64> {
    let mut best: Option<(u64, u64)> = None;
    let mut top = 0u64;
    for &(start, end) in neighbours {
        let from = top.next_multiple_of(align);
        if from < start && start - from >= size && best.is_none_or(|(gap, _)| start - from < gap) {
            best = Some((start - from, from));
        }
        top = top.max(end);
    }
    let on_top = top.next_multiple_of(align);
    best.map(|(_, offset)| offset)
        .or_else(|| (on_top <= cap && cap - on_top >= size).then_some(on_top))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        offset_alignment: 256,
        max_arena_bytes: 1 << 20,
    };

    fn t(size: u64, birth: u32, death: u32) -> Lifetime {
        Lifetime { size, birth, death }
    }

    #[test]
    fn tensors_that_never_meet_share_their_bytes() {
        let plan = plan(&[t(1000, 0, 2), t(1000, 2, 4), t(500, 1, 3)], LIMITS).unwrap();
        assert_eq!(plan.ranges[0].offset, plan.ranges[1].offset);
        assert!(!plan.ranges[2].overlaps(&plan.ranges[0]));
        assert_eq!(plan.ranges[2].offset % 256, 0);
        assert_eq!(plan.arenas, [1024 + 500]);
    }

    #[test]
    fn a_gap_below_is_taken_before_the_room_on_top() {
        // `d` fits the gap `b` leaves (800 bytes) and the room under the cap above
        // `c` (600): the gap keeps the arena at the step's peak.
        let limits = Limits {
            offset_alignment: 4,
            max_arena_bytes: 3200,
        };
        let (a, b, c, d) = (t(1000, 0, 10), t(800, 0, 2), t(800, 0, 10), t(500, 5, 10));
        let plan = plan(&[a, b, c, d], limits).unwrap();
        assert_eq!(plan.ranges[3].offset, 1000);
        assert_eq!(plan.arenas, [2600]);
    }

    #[test]
    fn a_full_arena_spills_into_a_new_one_and_oversize_is_refused() {
        let small = Limits {
            offset_alignment: 256,
            max_arena_bytes: 1024,
        };
        let plan = plan(&[t(1024, 0, 2), t(512, 1, 3)], small).unwrap();
        assert_eq!(plan.arenas, [1024, 512]);
        assert_eq!(plan.ranges[1].arena, 1);
        let err = super::plan(&[t(1025, 0, 1)], small).unwrap_err();
        assert!(err.contains("maxStorageBufferBindingSize"), "{err}");
        let bad = Limits {
            offset_alignment: 100,
            max_arena_bytes: 1024,
        };
        assert!(super::plan(&[], bad).unwrap_err().contains("power of two"));
    }

    #[test]
    fn the_lower_bound_counts_what_lives_together() {
        assert_eq!(lower_bound(&[t(8, 0, 2), t(8, 2, 4), t(4, 1, 3)]), 12);
        assert_eq!(lower_bound(&[t(1, 0, 1)]), 4);
        assert_eq!(lower_bound(&[]), 0);
    }
}

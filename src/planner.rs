//! The memory plan of a training step: every storage tensor the step asks for gets
//! a fixed, aligned range of one of a few arenas, worked out from one traced step.
//!
//! A step repeats exactly, so the sizes and lifetimes of its tensors are known after
//! the first one, as a static-graph compiler knows them ahead. The plan is greedy by
//! size (Pisarchyk and Lee, 2020): largest tensor first, each in the tightest gap
//! its already placed contemporaries leave in the first arena with room under the
//! device's limit, else on top of it, else in a new arena.
//!
//! Ranges of tensors alive at the same time never overlap, so any dispatch of the
//! step may bind any of them together as long as every binding of an arena is
//! writable: WebGPU refuses one buffer bound read-only and writable in one
//! dispatch, even on disjoint ranges. Read-only bindings are worth keeping (the
//! GEMMs read their operands faster through them), so the plan keeps each tensor
//! out of the arenas of its rivals, the tensors a dispatch writes while reading it
//! or reads while writing it ([`plan_apart`]). A dispatch whose operands still
//! share an arena with its outputs (the step went another way than the traced
//! one) binds everything `read_write` (docs/memory.md). Pure arithmetic:
//! [`crate::gpu`] makes the arenas and hands the ranges out.

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
    plan_apart(tensors, &[], limits)
}

/// The plan of a traced step whose `dispatches` should bind their operands as
/// declared: no dispatch reads a tensor from an arena it writes one in. Of the
/// ways to that, [`plan_apart`] and [`colour`] (allies weighed or not) then
/// [`plan_coloured`], the one that reserves least: keeping rivals apart tensor by
/// tensor packs big steps to their peak, colouring does better on some small ones
/// (where alignment and many small tensors weigh). Where even that reserves more
/// than 1% over [`plan`] (small steps with many rivals), [`plan`]'s: memory first.
pub fn plan_step(
    tensors: &[Lifetime],
    dispatches: &[Access],
    limits: Limits,
) -> Result<MemoryPlan, String> {
    let rivals = rivals(tensors.len(), dispatches);
    let apart = plan_apart(tensors, &rivals, limits)?;
    let events = tensors
        .iter()
        .map(|t| u64::from(t.death))
        .max()
        .unwrap_or(0);
    let work = (tensors.len() as u64).saturating_mul(events);
    if rivals.iter().all(Vec::is_empty) || work > COLOUR_WORK {
        return Ok(apart);
    }
    // Colour with and without allies weighed: either packs tighter on some steps.
    let mut best = apart;
    for allies in [allies(tensors.len(), dispatches), Vec::new()] {
        let coloured = plan_coloured(tensors, &colour(tensors, &rivals, &allies), limits)?;
        let legal = dispatches_reading_their_arena(&coloured, dispatches) == 0;
        if legal && coloured.reserved() < best.reserved() {
            best = coloured;
        }
    }
    // Memory first: past APART_SLACK over one set of arenas, the plain plan, whose
    // dispatches that read their own arena bind `read_write`.
    let one = plan(tensors, limits)?;
    let allowed = one.reserved().saturating_add(one.reserved() / APART_SLACK);
    Ok(if best.reserved() <= allowed {
        best
    } else {
        one
    })
}

/// [`plan_step`] keeps rivals apart at most for 1 / `APART_SLACK` (1%) more bytes
/// than [`plan`] reserves for the same step.
pub const APART_SLACK: u64 = 100;

/// [`plan`], keeping each tensor out of the arenas that hold one of its `rivals`
/// (by tensor; [`rivals`]), so that every dispatch of the step can bind its
/// operands as declared.
///
/// Each tensor goes to the first arena without a rival of it that has room for
/// it (the tightest gap among its contemporaries, else on top of them under the
/// cap), else to a new arena; in three orders (largest first, and two more), the
/// plan that reserves least kept. Rivals are live together (one dispatch binds
/// both), so they could never share bytes anyway; what they cannot share is a
/// buffer. Any arena may hold any tensor that is no rival of its others, so the
/// arenas fill at the step's peak as one would.
pub fn plan_apart(
    tensors: &[Lifetime],
    rivals: &[Vec<u32>],
    limits: Limits,
) -> Result<MemoryPlan, String> {
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
    // Greedy by size first (Pisarchyk and Lee, 2020); a step of many small
    // tensors sometimes packs tighter by size times lifetime, or by breadth
    // (longest lived first). Each order is one pass: the least reserved wins.
    let key = |order: usize, t: &Lifetime| {
        let (bytes, life) = (t.bound_bytes(), u64::from(t.death.saturating_sub(t.birth)));
        match order {
            0 => (bytes, 0),
            1 => (bytes.saturating_mul(life), bytes),
            _ => (life, bytes),
        }
    };
    let mut best: Option<MemoryPlan> = None;
    for which in 0..3 {
        let mut order: Vec<usize> = (0..tensors.len()).collect();
        order.sort_unstable_by_key(|&i| {
            let t = &tensors[i];
            (std::cmp::Reverse(key(which, t)), t.birth, i)
        });
        let plan = place(tensors, rivals, limits, &order);
        if best.as_ref().is_none_or(|b| plan.reserved() < b.reserved()) {
            best = Some(plan);
        }
    }
    Ok(best.expect("three orders"))
}

/// The tensors placed one by one in `order`: each in the first arena without a
/// rival of it that has a gap among its contemporaries, else room on top under
/// the cap, else in a new arena.
fn place(tensors: &[Lifetime], rivals: &[Vec<u32>], limits: Limits, order: &[usize]) -> MemoryPlan {
    let Limits {
        offset_alignment: align,
        max_arena_bytes: cap,
    } = limits;
    let mut ranges: Vec<Option<Range>> = vec![None; tensors.len()];
    let mut arenas: Vec<u64> = Vec::new();
    // The tensors placed in each arena.
    let mut members: Vec<Vec<usize>> = Vec::new();
    let mut neighbours: Vec<(u64, u64)> = Vec::new();
    for &i in order {
        let t = &tensors[i];
        let size = t.bound_bytes();
        // The first arena without a rival of it that has room: a gap, else on top.
        let mut best: Option<(usize, u64)> = None;
        for (arena, placed) in members.iter().enumerate() {
            let barred = rivals.get(i).is_some_and(|rs| {
                rs.iter()
                    .any(|&r| ranges[r as usize].is_some_and(|x| x.arena == arena))
            });
            if barred {
                continue;
            }
            neighbours.clear();
            neighbours.extend(placed.iter().filter_map(|&j| {
                let r = ranges[j].expect("placed");
                tensors[j].overlaps(t).then_some((r.offset, r.end()))
            }));
            neighbours.sort_unstable();
            if let Some((offset, _)) = tightest_gap(&neighbours, size, align, cap) {
                best = Some((arena, offset));
                break;
            }
        }
        let (arena, offset) = match best {
            Some(at) => at,
            None => {
                // A tensor fits an empty arena (checked above).
                arenas.push(0);
                members.push(Vec::new());
                (arenas.len() - 1, 0)
            }
        };
        arenas[arena] = arenas[arena].max(offset + size);
        members[arena].push(i);
        ranges[i] = Some(Range {
            arena,
            offset,
            size,
        });
    }
    MemoryPlan {
        ranges: ranges.into_iter().map(|r| r.expect("placed")).collect(),
        arenas,
    }
}

/// One dispatch of the traced step: the tensors (indices into the step's
/// lifetimes) it bound read-only, and those it bound writable.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Access {
    pub reads: Vec<u32>,
    pub writes: Vec<u32>,
}

/// Each tensor's rivals: the tensors some dispatch binds read-only while it binds
/// this one writable, or the other way round. Indices past `tensors` (tensors the
/// plan does not place) are left out.
pub fn rivals(tensors: usize, dispatches: &[Access]) -> Vec<Vec<u32>> {
    let mut rivals: Vec<Vec<u32>> = vec![Vec::new(); tensors];
    let known = |t: &&u32| (**t as usize) < tensors;
    for d in dispatches {
        for &r in d.reads.iter().filter(known) {
            for &w in d.writes.iter().filter(known).filter(|&&w| w != r) {
                for (a, b) in [(r, w), (w, r)] {
                    if !rivals[a as usize].contains(&b) {
                        rivals[a as usize].push(b);
                    }
                }
            }
        }
    }
    rivals
}

/// Most colours [`colour`] gives: each is a set of arenas of its own.
pub const MAX_COLOURS: usize = 4;

/// Tensors times events past which [`plan_step`] does not try colouring: each of
/// its balancing passes weighs every tensor against every event in each colour
/// (a shakespeare step: about 400 x 800).
pub const COLOUR_WORK: u64 = 1 << 24;

/// Most passes of [`colour`]'s balancing: a pass that moves nothing ends it.
pub const COLOUR_PASSES: usize = 8;

/// A colour for each tensor, none shared with a rival wherever [`MAX_COLOURS`]
/// allow, balanced so that the colours, each planned apart, hold little more
/// than the step's peak.
///
/// First fit in birth order (index order): each tensor takes a colour none of its
/// coloured rivals holds (else the one fewest hold), of those the one most of its
/// allies hold (tensors read together, or written together, with it: sharing
/// costs them nothing and leaves the other colours free for their rivals), else
/// the lowest. Then passes over
/// the tensors, largest first, move one to another colour without a rival of it
/// where that lowers the sum of the colours' peaks: colours that peak at
/// different times (one before the backward pass, one in it) hold more than the
/// step's peak, since each is planned apart. O(events) a candidate move.
pub fn colour(step: &[Lifetime], rivals: &[Vec<u32>], allies: &[Vec<u32>]) -> Vec<usize> {
    // A lifetime's events (none where a hostile one ends before it begins).
    let span = |t: &Lifetime| t.birth as usize..(t.death as usize).max(t.birth as usize);
    const UNSET: usize = usize::MAX;
    let mut colours = vec![UNSET; step.len()];
    let count = |list: &[u32], colours: &[usize]| {
        let mut held = [0usize; MAX_COLOURS];
        for &o in list {
            if let Some(n) = held.get_mut(colours[o as usize]) {
                *n += 1;
            }
        }
        held
    };
    for t in 0..step.len() {
        let rival = count(&rivals[t], &colours);
        let ally = count(allies.get(t).map_or(&[][..], Vec::as_slice), &colours);
        colours[t] = (0..MAX_COLOURS)
            .min_by_key(|&c| (rival[c], std::cmp::Reverse(ally[c]), c))
            .expect("colours");
    }
    let events = step
        .iter()
        .map(|t| t.death.max(t.birth) as usize)
        .max()
        .unwrap_or(0);
    // live[c][e]: bytes of colour c live at event e.
    let mut live = vec![vec![0u64; events]; MAX_COLOURS];
    for (t, &c) in step.iter().zip(&colours) {
        for bytes in &mut live[c][span(t)] {
            *bytes += t.bound_bytes();
        }
    }
    let peak_with = |profile: &[u64], span: &std::ops::Range<usize>, add: u64, sub: u64| {
        let mut most = 0;
        for (e, &b) in profile.iter().enumerate() {
            most = most.max(if span.contains(&e) { b + add - sub } else { b });
        }
        most
    };
    let mut order: Vec<usize> = (0..step.len()).collect();
    order.sort_unstable_by_key(|&i| (std::cmp::Reverse(step[i].bound_bytes()), i));
    for _ in 0..COLOUR_PASSES {
        let mut moved = false;
        for &t in &order {
            let from = colours[t];
            let span = span(&step[t]);
            let size = step[t].bound_bytes();
            let rival_in = |c: usize| rivals[t].iter().any(|&r| colours[r as usize] == c);
            let conflicts_now = rival_in(from);
            let from_now = peak_with(&live[from], &span, 0, 0);
            let from_after = peak_with(&live[from], &span, 0, size);
            let mut best: Option<(usize, u64)> = None;
            for to in (0..MAX_COLOURS).filter(|&c| c != from) {
                if rival_in(to) && !conflicts_now {
                    continue;
                }
                let to_now = peak_with(&live[to], &span, 0, 0);
                let to_after = peak_with(&live[to], &span, size, 0);
                let gain = (from_now + to_now).saturating_sub(from_after + to_after);
                let repairs = conflicts_now && !rival_in(to);
                if (gain > 0 || repairs) && best.is_none_or(|(_, g)| gain > g) {
                    best = Some((to, gain));
                }
            }
            if let Some((to, _)) = best {
                for e in span {
                    live[from][e] -= size;
                    live[to][e] += size;
                }
                colours[t] = to;
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
    colours
}

/// [`plan`] for each colour's tensors apart (`colours[i]` is tensor i's), their
/// arenas one after another in colour order: no arena holds two colours.
pub fn plan_coloured(
    tensors: &[Lifetime],
    colours: &[usize],
    limits: Limits,
) -> Result<MemoryPlan, String> {
    if colours.len() != tensors.len() || colours.iter().any(|&c| c >= MAX_COLOURS) {
        return Err(format!(
            "{} colours (each under {MAX_COLOURS}) for {} tensors",
            colours.len(),
            tensors.len()
        ));
    }
    let mut ranges = vec![
        Range {
            arena: 0,
            offset: 0,
            size: 0
        };
        tensors.len()
    ];
    let mut arenas = Vec::new();
    for c in 0..MAX_COLOURS {
        let members: Vec<usize> = (0..tensors.len()).filter(|&i| colours[i] == c).collect();
        if members.is_empty() {
            continue;
        }
        let subset: Vec<Lifetime> = members.iter().map(|&i| tensors[i]).collect();
        let part = plan(&subset, limits)?;
        for (&i, r) in members.iter().zip(part.ranges) {
            ranges[i] = Range {
                arena: r.arena + arenas.len(),
                ..r
            };
        }
        arenas.extend(part.arenas);
    }
    Ok(MemoryPlan { ranges, arenas })
}

/// Each tensor's allies: the tensors some dispatch reads, or writes, with it.
pub fn allies(tensors: usize, dispatches: &[Access]) -> Vec<Vec<u32>> {
    let mut allies: Vec<Vec<u32>> = vec![Vec::new(); tensors];
    let known = |t: &&u32| (**t as usize) < tensors;
    for d in dispatches {
        for set in [&d.reads, &d.writes] {
            for &a in set.iter().filter(known) {
                for &b in set.iter().filter(known).filter(|&&b| b != a) {
                    if !allies[a as usize].contains(&b) {
                        allies[a as usize].push(b);
                    }
                }
            }
        }
    }
    allies
}

/// How many of `dispatches` read a tensor in an arena they write a tensor in.
pub fn dispatches_reading_their_arena(plan: &MemoryPlan, dispatches: &[Access]) -> usize {
    let arena = |t: u32| plan.ranges.get(t as usize).map(|r| r.arena);
    dispatches
        .iter()
        .filter(|d| {
            d.reads.iter().filter_map(|&r| arena(r)).any(|a| {
                d.writes
                    .iter()
                    .filter(|&&w| !d.reads.contains(&w))
                    .filter_map(|&w| arena(w))
                    .any(|b| a == b)
            })
        })
        .count()
}

/// Where a tensor of `size` bytes goes among `neighbours` (ranges sorted by start):
/// the aligned start of the tightest gap between them that holds it, with the
/// bytes it leaves free there; else on top of them (no slack: `None`) if that ends
/// at most at `cap`.
///
/// The room above the top is no gap: taking it grows the arena. Were it a
/// candidate beside the gaps, then where the cap sits just above the step's peak
/// (2 GiB against a 2.07 GB step on an H200) it would often be the tightest one,
/// and tensors that fit a gap below would pile on top instead.
fn tightest_gap(
    neighbours: &[(u64, u64)],
    size: u64,
    align: u64,
    cap: u64,
) -> Option<(u64, Option<u64>)> {
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
    best.map(|(gap, offset)| (offset, Some(gap - size)))
        .or_else(|| (on_top <= cap && cap - on_top >= size).then_some((on_top, None)))
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

    fn d(reads: &[u32], writes: &[u32]) -> Access {
        Access {
            reads: reads.to_vec(),
            writes: writes.to_vec(),
        }
    }

    #[test]
    fn rivals_never_share_an_arena_and_others_do() {
        // 0 -> 1 -> 2 in a chain, then 3 = 0 + 2, then 0 rewritten from 3 (an
        // in-place update); 4 lives after all of them and rivals none.
        let steps = [
            d(&[0], &[1]),
            d(&[1], &[2]),
            d(&[0, 2], &[3]),
            d(&[3], &[0]),
        ];
        let tensors = [
            t(1000, 0, 6),
            t(700, 1, 3),
            t(600, 2, 4),
            t(500, 3, 6),
            t(2000, 6, 8),
        ];
        let plan = plan_apart(&tensors, &rivals(5, &steps), LIMITS).unwrap();
        assert_eq!(dispatches_reading_their_arena(&plan, &steps), 0, "{plan:?}");
        for s in &steps {
            for r in &s.reads {
                for w in &s.writes {
                    let (a, b) = (plan.ranges[*r as usize], plan.ranges[*w as usize]);
                    assert_ne!(a.arena, b.arena, "{s:?}: {plan:?}");
                }
            }
        }
        // The step's peak is 4 (2,000 bytes) alone: it takes the room the others
        // leave, in whichever arena, and nothing grows past the largest set.
        assert!(plan.reserved() <= 2048 + 1024 + 768, "{plan:?}");
        // Without rivals one arena does, as `plan` gives it.
        let one = plan_apart(&tensors, &[], LIMITS).unwrap();
        assert_eq!(plan_step(&tensors, &[], LIMITS).unwrap(), one);
        assert_eq!(one, super::plan(&tensors, LIMITS).unwrap());
        assert_eq!(one.arenas.len(), 1);
        assert_eq!(dispatches_reading_their_arena(&one, &steps), 4);
        // Here keeping rivals apart costs far more than 1%: the step takes the
        // plain plan, memory first.
        assert!(plan.reserved() > one.reserved() + one.reserved() / APART_SLACK);
        assert_eq!(plan_step(&tensors, &steps, LIMITS).unwrap(), one);
        // In a step that one tensor rivalling none dominates, the rivals' own
        // arenas cost under 1%: they are kept apart.
        let mut roomy = tensors;
        roomy[4] = t(10_000, 0, 8);
        let step = plan_step(&roomy, &steps, LIMITS).unwrap();
        assert_eq!(dispatches_reading_their_arena(&step, &steps), 0, "{step:?}");
    }

    #[test]
    fn colours_keep_rivals_apart_and_peak_together() {
        // A chain 0 -> 1 -> 2 -> 3 that first fit colours 0, 1, 0, 1; 4 and 5 are
        // born after the chain, 4 a rival of 3 and 5 of nothing.
        let steps = [d(&[0], &[1]), d(&[1], &[2]), d(&[2], &[3]), d(&[3], &[4])];
        let tensors = [
            t(400, 0, 6),
            t(400, 1, 6),
            t(400, 2, 6),
            t(400, 3, 6),
            t(256, 5, 8),
            t(1024, 6, 8),
        ];
        let r = rivals(6, &steps);
        let colours = colour(&tensors, &r, &allies(6, &steps));
        for (i, rs) in r.iter().enumerate() {
            for &j in rs {
                assert_ne!(colours[i], colours[j as usize], "{colours:?}");
            }
        }
        let plan = plan_coloured(&tensors, &colours, LIMITS).unwrap();
        assert_eq!(dispatches_reading_their_arena(&plan, &steps), 0);
        // 5 (born when the chain is dead) joins whichever colour it lowers the
        // peaks of: no colour holds more than its share of the step's peak.
        let one = super::plan(&tensors, LIMITS).unwrap();
        assert!(
            plan.reserved() <= one.reserved() + 256,
            "{plan:?} against {one:?}"
        );
        assert!(plan_coloured(&tensors, &[0; 5], LIMITS).is_err());
        assert!(plan_coloured(&tensors, &[MAX_COLOURS; 6], LIMITS).is_err());
    }

    #[test]
    fn rivals_come_from_reads_against_writes() {
        let r = rivals(4, &[d(&[0, 1], &[2]), d(&[2], &[2, 3]), d(&[0], &[9])]);
        assert_eq!(r[0], [2]);
        assert_eq!(r[1], [2]);
        assert_eq!(r[2], [0, 1, 3]);
        assert_eq!(r[3], [2]);
        // Operands only read together, or only written together, are no rivals.
        assert!(rivals(3, &[d(&[0, 1, 2], &[])]).iter().all(Vec::is_empty));
    }

    #[test]
    fn the_lower_bound_counts_what_lives_together() {
        assert_eq!(lower_bound(&[t(8, 0, 2), t(8, 2, 4), t(4, 1, 3)]), 12);
        assert_eq!(lower_bound(&[t(1, 0, 1)]), 4);
        assert_eq!(lower_bound(&[]), 0);
    }
}

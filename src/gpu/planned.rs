//! The planned policy's bookkeeping: the first step is traced on the pool, its
//! storage requests and each dispatch's read and written tensors recorded, the
//! tensors planned with rivals in different arenas ([`crate::planner`]), and each
//! later step's requests take their planned ranges of a few arenas, in request
//! order.
//!
//! Safety, in the pool's terms (rules 1 and 2 of [`crate::gpu`]): a range is handed
//! to request `i` only while no live tensor holds a byte of it (checked on every
//! request, so a step that frees in another order than the traced one falls back to
//! the pool instead of sharing bytes), and it is written by work recorded after the
//! last host handle of its previous tensor dropped: the one queue orders the rest,
//! as it does for a recycled buffer. Zeroed requests and uploads never come here.
//! A tensor that outlived the traced step is never planned: the next step would
//! write over it.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use rustc_hash::FxHashMap;

use crate::planner::{self, Access, Lifetime, Limits, MemoryPlan, Range};

/// What became of a storage request, and what its `PooledBuffer` reports on drop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tag {
    /// Served by the pool, nothing to report.
    Pooled,
    /// Served by the pool during a traced step: request `index` of trace `trace`.
    Traced { trace: u32, index: u32 },
    /// Request `index` of plan `plan`, at its planned range.
    Planned { plan: u32, index: u32 },
}

/// Where a storage request goes.
pub(crate) enum Decision {
    Pool(Tag),
    /// Request `index` of the active plan: its range in arena buffer `arena`.
    Range {
        arena: wgpu::Buffer,
        range: Range,
        tag: Tag,
    },
}

/// What a request was, for the counters: foreseen or not, inside a step or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Foresight {
    /// Served as planned (or traced, or never plannable by rule).
    Foreseen,
    /// Inside a planned step, not as the plan said: the next step is traced again.
    Miss,
    /// Outside any step (evaluation, sampling, a step's readback gatherer).
    Outside,
}

/// A plan in use, or one whose ranges are still live after a newer one replaced it.
struct Active {
    id: u32,
    plan: MemoryPlan,
    /// Each traced request's size, and whether it is planned (`false`: it outlived
    /// the traced step, so the pool serves it).
    sizes: Vec<(u64, bool)>,
    /// Plan index of each traced request (meaningful where planned).
    slot: Vec<usize>,
    arenas: Vec<wgpu::Buffer>,
    live: Vec<bool>,
    live_count: usize,
}

impl Active {
    fn free(&self, range: &Range) -> bool {
        // Live tensors are few next to a step's requests; a scan is cheap.
        self.live_count == 0
            || self
                .live
                .iter()
                .zip(&self.plan.ranges)
                .all(|(&live, r)| !live || !r.overlaps(range))
    }
}

#[derive(Default)]
struct State {
    in_step: bool,
    cursor: usize,
    /// The step being traced: each request's size, birth and death (event positions).
    trace: Option<Vec<(u64, u32, Option<u32>)>>,
    /// The traced step's live tensors by buffer (the pool's: one tensor a buffer).
    traced_buffers: FxHashMap<wgpu::Buffer, u32>,
    /// The traced step's dispatches: the requests each read and wrote.
    accesses: Vec<Access>,
    trace_id: u32,
    clock: u32,
    active: Option<Active>,
    draining: Vec<Active>,
    /// The last step was not the plan's: trace the next one.
    stale: bool,
    plans_made: u32,
    /// Why planning stopped for this context (a step the device cannot plan).
    refused: Option<String>,
}

/// The planned policy of one context: see the module docs.
pub(crate) struct StepPlans {
    limits: Limits,
    /// Keep rivals in different arenas ([`planner::plan_step`]); `false`: plan as
    /// if none were, for contexts that bind every dispatch `read_write`.
    apart: bool,
    /// A step is being traced: dispatches report what they bind.
    tracing: AtomicBool,
    state: std::sync::Mutex<State>,
}

impl StepPlans {
    pub fn new(limits: Limits, apart: bool) -> Self {
        StepPlans {
            limits,
            apart,
            tracing: AtomicBool::new(false),
            state: Default::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        super::lock(&self.state)
    }

    /// A training step begins: traced when there is no plan for it yet, or the
    /// last step was not the plan's.
    pub fn begin_step(&self) -> Vec<wgpu::Buffer> {
        let mut s = self.state();
        s.in_step = true;
        s.cursor = 0;
        if s.refused.is_some() {
            return Vec::new();
        }
        let unsafe_to_reuse = s.active.as_ref().is_some_and(|a| a.live_count > 0);
        if s.active.is_some() && !s.stale && !unsafe_to_reuse {
            return Vec::new();
        }
        s.stale = false;
        s.trace = Some(Vec::new());
        s.traced_buffers.clear();
        s.accesses.clear();
        self.tracing.store(self.apart, Relaxed);
        s.trace_id += 1;
        s.clock = 0;
        let mut retired = Vec::new();
        if let Some(old) = s.active.take() {
            if old.live_count == 0 {
                retired = old.arenas;
            } else {
                s.draining.push(old);
            }
        }
        retired
    }

    /// Where a storage request of `size` bytes goes.
    pub fn request(&self, size: u64) -> (Decision, Foresight) {
        let mut s = self.state();
        if !s.in_step {
            let outside = if s.active.is_some() {
                Foresight::Outside
            } else {
                Foresight::Foreseen
            };
            return (Decision::Pool(Tag::Pooled), outside);
        }
        let (trace_id, clock) = (s.trace_id, s.clock);
        if let Some(trace) = s.trace.as_mut() {
            let index = trace.len() as u32;
            trace.push((size, clock, None));
            s.clock += 1;
            let tag = Tag::Traced {
                trace: trace_id,
                index,
            };
            return (Decision::Pool(tag), Foresight::Foreseen);
        }
        let i = s.cursor;
        s.cursor += 1;
        let Some(active) = s.active.as_mut() else {
            return (Decision::Pool(Tag::Pooled), Foresight::Foreseen);
        };
        match active.sizes.get(i) {
            Some(&(planned, true)) if planned == size => {
                let index = active.slot[i];
                let range = active.plan.ranges[index];
                if active.free(&range) {
                    active.live[index] = true;
                    active.live_count += 1;
                    let tag = Tag::Planned {
                        plan: active.id,
                        index: index as u32,
                    };
                    let arena = active.arenas[range.arena].clone();
                    return (Decision::Range { arena, range, tag }, Foresight::Foreseen);
                }
            }
            Some(&(planned, false)) if planned == size => {
                return (Decision::Pool(Tag::Pooled), Foresight::Foreseen);
            }
            _ => {}
        }
        s.stale = true;
        (Decision::Pool(Tag::Pooled), Foresight::Miss)
    }

    /// The pool gave `buffer` to a request tagged `tag`: a traced one is looked up
    /// by its buffer when dispatches bind it.
    pub fn traced_at(&self, tag: Tag, buffer: &wgpu::Buffer) {
        if let Tag::Traced { trace, index } = tag {
            let mut s = self.state();
            if trace == s.trace_id && s.trace.is_some() && self.apart {
                s.traced_buffers.insert(buffer.clone(), index);
            }
        }
    }

    /// A dispatch of the traced step binds `bound`: each buffer and whether the
    /// binding is writable. Cheap when no step is traced (one relaxed load).
    pub fn dispatched<'a>(&self, bound: impl Iterator<Item = (&'a wgpu::Buffer, bool)>) {
        if !self.tracing.load(Relaxed) {
            return;
        }
        let mut s = self.state();
        let mut access = Access::default();
        for (buffer, writable) in bound {
            if let Some(&index) = s.traced_buffers.get(buffer) {
                let set = if writable {
                    &mut access.writes
                } else {
                    &mut access.reads
                };
                if !set.contains(&index) {
                    set.push(index);
                }
            }
        }
        if !access.reads.is_empty() && !access.writes.is_empty() {
            s.accesses.push(access);
        }
    }

    /// A tensor at `buffer` died; returns arenas that no tensor uses any more.
    pub fn release(&self, tag: Tag, buffer: &wgpu::Buffer) -> Vec<wgpu::Buffer> {
        let mut s = self.state();
        match tag {
            Tag::Pooled => Vec::new(),
            Tag::Traced { trace, index } => {
                let clock = s.clock;
                if s.traced_buffers.get(buffer) == Some(&index) {
                    s.traced_buffers.remove(buffer);
                }
                if trace == s.trace_id {
                    if let Some(entry) = s.trace.as_mut().and_then(|t| t.get_mut(index as usize)) {
                        entry.2 = Some(clock);
                        s.clock += 1;
                    }
                }
                Vec::new()
            }
            Tag::Planned { plan, index } => {
                let State {
                    active, draining, ..
                } = &mut *s;
                let owner = active
                    .iter_mut()
                    .chain(draining.iter_mut())
                    .find(|a| a.id == plan);
                if let Some(a) = owner {
                    a.live[index as usize] = false;
                    a.live_count -= 1;
                }
                let (done, kept) = std::mem::take(draining)
                    .into_iter()
                    .partition::<Vec<_>, _>(|a| a.live_count == 0);
                *draining = kept;
                done.into_iter().flat_map(|a| a.arenas).collect()
            }
        }
    }

    /// The step ended: a traced one is planned, and the sizes of the arenas to make
    /// (then [`StepPlans::install`]ed) returned; a planned one that went another
    /// way is traced again next time.
    pub fn end_step(&self) -> Vec<u64> {
        let mut s = self.state();
        s.in_step = false;
        if let Some(a) = &s.active {
            if s.cursor != a.sizes.len() {
                s.stale = true;
            }
        }
        let Some(trace) = s.trace.take() else {
            return Vec::new();
        };
        self.tracing.store(false, Relaxed);
        s.traced_buffers.clear();
        let accesses = std::mem::take(&mut s.accesses);
        let planned: Vec<Lifetime> = trace
            .iter()
            .filter_map(|&(size, birth, death)| death.map(|death| Lifetime { size, birth, death }))
            .collect();
        // Plan index of each traced request (meaningful where it died in the step).
        let mut slot = Vec::with_capacity(trace.len());
        let mut next = 0;
        for &(_, _, death) in &trace {
            slot.push(next);
            next += usize::from(death.is_some());
        }
        let to_plan = |set: &[u32]| -> Vec<u32> {
            set.iter()
                .filter(|&&i| trace.get(i as usize).is_some_and(|t| t.2.is_some()))
                .map(|&i| slot[i as usize] as u32)
                .collect()
        };
        let accesses: Vec<Access> = accesses
            .iter()
            .map(|a| Access {
                reads: to_plan(&a.reads),
                writes: to_plan(&a.writes),
            })
            .collect();
        let accesses: &[Access] = if self.apart { &accesses } else { &[] };
        match planner::plan_step(&planned, accesses, self.limits) {
            Ok(plan) => {
                s.plans_made += 1;
                let arenas = plan.arenas.clone();
                s.active = Some(Active {
                    id: s.plans_made,
                    live: vec![false; plan.ranges.len()],
                    live_count: 0,
                    sizes: trace
                        .iter()
                        .map(|&(size, _, d)| (size, d.is_some()))
                        .collect(),
                    slot,
                    plan,
                    arenas: Vec::new(),
                });
                arenas
            }
            Err(e) => {
                s.refused = Some(format!("the planned policy fell back to the pool: {e}"));
                Vec::new()
            }
        }
    }

    /// The arenas of the plan [`StepPlans::end_step`] made.
    pub fn install(&self, arenas: Vec<wgpu::Buffer>) {
        if let Some(a) = self.state().active.as_mut() {
            a.arenas = arenas;
        }
    }

    /// Plans made so far (1 after the first step; more when the step changed).
    pub fn plans_made(&self) -> u32 {
        self.state().plans_made
    }

    /// Why planning stopped for good, if it did.
    pub fn refused(&self) -> Option<String> {
        self.state().refused.clone()
    }

    /// The active plan (a copy; `None` before the first plan, or after a refusal)
    /// and its arena buffers (empty until installed).
    pub fn plan(&self) -> Option<(MemoryPlan, Vec<wgpu::Buffer>)> {
        let s = self.state();
        let a = s.active.as_ref()?;
        Some((a.plan.clone(), a.arenas.clone()))
    }

    /// The active plan's arenas.
    pub fn arenas(&self) -> Vec<wgpu::Buffer> {
        self.state()
            .active
            .as_ref()
            .map(|a| a.arenas.clone())
            .unwrap_or_default()
    }

    /// Every arena, live or draining, to be destroyed with the context.
    pub fn drain(&self) -> Vec<wgpu::Buffer> {
        let mut s = self.state();
        let mut out: Vec<wgpu::Buffer> = s.active.take().map(|a| a.arenas).unwrap_or_default();
        for a in std::mem::take(&mut s.draining) {
            out.extend(a.arenas);
        }
        out
    }
}

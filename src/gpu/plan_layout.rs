//! The planned policy's active plan as the allocation trace names it: each arena's
//! trace buffer id and size, each planned tensor's range, for views that set the
//! trace beside the plan (the page's arena timeline, `Trainer.memoryPlan()`).
//! Read-only: a copy taken under the plans' lock.

use super::context::WgpuContext;
use super::memory::MemoryManager;

/// One arena of a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ArenaLayout {
    /// The arena's buffer id in the allocation trace (`TraceEvent::buffer`); 0
    /// while the arena is not made yet.
    pub buffer: u64,
    pub bytes: u64,
}

/// Where one planned tensor lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RangeLayout {
    /// Index into [`PlanLayout::arenas`].
    pub arena: u32,
    pub offset: u64,
    /// Bytes bound: the request rounded up to whole 4-byte words.
    pub size: u64,
}

/// The plan a planned step follows.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PlanLayout {
    pub arenas: Vec<ArenaLayout>,
    /// Each planned tensor, in the order the traced step asked for them (a planned
    /// step's births at arena ranges come in this order).
    pub ranges: Vec<RangeLayout>,
    /// Bytes the arenas take together.
    pub reserved: u64,
    /// Plans made so far (a new one each time the step changed).
    pub plans_made: u32,
}

impl MemoryManager {
    /// The active plan, `None` under the other policies and before the first plan.
    pub fn plan_layout(&self) -> Option<PlanLayout> {
        let plans = self.plans.as_ref()?;
        let (plan, buffers) = plans.plan()?;
        let arenas = plan
            .arenas
            .iter()
            .enumerate()
            .map(|(i, &bytes)| ArenaLayout {
                buffer: buffers.get(i).map_or(0, |b| self.id(b)),
                bytes,
            })
            .collect();
        let ranges = plan
            .ranges
            .iter()
            .map(|r| RangeLayout {
                // Arenas are few (a step's tensors at most): their count fits.
                arena: u32::try_from(r.arena).unwrap_or(u32::MAX),
                offset: r.offset,
                size: r.size,
            })
            .collect();
        Some(PlanLayout {
            arenas,
            ranges,
            reserved: plan.reserved(),
            plans_made: plans.plans_made(),
        })
    }
}

impl WgpuContext {
    /// The planned policy's active plan, its arenas named as the allocation trace
    /// names them; `None` under the other policies and before the first plan.
    pub fn memory_plan(&self) -> Option<PlanLayout> {
        self.memory.plan_layout()
    }
}

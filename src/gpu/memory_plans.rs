//! The memory manager's side of the planned policy: where a storage request goes
//! (a planned range of an arena, or the pool), what memory is reserved with the
//! arenas counted, and a training step's boundaries, where plans are made and
//! arenas made and retired ([`super::planned`] keeps the plans).

use std::sync::atomic::Ordering::Relaxed;

use super::memory::{MemoryManager, Purpose, Storage};
use super::planned::{Decision, Foresight, StepPlans, Tag};
use crate::trace::EventKind;

impl MemoryManager {
    /// A storage buffer for a request of `size` bytes (at least 1): its planned range
    /// where the planned policy foresaw it (`plannable`: neither zeroed nor an
    /// upload), else from the pool ([`MemoryManager::pooled_storage`]).
    pub fn storage(&self, size: usize, plannable: bool) -> Storage {
        let plans = self.plans.as_ref().filter(|_| plannable);
        let (decision, foresight) = match plans {
            Some(plans) => plans.request(size as u64),
            None => (Decision::Pool(Tag::Pooled), Foresight::Foreseen),
        };
        let c = &self.counters;
        match foresight {
            Foresight::Foreseen => {}
            Foresight::Miss => _ = c.plan_misses.fetch_add(1, Relaxed),
            Foresight::Outside => _ = c.plan_outside.fetch_add(1, Relaxed),
        }
        match decision {
            Decision::Range { arena, range, tag } => {
                c.plan_hits.fetch_add(1, Relaxed);
                c.planned_bytes_in_use.fetch_add(range.size, Relaxed);
                let (req, cls) = (size as u64, range.size);
                self.event_in_arena(EventKind::Hit, (req, cls), (&arena, range.offset), cls);
                Storage {
                    buffer: arena,
                    offset: range.offset,
                    class: range.size as usize,
                    tag,
                }
            }
            Decision::Pool(tag) => {
                let (buffer, class) = self.pooled_storage(size);
                if let Some(plans) = plans {
                    plans.traced_at(tag, &buffer);
                }
                Storage {
                    buffer,
                    offset: 0,
                    class,
                    tag,
                }
            }
        }
    }

    /// GPU memory taken now: pooled buffers in use and held free, and the arenas.
    pub fn reserved_now(&self, adding: u64) -> u64 {
        let c = &self.counters;
        let pooled_in_use = c.bytes_in_use.load(Relaxed)
            - c.planned_bytes_in_use
                .load(Relaxed)
                .min(c.bytes_in_use.load(Relaxed));
        pooled_in_use + adding + self.pool.bytes_held() + c.arena_bytes.load(Relaxed)
    }

    /// A training step begins (the planned policy traces or follows its plan).
    pub fn begin_step(&self) {
        if let Some(plans) = &self.plans {
            let retired = plans.begin_step();
            self.retire_arenas(retired);
        }
    }

    /// A training step ended: a traced step's plan gets its arenas. The pool's free
    /// buffers, which served the traced step, go first, so that the arenas take
    /// their place instead of coming on top; the peaks start over from there.
    pub fn end_step(&self) {
        let Some(plans) = self.plans.as_ref() else {
            return;
        };
        let arenas = plans.end_step();
        if !arenas.is_empty() {
            self.clear_pool();
            let made: Vec<wgpu::Buffer> = arenas
                .iter()
                .map(|&bytes| {
                    self.counters.arena_bytes.fetch_add(bytes, Relaxed);
                    self.create(bytes, Purpose::Storage)
                })
                .collect();
            // The traced step was a warm-up on the pool: the peaks start over, so that
            // they (and a run's final figures) measure the planned steps.
            self.counters.reset_peaks(self.reserved_now(0));
            plans.install(made);
        }
    }

    /// The active plan's arenas (none under the other policies).
    pub fn arenas(&self) -> Vec<wgpu::Buffer> {
        self.plans
            .as_ref()
            .map(StepPlans::arenas)
            .unwrap_or_default()
    }

    pub fn plan_refused(&self) -> Option<String> {
        self.plans.as_ref().and_then(StepPlans::refused)
    }

    pub(super) fn retire_arenas(&self, arenas: Vec<wgpu::Buffer>) {
        for arena in arenas {
            self.counters.arena_bytes.fetch_sub(arena.size(), Relaxed);
            self.retire(arena, Purpose::Storage, false);
        }
    }

    /// A dispatch binds `bound` (buffer, writable): the planned policy's traced
    /// step records what each dispatch reads and writes.
    pub fn dispatched<'a>(&self, bound: impl Iterator<Item = (&'a wgpu::Buffer, bool)>) {
        if let Some(plans) = &self.plans {
            plans.dispatched(bound);
        }
    }

    /// Plans made so far (0 unless the policy is `planned`).
    pub fn plans_made(&self) -> u32 {
        self.plans.as_ref().map_or(0, StepPlans::plans_made)
    }
}

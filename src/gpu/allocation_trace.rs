//! The context's side of the allocation trace ([`crate::trace`]): starting and
//! stopping it, and naming what the coming allocations belong to.

use super::context::WgpuContext;
use crate::trace::{StepTrace, Trace};

impl WgpuContext {
    /// Starts recording every allocation event (off by default; see [`crate::trace`]).
    /// Returns where the pool stands now, for [`WgpuContext::finish_trace`].
    pub fn start_trace(&self) -> StepTrace {
        let pool = self.pool_stats();
        let start = StepTrace {
            in_use_at_start: self.counters().bytes_in_use,
            held_at_start: pool.bytes_held,
            free_at_start: pool.buckets,
            ..Default::default()
        };
        let memory = &self.memory;
        memory.counters.start_traced_peak(memory.reserved_now(0));
        memory.trace.start();
        start
    }

    /// Stops recording; `start` (from [`WgpuContext::start_trace`]) gets the events,
    /// the step number and a label.
    pub fn finish_trace(&self, start: StepTrace, step: u32, label: &str) -> StepTrace {
        StepTrace {
            step,
            label: label.into(),
            events: self.memory.trace.stop(),
            peak_reserved: Some(self.memory.counters.traced_peak_reserved()),
            ..start
        }
    }

    /// Whether allocation events are being recorded.
    pub fn tracing(&self) -> bool {
        self.memory.trace.on()
    }

    /// The transformer block that the coming allocations belong to (`None`: outside
    /// the blocks), for the trace. One relaxed store: call it freely.
    pub fn set_trace_layer(&self, layer: Option<usize>) {
        self.memory
            .trace
            .set_layer(layer.map(|l| l.min(u32::MAX as usize - 1) as u32));
    }

    /// Runs `make`, whose buffers the allocation trace gives to `op` (made outside a
    /// kernel launcher, they would go to the next kernel dispatched).
    pub fn allocating_as<R>(&self, op: &'static str, make: impl FnOnce() -> R) -> R {
        if !self.memory.trace.on() {
            return make();
        }
        let mark = self.memory.trace.mark();
        let made = make();
        self.memory.trace.name_births_since(mark, op);
        made
    }

    /// An empty trace file for this context's adapter and pool.
    pub fn new_trace(&self) -> Trace {
        let config = self.pool().config();
        let mut trace = Trace::new(
            self.adapter_name(),
            &config.policy.label(),
            config.max_buffer_size as u64,
        );
        trace.fit_ratio = config.fit_ratio;
        trace
    }
}

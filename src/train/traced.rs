//! A training step with the allocation trace on ([`crate::trace`]).

use super::stats::StepStats;
use super::trainer::Trainer;
use crate::error::Result;
use crate::trace::StepTrace;

impl Trainer {
    /// One training step with the allocation trace on; `label` names it in the trace
    /// (`first`, `steady`).
    pub async fn step_traced(&mut self, label: &str) -> Result<(StepStats, StepTrace)> {
        let start = self.ctx.start_trace();
        let result = self.step().await;
        let trace = self.ctx.finish_trace(start, self.steps_done(), label);
        Ok((result?, trace))
    }
}

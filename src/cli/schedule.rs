//! How `tidepool train` groups steps into calls of [`Trainer::start_steps`]: several
//! steps a call (the GPU goes on to the next while the host records), each call
//! ending where an evaluation or a save is due so that it follows its own step, and
//! the next call started before the last one's figures are back where steps are
//! fast and nothing is due at its end. Traced steps are the caller's: they go one
//! call at a time.
//!
//! [`Trainer::start_steps`]: tidepool::train::Trainer::start_steps

/// Most steps one call records before reading their losses: on the page's presets
/// a call takes a few ms on a large GPU.
const STEPS_A_CALL: u32 = 16;

/// Calls overlap where the last call's steps took less than this (ms a step): the
/// page's worker rule (www/worker-schedule.mjs, batchMs / 2). On a CPU adapter the
/// host's recording would take the kernels' CPU.
const OVERLAP_BELOW_MS: f64 = 8.0;

/// A run's calls: `steps` in all, evaluations every `eval_every` steps and saves
/// every `save_every` (0: never).
pub struct CallSchedule {
    pub steps: u32,
    pub eval_every: u32,
    pub save_every: u32,
}

impl CallSchedule {
    /// Steps in the call that starts after step `done`.
    pub fn steps_after(&self, done: u32) -> u32 {
        STEPS_A_CALL
            .min(self.steps - done)
            .min(to_next(done, self.eval_every))
            .min(to_next(done, self.save_every))
    }

    /// A save is due after step `end`.
    pub fn save_due(&self, end: u32) -> bool {
        self.save_every > 0 && end.is_multiple_of(self.save_every)
    }

    /// The call after the one ending at `end` may start before that one's figures
    /// are back: steps take under [`OVERLAP_BELOW_MS`] (`ms_a_step`, the last
    /// known), the run goes on, and nothing is due at `end` (`evaluates`: the call
    /// evaluates at its end).
    pub fn overlaps(&self, end: u32, ms_a_step: f64, evaluates: bool) -> bool {
        ms_a_step < OVERLAP_BELOW_MS && end < self.steps && !evaluates && !self.save_due(end)
    }
}

/// Steps from `done` to the next multiple of `every` (that step included);
/// `u32::MAX` when `every` is 0 (never).
fn to_next(done: u32, every: u32) -> u32 {
    if every == 0 {
        u32::MAX
    } else {
        every - done % every
    }
}

#[cfg(test)]
mod tests {
    use super::CallSchedule;

    #[test]
    fn calls_end_at_evaluations_saves_and_the_run_end() {
        let s = CallSchedule {
            steps: 23,
            eval_every: 6,
            save_every: 10,
        };
        let mut ends = Vec::new();
        let mut done = 0;
        while done < s.steps {
            done += s.steps_after(done);
            ends.push(done);
        }
        assert_eq!(ends, [6, 10, 12, 18, 20, 23]);
        assert!(s.save_due(20) && !s.save_due(23));
        assert!(s.overlaps(12, 1.0, false));
        assert!(!s.overlaps(12, 1.0, true), "an evaluation is due");
        assert!(!s.overlaps(10, 1.0, false), "a save is due");
        assert!(!s.overlaps(12, 9.0, false), "steps are slow");
        assert!(!s.overlaps(23, 1.0, false), "the run ends");
    }
}

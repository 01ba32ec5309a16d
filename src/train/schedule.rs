//! [`Schedule`]: how a run's training is cut into calls of [`Trainer::start_steps`]
//! (how many steps the next call takes, whether it may start before the last one's
//! figures are back). Pure arithmetic, no GPU: the CLI's train loop and the page's
//! worker (through the wasm API) both follow it.
//!
//! [`Trainer::start_steps`]: super::Trainer::start_steps

use super::steps::{DEFAULT_MAX_AT_ONCE, MAX_STEPS_AT_ONCE};
use crate::error::{Error, Result};

/// The CLI's overlap: calls overlap where a step takes at most this many ms, the
/// page worker's rule at its call budget of 16 ms. On a CPU adapter steps are slower,
/// and a call recorded while another runs would take the kernels' CPU.
pub const CLI_OVERLAP_MS: f64 = 8.0;

/// How a run's steps are cut into calls. A call records its steps back to back and
/// reads their figures once; the next call may start while one is in flight (two at
/// most, [`super::MAX_STEPS_IN_FLIGHT`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Schedule {
    /// Milliseconds of training a call may take, at most, by the last measured time
    /// a step (`f64::INFINITY`: no bound). The page's worker keeps it short: a Pause
    /// waits for the call in flight.
    pub call_ms: f64,
    /// Steps a call, at most (1 to [`MAX_STEPS_AT_ONCE`]).
    pub max_at_once: u32,
    /// Calls may overlap where a step takes at most this many ms (`None`: never).
    pub overlap_ms: Option<f64>,
    /// An evaluation is due after every multiple of this step (0: never).
    pub eval_every: u32,
    /// A save is due after every multiple of this step (0: never).
    pub save_every: u32,
    /// The step the run ends at (`None`: it goes on until stopped).
    pub end: Option<u32>,
}

impl Default for Schedule {
    /// No time bound, [`DEFAULT_MAX_AT_ONCE`] steps a call, no overlap, nothing due.
    fn default() -> Self {
        Schedule {
            call_ms: f64::INFINITY,
            max_at_once: DEFAULT_MAX_AT_ONCE,
            overlap_ms: None,
            eval_every: 0,
            save_every: 0,
            end: None,
        }
    }
}

/// Steps from `step` to the next multiple of `every` (that one included); `None`
/// when `every` is 0 (never).
fn to_next(step: u32, every: u32) -> Option<u32> {
    (every > 0).then(|| every - step % every)
}

/// Whether something done every `every` steps (0: never) is due after `step`.
fn due(step: u32, every: u32) -> bool {
    every > 0 && step.is_multiple_of(every)
}

/// A measured time a step, if it is one (positive and finite).
fn measured(ms_a_step: Option<f64>) -> Option<f64> {
    ms_a_step.filter(|ms| ms.is_finite() && *ms > 0.0)
}

impl Schedule {
    /// The CLI's: `steps` steps, evaluations and saves where due, calls of
    /// [`DEFAULT_MAX_AT_ONCE`] with no time bound, overlapping at [`CLI_OVERLAP_MS`].
    pub fn cli(steps: u32, eval_every: u32, save_every: u32) -> Self {
        Schedule {
            overlap_ms: Some(CLI_OVERLAP_MS),
            eval_every,
            save_every,
            end: Some(steps),
            ..Schedule::default()
        }
    }

    /// Errors name the field, its value and what is allowed.
    // The negated comparisons also refuse NaN.
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Config(m));
        if !(self.call_ms > 0.0) {
            return bad(format!(
                "a call's time must be positive ms (infinite: no bound), got {}",
                self.call_ms
            ));
        }
        if !(1..=MAX_STEPS_AT_ONCE).contains(&self.max_at_once) {
            return bad(format!(
                "steps a call must be 1 to {MAX_STEPS_AT_ONCE}, got {}",
                self.max_at_once
            ));
        }
        if let Some(ms) = self.overlap_ms.filter(|ms| !(*ms >= 0.0)) {
            return bad(format!(
                "the overlap's ms a step must not be negative, got {ms}"
            ));
        }
        if self.end == Some(0) {
            return bad("the run must end at step 1 or later".into());
        }
        Ok(())
    }

    /// How many steps the call starting after step `step` takes, given the last
    /// measured ms a step (`None`, or a value not positive and finite: not measured
    /// yet): as many as fit in [`Schedule::call_ms`] (one until a step is measured,
    /// unless that is unbounded), at most [`Schedule::max_at_once`], and never past
    /// a step where an evaluation or a save is due or the run ends. At least 1, but
    /// 0 from step `u32::MAX`: step numbers are u32, and no step is left to count.
    pub fn steps_from(&self, step: u32, ms_a_step: Option<f64>) -> u32 {
        let most = self.max_at_once.clamp(1, MAX_STEPS_AT_ONCE);
        let fit = if self.call_ms == f64::INFINITY {
            most
        } else {
            match measured(ms_a_step) {
                // A float past u32 saturates in the cast; NaN (no budget) gives 0.
                Some(ms) => ((self.call_ms / ms).floor() as u32).clamp(1, most),
                None => 1,
            }
        };
        let to_end = self.end.filter(|&end| end > step).map(|end| end - step);
        // Step numbers are u32: a call never counts past the last one.
        let to_last = u32::MAX - step;
        [
            to_next(step, self.eval_every),
            to_next(step, self.save_every),
            to_end,
        ]
        .into_iter()
        .flatten()
        .fold(fit, u32::min)
        .max(1)
        .min(to_last)
    }

    /// Whether, at the last measured ms a step, the next call may start before the
    /// one in flight is back (where [`Schedule::nothing_due_at`] its end).
    pub fn overlaps(&self, ms_a_step: Option<f64>) -> bool {
        match (self.overlap_ms, measured(ms_a_step)) {
            (Some(limit), Some(ms)) => ms <= limit,
            _ => false,
        }
    }

    /// Whether an evaluation is due after step `step`.
    pub fn evaluation_due_at(&self, step: u32) -> bool {
        due(step, self.eval_every)
    }

    /// Whether a save is due after step `step`.
    pub fn save_due_at(&self, step: u32) -> bool {
        due(step, self.save_every)
    }

    /// Whether nothing is due after a call ending at step `end`: no evaluation, no
    /// save, not the run's end. Only then may the next call start before it is back.
    pub fn nothing_due_at(&self, end: u32) -> bool {
        !self.evaluation_due_at(end)
            && !self.save_due_at(end)
            && self.end.is_none_or(|last| end < last)
    }
}

#[cfg(test)]
mod tests {
    use super::{Schedule, CLI_OVERLAP_MS, DEFAULT_MAX_AT_ONCE};

    /// The page worker's schedule at its defaults: 16 ms a call, 16 steps a call at
    /// most, overlapping at 8 ms a step, evaluating every 20 steps.
    fn page(end: Option<u32>) -> Schedule {
        Schedule {
            call_ms: 16.0,
            max_at_once: 16,
            overlap_ms: Some(8.0),
            eval_every: 20,
            save_every: 0,
            end,
        }
    }

    #[test]
    fn the_cli_takes_sixteen_a_call_up_to_what_is_due() {
        let s = Schedule::cli(100, 0, 0);
        assert_eq!(s.steps_from(0, None), DEFAULT_MAX_AT_ONCE);
        assert_eq!(s.steps_from(0, Some(500.0)), 16, "no time bound");
        assert_eq!(s.steps_from(90, Some(1.0)), 10, "the run's end");
        assert_eq!(s.steps_from(99, None), 1);
        let s = Schedule::cli(100, 20, 25);
        assert_eq!(s.steps_from(0, None), 16);
        assert_eq!(s.steps_from(16, None), 4, "to the evaluation at 20");
        assert_eq!(s.steps_from(20, None), 5, "to the save at 25");
        assert_eq!(s.steps_from(25, None), 15, "to the evaluation at 40");
        assert_eq!(s.steps_from(96, None), 4);
    }

    #[test]
    fn the_cli_overlaps_below_eight_ms_a_step_where_nothing_is_due() {
        let s = Schedule::cli(100, 20, 25);
        assert!(s.overlaps(Some(7.9)) && s.overlaps(Some(0.01)));
        assert!(!s.overlaps(Some(8.1)) && !s.overlaps(Some(300.0)));
        // Before a call has come back, no overlap (the CLI's first call).
        assert!(!s.overlaps(None) && !s.overlaps(Some(f64::INFINITY)));
        assert_eq!(CLI_OVERLAP_MS, 8.0);
        assert!(s.nothing_due_at(16) && s.nothing_due_at(99));
        assert!(!s.nothing_due_at(20), "an evaluation");
        assert!(!s.nothing_due_at(25), "a save");
        assert!(!s.nothing_due_at(100) && !s.nothing_due_at(101), "the end");
        assert!(Schedule::cli(100, 0, 0).nothing_due_at(20));
        assert!(s.evaluation_due_at(40) && !s.evaluation_due_at(25));
        assert!(s.save_due_at(25) && s.save_due_at(50) && !s.save_due_at(20));
        assert!(!Schedule::cli(100, 0, 0).save_due_at(0), "0: never");
    }

    /// The CLI's calls on a run of 23 steps evaluating every 6 and saving every 10.
    #[test]
    fn the_cli_ends_calls_at_evaluations_saves_and_the_run_end() {
        let s = Schedule::cli(23, 6, 10);
        let mut ends = Vec::new();
        let mut done = 0;
        while done < 23 {
            done += s.steps_from(done, None);
            ends.push(done);
        }
        assert_eq!(ends, [6, 10, 12, 18, 20, 23]);
    }

    #[test]
    fn the_worker_takes_what_fits_its_call_budget() {
        let s = page(None);
        assert_eq!(s.steps_from(0, None), 1, "one until a step is measured");
        assert_eq!(s.steps_from(0, Some(0.0)), 1, "0 ms: not measured");
        assert_eq!(s.steps_from(0, Some(2.0)), 8);
        assert_eq!(s.steps_from(0, Some(5.0)), 3, "3.2 fit");
        assert_eq!(s.steps_from(0, Some(0.5)), 16, "at most maxAtOnce");
        assert_eq!(s.steps_from(0, Some(1e-300)), 16);
        assert_eq!(s.steps_from(0, Some(40.0)), 1, "a slow step alone");
        assert_eq!(s.steps_from(18, Some(1.0)), 2, "to the evaluation at 20");
        assert_eq!(s.steps_from(u32::MAX - 1, Some(1.0)), 1);
        assert_eq!(s.steps_from(u32::MAX, Some(1.0)), 0, "the counter is full");
        assert_eq!(Schedule::default().steps_from(u32::MAX - 3, None), 3);
        let s = page(Some(30));
        assert_eq!(s.steps_from(28, Some(1.0)), 2, "to the run's end");
        assert_eq!(
            s.steps_from(30, Some(1.0)),
            10,
            "past the end, unbounded by it"
        );
    }

    #[test]
    fn the_worker_overlaps_at_half_its_call_budget() {
        let s = page(Some(100));
        assert!(s.overlaps(Some(8.0)), "batchMs / msPerStep >= 2");
        assert!(s.overlaps(Some(1.0)));
        assert!(!s.overlaps(Some(8.01)));
        assert!(!s.overlaps(None) && !s.overlaps(Some(0.0)) && !s.overlaps(Some(f64::NAN)));
        assert!(
            !Schedule {
                overlap_ms: None,
                ..s
            }
            .overlaps(Some(1.0)),
            "overlap off"
        );
        assert!(!s.nothing_due_at(40) && !s.nothing_due_at(100));
        assert!(s.nothing_due_at(41));
        assert!(page(None).nothing_due_at(1_000_001), "no end");
    }

    /// Over a grid of schedules and steps: at least one step, at most the most a
    /// call, and no step due strictly inside a call.
    #[test]
    fn a_call_never_passes_a_due_step() {
        for call_ms in [f64::INFINITY, 16.0, 1.0] {
            for max_at_once in [1, 7, 16, 1024] {
                for (eval_every, save_every, end) in [
                    (0, 0, None),
                    (3, 0, Some(50)),
                    (20, 25, Some(97)),
                    (1, 1, None),
                ] {
                    let s = Schedule {
                        call_ms,
                        max_at_once,
                        overlap_ms: Some(8.0),
                        eval_every,
                        save_every,
                        end,
                    };
                    s.validate().unwrap();
                    // Steps of the run: past its end, its end is behind every call.
                    for step in 0..end.unwrap_or(120) {
                        for ms in [None, Some(0.1), Some(3.0), Some(100.0)] {
                            let n = s.steps_from(step, ms);
                            assert!((1..=max_at_once).contains(&n), "{s:?} {step} {ms:?}: {n}");
                            for inside in step + 1..step + n {
                                assert!(
                                    s.nothing_due_at(inside),
                                    "{s:?} {step}: {n} passes {inside}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn bad_schedules_are_refused_naming_the_field() {
        let ok = Schedule::default();
        for (bad, want) in [
            (
                Schedule {
                    call_ms: f64::NAN,
                    ..ok
                },
                "a call's time",
            ),
            (Schedule { call_ms: 0.0, ..ok }, "a call's time"),
            (
                Schedule {
                    call_ms: -1.0,
                    ..ok
                },
                "a call's time",
            ),
            (
                Schedule {
                    max_at_once: 0,
                    ..ok
                },
                "steps a call must be 1 to 1024",
            ),
            (
                Schedule {
                    max_at_once: 1025,
                    ..ok
                },
                "steps a call must be 1 to 1024",
            ),
            (
                Schedule {
                    overlap_ms: Some(-1.0),
                    ..ok
                },
                "overlap",
            ),
            (
                Schedule {
                    overlap_ms: Some(f64::NAN),
                    ..ok
                },
                "overlap",
            ),
            (Schedule { end: Some(0), ..ok }, "end at step 1"),
        ] {
            let e = bad.validate().unwrap_err();
            assert_eq!(e.kind(), "config");
            assert!(e.to_string().contains(want), "{e}");
        }
        ok.validate().unwrap();
        Schedule::cli(1, 0, 0).validate().unwrap();
    }
}

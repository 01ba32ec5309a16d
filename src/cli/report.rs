//! How `tidepool train` reports a run, as nanoGPT's train.py does: evaluations as
//! lines (`step 250: train loss 2.1234, val loss 2.2345, 12.3 s elapsed`), and
//! between them a progress bar on a terminal, or, when standard output is a file or
//! a pipe, a plain line every N steps; with `--json`, one object a step instead.

use std::future::Future;
use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tidepool::fmt_bytes;
use tidepool::train::{now_ms, StepStats};

use super::output::say;

/// The train command's reporting flags.
#[derive(clap::Args)]
pub struct ReportArgs {
    /// One JSON object a line: a line a step, and a last line with "final": true.
    #[arg(long, help_heading = "Output")]
    pub json: bool,
    /// A plain line every N steps: the mean loss since the line before, speed and
    /// the pool (default: about 20 lines a run when standard output is not a
    /// terminal, none under the progress bar; 0: none).
    #[arg(
        long,
        value_name = "N",
        allow_negative_numbers = true,
        conflicts_with = "json",
        help_heading = "Output"
    )]
    pub log_every: Option<u32>,
}

/// Lines a run prints by default when its standard output is not a terminal.
const LINES_A_RUN: u32 = 20;

/// Where the report goes.
enum Style {
    /// JSON lines only.
    Json,
    /// A progress bar, with lines above it.
    Bar(ProgressBar),
    /// Plain lines.
    Lines,
}

/// A running mean of training losses.
#[derive(Default)]
struct Mean {
    sum: f64,
    count: u32,
}

impl Mean {
    fn add(&mut self, loss: f32) {
        self.sum += f64::from(loss);
        self.count += 1;
    }

    /// The mean so far, and a fresh start.
    fn take(&mut self) -> f64 {
        let mean = self.sum / f64::from(self.count.max(1));
        *self = Mean::default();
        mean
    }
}

/// The report of one run of `steps` steps, from `done` on.
pub struct Report {
    style: Style,
    /// A plain line every this many steps (0: none).
    log_every: u32,
    steps: u32,
    /// Steps an evaluation line follows (0: none).
    eval_every: u32,
    /// When training started (ms).
    start: f64,
    since_line: Mean,
    since_eval: Mean,
}

impl Report {
    /// Starts the report of a run of `steps` steps of which `done` are done.
    pub fn start(args: &ReportArgs, done: u32, steps: u32, eval_every: u32) -> Report {
        let terminal = std::io::stdout().is_terminal();
        let style = match (args.json, terminal) {
            (true, _) => Style::Json,
            (false, true) => Style::Bar(bar(done, steps)),
            (false, false) => Style::Lines,
        };
        let log_every = match (&style, args.log_every) {
            (Style::Json, _) | (Style::Bar(_), None) => 0,
            (_, Some(every)) => every,
            (Style::Lines, None) => lines_every(steps),
        };
        Report {
            style,
            log_every,
            steps,
            eval_every,
            start: now_ms(),
            since_line: Mean::default(),
            since_eval: Mean::default(),
        }
    }

    pub fn is_json(&self) -> bool {
        matches!(self.style, Style::Json)
    }

    /// Seconds since training started.
    pub fn elapsed_s(&self) -> f64 {
        (now_ms() - self.start) / 1e3
    }

    /// Prints a line, above the bar where there is one.
    fn line(&self, text: &str) {
        match &self.style {
            Style::Bar(bar) => bar.suspend(|| say!("{text}")),
            _ => say!("{text}"),
        }
    }

    /// Prints a note on standard error, above the bar where there is one.
    pub fn note(&self, text: &str) {
        match &self.style {
            Style::Bar(bar) => bar.suspend(|| eprintln!("{text}")),
            _ => eprintln!("{text}"),
        }
    }

    /// Says on the bar that the steps just back are followed by an evaluation of
    /// `batches` held-out batches.
    pub fn evaluating(&self, batches: usize) {
        if let Style::Bar(bar) = &self.style {
            bar.set_message(format!("evaluating on {batches} held-out batches"));
        }
    }

    /// Reports one step: its JSON line, or the bar, a plain line when one is due and
    /// the evaluation line at an evaluation step.
    pub fn step(&mut self, s: &StepStats) {
        if let Style::Json = self.style {
            say!("{}", serde_json::to_string(s).expect("stats serialize"));
            return;
        }
        self.since_line.add(s.loss);
        self.since_eval.add(s.loss);
        if let Style::Bar(bar) = &self.style {
            bar.set_message(format!(
                "loss {:.4} | {:.0} tok/s | hit rate {:.1}% | created {} (+{}) | held {}",
                s.loss,
                s.tokens_per_s,
                s.hit_rate * 100.0,
                s.buffers_created,
                s.buffers_created_step,
                fmt_bytes(s.bytes_held)
            ));
            bar.set_position(u64::from(s.step));
        }
        if self.log_every > 0 && (s.step.is_multiple_of(self.log_every) || s.step == self.steps) {
            let line = format!(
                "step {}/{}: loss {:.4}, {:.2} ms/step, {:.0} tok/s, pool hit rate {:.1}%, \
                 held {}, {:.1} s elapsed",
                s.step,
                self.steps,
                self.since_line.take(),
                s.ms,
                s.tokens_per_s,
                s.hit_rate * 100.0,
                fmt_bytes(s.bytes_held),
                self.elapsed_s()
            );
            self.line(&line);
        }
        let evaluated = self.eval_every > 0 && s.step.is_multiple_of(self.eval_every);
        if let (true, Some(val_loss)) = (evaluated, s.val_loss) {
            let line = format!(
                "step {}: train loss {:.4}, val loss {val_loss:.4}, {:.1} s elapsed",
                s.step,
                self.since_eval.take(),
                self.elapsed_s()
            );
            self.line(&line);
        }
    }

    /// The steps are done: the bar stays, full.
    pub fn trained(&self) {
        if let Style::Bar(bar) = &self.style {
            bar.finish();
        }
    }

    /// Runs the final evaluation (`work`, over `batches` held-out batches) with its
    /// own indicator: a spinner on a terminal, a line before it otherwise.
    pub async fn final_evaluation<T>(&self, batches: usize, work: impl Future<Output = T>) -> T {
        let what = format!("final evaluation on {batches} held-out batches");
        match &self.style {
            Style::Json => work.await,
            Style::Lines => {
                say!("{what}...");
                work.await
            }
            Style::Bar(_) => {
                let spinner = ProgressBar::with_draw_target(None, ProgressDrawTarget::stdout())
                    .with_style(
                        ProgressStyle::with_template("{spinner} {msg} {elapsed}")
                            .expect("valid template"),
                    )
                    .with_message(what);
                // Drawn now, however short the evaluation, then kept turning.
                spinner.tick();
                spinner.enable_steady_tick(Duration::from_millis(100));
                let result = work.await;
                spinner.finish_and_clear();
                result
            }
        }
    }
}

/// The training bar, on standard output (so that the report is in one place), one
/// line wide (`wide_msg` cuts the message at the terminal's edge).
fn bar(done: u32, steps: u32) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(u64::from(steps)), ProgressDrawTarget::stdout())
        .with_style(
            ProgressStyle::with_template(
                "{bar:30} {pos}/{len} {elapsed_precise} eta {eta} | {wide_msg}",
            )
            .expect("valid template"),
        );
    bar.set_position(u64::from(done));
    // Redrawn while a long evaluation runs, so the clock does not stop.
    bar.enable_steady_tick(Duration::from_millis(250));
    bar
}

/// Steps between plain lines: 1, 2 or 5 times a power of ten, the largest that
/// gives at least [`LINES_A_RUN`] lines and at most 2.5 times as many.
fn lines_every(steps: u32) -> u32 {
    let most = u64::from((steps / LINES_A_RUN).max(1));
    let mut every = 1;
    for power in 0..10 {
        for m in [1, 2, 5] {
            let candidate = m * 10u64.pow(power);
            if candidate > most {
                return every as u32;
            }
            every = candidate;
        }
    }
    every as u32
}

#[cfg(test)]
mod tests {
    use super::lines_every;

    #[test]
    fn runs_print_tens_of_plain_lines_at_even_steps() {
        for (steps, every) in [
            (1, 1),
            (30, 1),
            (40, 2),
            (1000, 50),
            (2000, 100),
            (5000, 200),
            (u32::MAX, 200_000_000),
        ] {
            assert_eq!(lines_every(steps), every, "{steps} steps");
            if steps >= 20 {
                let lines = steps / every;
                assert!((20..=50).contains(&lines), "{steps} steps: {lines} lines");
            }
        }
    }
}

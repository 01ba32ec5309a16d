//! From a file's bytes to what every allocator would have held: [`report`], the
//! call behind `tidepool trace replay FILE` and the page's dropped files.
//!
//! For each recording (a PyTorch snapshot's device, each step of a tidepool trace):
//! the peaks over the whole recording (live tensors as requested, live tensors as
//! the allocator's blocks, the allocator's reserved bytes: PyTorch's
//! `max_memory_allocated` and `max_memory_reserved` for the same events), then the
//! step (found, chosen, or the whole recording) replayed through every tidepool
//! size policy and plan, beside the recorded allocator's own figure.
//!
//! The replay takes each allocation from its request to the event from which the
//! allocator may reuse its memory (PyTorch's `free_completed`: after the streams
//! that used it), so the plans never reuse memory a stream may still read.

use super::pickle::Limits;
use super::step::{self, Period, Window};
use super::{Allocation, Format, Recording};
use crate::replay::{self, ReplayRow, StepReplay, Tensor};
use crate::Error;

/// What to read and replay.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Caps on the file ([`Limits`]).
    pub limits: Limits,
    /// A PyTorch snapshot's device (default: the one with the most events).
    pub device: Option<u32>,
    /// Replay events `start..end` (from 0) instead of the step found.
    pub events: Option<(u32, u32)>,
}

/// The most bytes at once by three measures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Peaks {
    /// Live tensors, bytes requested: the lower bound of every allocator.
    pub live: u64,
    /// Live tensors, bytes the allocator handed out (PyTorch's 512-byte blocks,
    /// tidepool's size classes): PyTorch's `allocated`.
    pub allocated: u64,
    /// What the allocator held from the device: PyTorch's `reserved`.
    pub reserved: u64,
}

/// How the step was chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Chosen {
    /// The repeating period found ([`step::find`]).
    Found,
    /// No repetition: the whole recording.
    Whole,
    /// The caller's range ([`Options::events`]).
    Range,
}

/// One recording and the replay of its step.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct StepReport {
    /// `device 0`, `step 3 (steady)`.
    pub recording: String,
    /// The allocator that ran.
    pub allocator: String,
    /// Events and allocations in the recording.
    pub events: u32,
    pub allocations: usize,
    /// Peaks over the whole recording.
    pub peaks: Peaks,
    /// The step: events `first_event..end_event` (from 0).
    pub first_event: u32,
    pub end_event: u32,
    pub chosen: Chosen,
    /// The repetition, when found.
    pub period: Option<Period>,
    /// Peaks over the step.
    pub step_peaks: Peaks,
    /// The step replayed: the lower bound, the recorded allocator (and, for a
    /// planned run, what it really reserved: [`PLANNED_LIVE`]), every tidepool
    /// policy and both plans.
    pub replay: StepReplay,
}

/// A file's report.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Report {
    /// `pytorch-snapshot` or `tidepool-trace`.
    pub format: &'static str,
    pub steps: Vec<StepReport>,
    /// What the reader assumed or skipped.
    pub notes: Vec<String>,
}

/// Reads `bytes` (a PyTorch snapshot or a tidepool trace) and replays its step.
pub fn report(bytes: &[u8], options: &Options) -> Result<Report, Error> {
    let (format, recordings) = super::read(bytes, options.limits, options.device)?;
    of_recordings(format, &recordings, options.events)
}

/// The report of recordings already read (a file read once, reported again for
/// another range of events): each one's step, or its events `start..end`.
pub fn of_recordings(
    format: Format,
    recordings: &[Recording],
    events: Option<(u32, u32)>,
) -> Result<Report, Error> {
    let mut notes = Vec::new();
    let mut steps = Vec::with_capacity(recordings.len());
    for (i, recording) in recordings.iter().enumerate() {
        notes.extend(recording.notes.iter().cloned());
        steps.push(step_report(recording, events, i as u32)?);
    }
    Ok(Report {
        format: format.name(),
        steps,
        notes,
    })
}

/// The recording's allocations over `window`, as a replay's tensors, by the end
/// `end` picks (the free, or the reuse).
pub fn window_tensors(
    allocations: &[Allocation],
    window: Window,
    end: impl Fn(&Allocation) -> u32,
    size: impl Fn(&Allocation) -> u64,
) -> Vec<Tensor> {
    let (first, last) = (window.first, window.last);
    allocations
        .iter()
        .filter(|a| a.start <= last && end(a) >= first && end(a) > a.start)
        .map(|a| Tensor {
            size: size(a),
            start: a.start.saturating_sub(first - 1),
            end: end(a).min(last + 1) - (first - 1),
            poolable: a.poolable,
        })
        .collect()
}

/// The most bytes live at once over `window`, each allocation from its start to
/// `end` and of `size`: the lower bound of [`replay::lower_bound`], in one pass
/// over the positions (deaths first at each) instead of a sort.
fn live_peak(
    allocations: &[Allocation],
    window: Window,
    end: impl Fn(&Allocation) -> u32,
    size: impl Fn(&Allocation) -> u64,
) -> u64 {
    let (first, last) = (window.first, window.last);
    let positions = window.len() as usize + 2;
    let (mut born, mut died) = (vec![0u64; positions], vec![0u64; positions]);
    for a in allocations {
        if a.start <= last && end(a) >= first {
            let start = a.start.saturating_sub(first - 1) as usize;
            let stop = (end(a).min(last + 1) - (first - 1)) as usize;
            born[start] = born[start].saturating_add(size(a));
            died[stop] = died[stop].saturating_add(size(a));
        }
    }
    let (mut live, mut peak) = (0i128, 0i128);
    for (&b, &d) in born.iter().zip(&died) {
        live = live - i128::from(d) + i128::from(b);
        peak = peak.max(live);
    }
    u64::try_from(peak).unwrap_or(u64::MAX)
}

fn peaks(recording: &Recording, window: Window) -> Peaks {
    let allocations = &recording.allocations;
    Peaks {
        live: live_peak(allocations, window, |a| a.end, |a| a.size),
        allocated: live_peak(allocations, window, |a| a.end, |a| a.block),
        reserved: recording
            .reserved
            .peak(window.first.saturating_sub(1), window.last),
    }
}

/// One recording's peaks and the replay of its step (`events`: the events
/// `start..end` instead of the step found); `index` is its place in the file.
pub fn step_report(
    recording: &Recording,
    events: Option<(u32, u32)>,
    index: u32,
) -> Result<StepReport, Error> {
    let (window, period, chosen) = match events {
        Some((start, end)) => {
            if start >= end || end > recording.events {
                return Err(Error::Trace(format!(
                    "events {start}..{end} are not a range of {}'s {} events",
                    recording.label, recording.events
                )));
            }
            (
                Window {
                    first: start + 1,
                    last: end,
                },
                None,
                Chosen::Range,
            )
        }
        None => match step::find(recording) {
            (window, Some(period)) => (window, Some(period), Chosen::Found),
            (window, None) => (window, None, Chosen::Whole),
        },
    };
    let tensors = window_tensors(&recording.allocations, window, |a| a.released, |a| a.size);
    // Every sum the replays make stays within 64 bits.
    replay::check_sizes(&tensors).map_err(|e| Error::Trace(format!("{}: {e}", recording.label)))?;
    let step_peaks = peaks(recording, window);
    let mut rows = replay::rows(&tensors, recording.max_buffer_size);
    let lower = replay::lower_bound(&tensors);
    let mut recorded = ReplayRow {
        allocator: format!("{} (recorded)", recording.allocator),
        peak_bytes: step_peaks.reserved,
        ratio: 0.0,
        buffers_created: recording.reserved.grows(window.first, window.last),
        hits: 0,
        note: None,
    };
    if recording.reserved.at_start == 0 && recording.reserved.changes.is_empty() {
        recorded.note = Some("the recording holds no reserved bytes".into());
    }
    rows.insert(1, recorded);
    if let Some(row) = planned_live_row(recording, window) {
        rows.insert(2, row);
    }
    replay::set_ratios(&mut rows, lower);
    Ok(StepReport {
        recording: recording.label.clone(),
        allocator: recording.allocator.clone(),
        events: recording.events,
        allocations: recording.allocations.len(),
        peaks: peaks(recording, Window::all(recording)),
        first_event: window.first - 1,
        end_event: window.last,
        chosen,
        period,
        step_peaks,
        replay: StepReplay {
            step: index,
            label: recording.label.clone(),
            tensors: tensors.len(),
            lower_bound: lower,
            rows,
        },
    })
}

/// The row of what a planned run really reserved over the step, when the recording
/// is one (its buffers created: those made inside `window`).
fn planned_live_row(recording: &Recording, window: Window) -> Option<ReplayRow> {
    let peak = recording.planned_peak?;
    let made = (recording.segments.iter())
        .filter(|s| (window.first..=window.last).contains(&s.start))
        .count();
    let whole = window == Window::all(recording);
    Some(ReplayRow {
        allocator: PLANNED_LIVE.into(),
        peak_bytes: peak,
        ratio: 0.0,
        buffers_created: made as u64,
        hits: 0,
        note: (!whole).then(|| {
            format!(
                "the live run's peak over all of {}, not only the events replayed",
                recording.label
            )
        }),
    })
}

/// The row of a planned run's own reserved bytes.
pub const PLANNED_LIVE: &str = "planned (live)";

/// The report as plain text: each recording's peaks, its step, and the replay table.
pub fn table(report: &Report) -> String {
    let bytes = |b: u64| format!("{b} ({})", crate::fmt_bytes(b));
    let mut out = String::new();
    for s in &report.steps {
        out.push_str(&format!(
            "{}, {}: {} events, {} allocations\n",
            s.allocator, s.recording, s.events, s.allocations
        ));
        out.push_str(&format!(
            "  peak live {}, allocated {}, reserved {}\n",
            bytes(s.peaks.live),
            bytes(s.peaks.allocated),
            bytes(s.peaks.reserved)
        ));
        let how = match (s.chosen, s.period) {
            (Chosen::Found, Some(p)) => format!(
                "the repeating step ({} allocations and frees, {} whole repeats, {:.1}% \
                 matched)",
                p.symbols,
                p.repeats,
                p.matched * 100.0
            ),
            (Chosen::Range, _) => "the events asked for".into(),
            _ => "no repeating step found: the whole recording".into(),
        };
        out.push_str(&format!(
            "step: events {}..{}, {how}; {} tensors\n",
            s.first_event, s.end_event, s.replay.tensors
        ));
        out.push_str(&replay::rows_table(&s.replay.rows));
        out.push('\n');
    }
    for note in &report.notes {
        out.push_str(&format!("note: {note}\n"));
    }
    out
}

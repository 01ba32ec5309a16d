//! Any allocator's trace in one model: PyTorch memory snapshots
//! (`torch.cuda.memory._dump_snapshot`) and tidepool's own `--trace` files read into
//! [`Recording`]s, the repeating training step found in them, and a [`Report`] of
//! what every tidepool size policy and plan would have held on the same events.
//!
//! [`report()`] is the one call from a file's bytes to the report, for the CLI and
//! the page alike; [`read`] stops at the recordings.
//!
//! - [`pickle`]: a restricted reader of the pickles PyTorch writes.
//! - [`torch`]: a snapshot's segments and device traces into recordings.
//! - [`own`]: tidepool's trace JSON into recordings.
//! - [`step`]: the period of a recording's events, and the step to replay.
//! - [`report`](mod@report): the replay of a step and its table.
//! - [`timeline`]: a recording in flat arrays, as the page's timeline draws it.

pub mod own;
pub mod pickle;
pub mod report;
pub mod step;
pub mod timeline;
pub mod torch;

pub use report::{report, Options, Report, StepReport};

use crate::Error;

/// One allocator's events in order, as who was live when and what the allocator
/// held. Positions: 0 is before the first event, `i + 1` just after event `i`,
/// `events + 1` after the last.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Recording {
    /// `device 0`, `step 3 (steady)`.
    pub label: String,
    /// The allocator that ran: `PyTorch caching allocator`, `tidepool pow2/8 fit2`.
    pub allocator: String,
    /// Events in the recording.
    pub events: u32,
    pub allocations: Vec<Allocation>,
    /// Bytes the allocator held from the device over the events.
    pub reserved: Reserved,
    /// What it held them as: PyTorch's segments (`cudaMalloc`s, or the mapped
    /// ranges of expandable ones), tidepool's GPU buffers.
    pub segments: Vec<Segment>,
    pub stacks: Stacks,
    /// The largest size class a replayed tidepool pool keeps (the recorded pool's
    /// for tidepool's traces, the default pool's for others).
    pub max_buffer_size: u64,
    /// A step of a run under tidepool's planned policy: the most bytes the run
    /// reserved during it (pooled buffers and arenas), as its `peak_bytes_reserved`
    /// counts them. The events' in-use and held bytes leave out the arenas' free
    /// bytes, so the recorded allocator's row cannot show it.
    pub planned_peak: Option<u64>,
    /// What the reader had to assume or skip, for the report.
    pub notes: Vec<String>,
}

impl Recording {
    /// Every allocation as a replay's tensor: from its request to the position from
    /// which its memory may be reused.
    pub fn tensors(&self) -> Vec<crate::replay::Tensor> {
        report::window_tensors(
            &self.allocations,
            step::Window::all(self),
            |a| a.released,
            |a| a.size,
        )
    }
}

/// One allocation: requested at `start`, freed by the program at `end`, reusable by
/// the allocator from `released` (after the streams that used it are done; on one
/// stream the event after `end`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Allocation {
    /// Bytes requested.
    pub size: u64,
    /// Bytes the allocator handed out for it (its rounding; PyTorch's 512-byte
    /// blocks, tidepool's size class).
    pub block: u64,
    /// Address (PyTorch) or buffer id (tidepool).
    pub address: u64,
    pub stream: u64,
    /// Position of the allocation; 0 when it was live before the first event.
    pub start: u32,
    /// Position of the free; `events + 1` when live after the last event.
    pub end: u32,
    /// Position from which the allocator may reuse the memory (`end` or later).
    pub released: u32,
    /// Index into [`Recording::stacks`]; 0 for none.
    pub stack: u32,
    /// `false` for memory that never joins a pool (tidepool's uploads).
    pub poolable: bool,
}

/// Memory the allocator held from the device, from `start` to `end` (positions as
/// an [`Allocation`]'s: 0 when held before the first event, `events + 1` when
/// still held after the last).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Segment {
    pub address: u64,
    pub size: u64,
    pub stream: u64,
    pub start: u32,
    pub end: u32,
}

/// The allocator's reserved bytes: `at_start`, then the value after each change.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reserved {
    pub at_start: u64,
    /// (position, bytes reserved just after that event), positions increasing.
    pub changes: Vec<(u32, u64)>,
}

impl Reserved {
    /// The most bytes reserved at a position in `first..=last` (the value standing
    /// at `first` counts).
    pub fn peak(&self, first: u32, last: u32) -> u64 {
        let i = self.changes.partition_point(|&(at, _)| at <= first);
        let standing = match i {
            0 => self.at_start,
            _ => self.changes[i - 1].1,
        };
        self.changes[i..]
            .iter()
            .take_while(|&&(at, _)| at <= last)
            .fold(standing, |peak, &(_, bytes)| peak.max(bytes))
    }

    /// Segments created (changes upward) in `first..=last`.
    pub fn grows(&self, first: u32, last: u32) -> u64 {
        let mut before = self.at_start;
        let mut n = 0;
        for &(at, bytes) in &self.changes {
            if (first..=last).contains(&at) && bytes > before {
                n += 1;
            }
            before = bytes;
        }
        n
    }
}

/// A stack frame: where an allocation was asked for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Frame {
    pub filename: String,
    pub line: u32,
    pub name: String,
}

/// Stacks of frames, each written once: stack `i` is `frames[offsets[i]..offsets[i + 1]]`
/// (innermost first, as PyTorch writes them), frame indices into `table`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stacks {
    pub table: Vec<Frame>,
    pub frames: Vec<u32>,
    pub offsets: Vec<u32>,
}

impl Default for Stacks {
    /// Stack 0, the empty one.
    fn default() -> Self {
        Stacks {
            table: Vec::new(),
            frames: Vec::new(),
            offsets: vec![0, 0],
        }
    }
}

impl Stacks {
    /// The frames of stack `i`.
    pub fn get(&self, i: u32) -> impl Iterator<Item = &Frame> {
        let i = i as usize;
        let (start, end) = match self.offsets.get(i..i.saturating_add(2)) {
            Some(w) => (w[0] as usize, w[1] as usize),
            None => (0, 0),
        };
        self.frames[start..end]
            .iter()
            .map(|&f| &self.table[f as usize])
    }

    /// Adds a stack and returns its index: the frames (indices into `table`) pushed
    /// onto `frames` since the last stack, then `frames`.
    pub fn push(&mut self, frames: impl IntoIterator<Item = u32>) -> u32 {
        self.frames.extend(frames);
        self.offsets.push(self.frames.len() as u32);
        (self.offsets.len() - 2) as u32
    }

    /// How many stacks (the empty one included).
    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() <= 1
    }
}

/// Which reader a file needs, from its first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// A pickle (`_dump_snapshot` writes protocol 2 or later: it starts with 0x80).
    TorchSnapshot,
    /// JSON (`tidepool train --trace`).
    TidepoolTrace,
}

impl Format {
    pub fn of(bytes: &[u8]) -> Result<Format, Error> {
        match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(0x80) => Ok(Format::TorchSnapshot),
            Some(b'{') => Ok(Format::TidepoolTrace),
            _ => Err(Error::Trace(
                "neither a PyTorch memory snapshot (a pickle, first byte 0x80) nor a \
                 tidepool trace (JSON)"
                    .into(),
            )),
        }
    }

    /// `pytorch-snapshot` or `tidepool-trace`.
    pub fn name(self) -> &'static str {
        match self {
            Format::TorchSnapshot => "pytorch-snapshot",
            Format::TidepoolTrace => "tidepool-trace",
        }
    }
}

/// Reads a file's recordings: a PyTorch snapshot's device (the one with the most
/// events, or `device`), or each step of a tidepool trace.
pub fn read(
    bytes: &[u8],
    limits: pickle::Limits,
    device: Option<u32>,
) -> Result<(Format, Vec<Recording>), Error> {
    let format = Format::of(bytes)?;
    let recordings = match format {
        Format::TorchSnapshot => vec![torch::read(bytes, limits, device)?],
        Format::TidepoolTrace => {
            if bytes.len() as u64 > limits.max_bytes {
                return Err(Error::Trace(format!(
                    "the trace is {} bytes; at most {} are read (Limits::max_bytes)",
                    bytes.len(),
                    limits.max_bytes
                )));
            }
            own::read(bytes)?
        }
    };
    Ok((format, recordings))
}

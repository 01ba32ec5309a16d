//! A recording as the page's timeline draws it: each allocation's lifetime, size,
//! stream and stack in flat arrays, one entry an allocation (a 100 MB snapshot has a
//! million events, so nothing is an object an event), and the live and reserved
//! bytes after every event.
//!
//! Byte counts are `f64`s, as JavaScript holds them: exact up to 2^53 bytes (8 PiB);
//! a recording's sizes are below 2^62, and sums past 2^53 round.

use rustc_hash::FxHashMap;

use super::{Frame, Recording, Reserved};

/// `stack_label` of a stack with no frames.
pub const NO_FRAME: u32 = u32::MAX;

/// A recording's allocations and bytes over its events. Positions as a
/// [`Recording`]'s: 0 before the first event, `i + 1` just after event `i`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timeline {
    pub label: String,
    pub allocator: String,
    pub events: u32,
    /// Allocations in order of birth (by `start`, then as the recording has them):
    /// the order they stack in. Live over positions `start..end`.
    pub start: Vec<u32>,
    pub end: Vec<u32>,
    /// Bytes requested.
    pub size: Vec<f64>,
    /// Index into `streams`.
    pub stream: Vec<u32>,
    /// Index of the stack (`stack_offsets`); 0 is the empty one.
    pub stack: Vec<u32>,
    /// Allocations (indices into the arrays above) by `end`: the order a sweep over
    /// the events frees them in.
    pub by_end: Vec<u32>,
    /// The streams, as the recording names them (PyTorch's `cudaStream_t`, signed).
    pub streams: Vec<String>,
    /// Bytes requested by live allocations after each position (`events + 1`).
    pub live: Vec<f64>,
    /// Bytes the allocator held after each position (`events + 1`).
    pub reserved: Vec<f64>,
    /// The frame table, each frame once.
    pub frame_names: Vec<String>,
    pub frame_files: Vec<String>,
    pub frame_lines: Vec<u32>,
    /// Stack `i` is `stack_frames[stack_offsets[i]..stack_offsets[i + 1]]`, innermost
    /// first, indices into the frame table.
    pub stack_frames: Vec<u32>,
    pub stack_offsets: Vec<u32>,
    /// The frame each stack is named and coloured by ([`label_frame`]), or
    /// [`NO_FRAME`].
    pub stack_label: Vec<u32>,
}

/// The frame that says who asked for an allocation: the innermost one in the
/// program's own code, passing over installed packages (PyTorch's modules,
/// `site-packages`/`dist-packages`) and frames without a file; the innermost frame
/// when all are such.
pub fn label_frame(frames: &[u32], table: &[Frame]) -> u32 {
    let own = |&&f: &&u32| {
        let file = &table[f as usize].filename;
        !(file.is_empty()
            || file == "??"
            || file.contains("site-packages")
            || file.contains("dist-packages"))
    };
    frames
        .iter()
        .find(own)
        .or(frames.first())
        .copied()
        .unwrap_or(NO_FRAME)
}

/// Bytes after each of `events + 1` positions, from the reserved bytes' changes.
fn reserved_after(reserved: &Reserved, events: u32) -> Vec<f64> {
    let mut out = Vec::with_capacity(events as usize + 1);
    let mut now = reserved.at_start;
    let mut changes = reserved.changes.iter().peekable();
    for p in 0..=events {
        while let Some(&(_, bytes)) = changes.next_if(|&&(at, _)| at <= p) {
            now = bytes;
        }
        out.push(now as f64);
    }
    out
}

impl Timeline {
    pub fn of(recording: &Recording) -> Timeline {
        let events = recording.events;
        let allocations = &recording.allocations;
        let mut order: Vec<u32> = (0..allocations.len() as u32).collect();
        order.sort_by_key(|&i| allocations[i as usize].start);

        let mut streams: Vec<u64> = Vec::new();
        let mut stream_index: FxHashMap<u64, u32> = FxHashMap::default();
        let mut t = Timeline {
            label: recording.label.clone(),
            allocator: recording.allocator.clone(),
            events,
            ..Timeline::default()
        };
        let n = order.len();
        t.start.reserve(n);
        t.end.reserve(n);
        t.size.reserve(n);
        t.stream.reserve(n);
        t.stack.reserve(n);
        // Live bytes: each allocation adds at its start and leaves at its end.
        let positions = events as usize + 2;
        let mut delta = vec![0i128; positions];
        for &i in &order {
            let a = &allocations[i as usize];
            let (start, end) = (a.start.min(events + 1), a.end.min(events + 1));
            t.start.push(start);
            t.end.push(end);
            t.size.push(a.size as f64);
            let next = streams.len() as u32;
            let stream = *stream_index.entry(a.stream).or_insert_with(|| {
                streams.push(a.stream);
                next
            });
            t.stream.push(stream);
            t.stack.push(a.stack);
            if start < end {
                delta[start as usize] += i128::from(a.size);
                delta[end as usize] -= i128::from(a.size);
            }
        }
        t.streams = streams.iter().map(|&s| (s as i64).to_string()).collect();
        let mut live = 0i128;
        t.live = delta[..=events as usize]
            .iter()
            .map(|d| {
                live += d;
                live.max(0) as f64
            })
            .collect();
        let mut by_end: Vec<u32> = (0..n as u32).collect();
        by_end.sort_by_key(|&k| t.end[k as usize]);
        t.by_end = by_end;
        t.reserved = reserved_after(&recording.reserved, events);

        let stacks = &recording.stacks;
        // Equal frames once (a reader keeps one a frame it read, and a snapshot may
        // write the same line twice), so that a line of code is one colour.
        let mut index: FxHashMap<&Frame, u32> = FxHashMap::default();
        let mut table_to_ours = Vec::with_capacity(stacks.table.len());
        for f in &stacks.table {
            let next = t.frame_names.len() as u32;
            let ours = *index.entry(f).or_insert_with(|| {
                t.frame_names.push(f.name.clone());
                t.frame_files.push(f.filename.clone());
                t.frame_lines.push(f.line);
                next
            });
            table_to_ours.push(ours);
        }
        t.stack_frames = stacks
            .frames
            .iter()
            .map(|&f| table_to_ours[f as usize])
            .collect();
        t.stack_offsets = stacks.offsets.clone();
        t.stack_label = stacks
            .offsets
            .windows(2)
            .map(|w| {
                let f = label_frame(&stacks.frames[w[0] as usize..w[1] as usize], &stacks.table);
                table_to_ours.get(f as usize).copied().unwrap_or(NO_FRAME)
            })
            .collect();
        t
    }

    /// The most bytes live at once, and the first position where they were.
    pub fn peak(&self) -> (f64, u32) {
        let mut best = (0.0, 0);
        for (p, &bytes) in self.live.iter().enumerate() {
            if bytes > best.0 {
                best = (bytes, p as u32);
            }
        }
        best
    }
}

//! A PyTorch memory snapshot (`torch.cuda.memory._dump_snapshot`) into a
//! [`Recording`].
//!
//! The pickle is a dict: `segments` (the caching allocator's segments when the
//! snapshot was taken, each with `device`, `address`, `total_size`, `stream` and its
//! `blocks`: `size`, `requested_size`, `state`, `address`, `frames`) and
//! `device_traces` (a list a device of events: `action`, `addr`, `size`, `stream`,
//! `time_us`, `frames`). Frames are dicts of `filename`, `line` and `name`; PyTorch
//! writes each stack once and every event refers to it.
//!
//! Actions: `alloc` (a tensor's memory handed out), `free_requested` (the tensor
//! freed: PyTorch's `allocated` bytes fall here), `free_completed` (the streams that
//! used it are done: the block may be reused), `segment_alloc`/`segment_free`
//! (`cudaMalloc`/`cudaFree` of a segment: the `reserved` bytes), `segment_map` and
//! `segment_unmap` (expandable segments growing and shrinking), `oom`, `snapshot`.
//!
//! The trace starts when recording started: memory allocated before (parameters,
//! optimizer state) is in the segments' blocks at the end and was never seen
//! allocated, so the live bytes at the start are those at the end, less what the
//! trace allocated, plus what it freed. The reserved bytes likewise: the segments at
//! the end, less the segments the trace created, plus those it freed.

use rustc_hash::FxHashMap;

use super::pickle::{Item, Kind, Limits, Pickle, Value};
use super::{Allocation, Frame, Recording, Reserved, Segment, Stacks};
use crate::Error;

/// PyTorch rounds every block to a multiple of this (`kMinBlockSize`).
pub const BLOCK_BYTES: u64 = 512;

/// The block PyTorch's caching allocator hands out for `size` bytes with its default
/// settings (`round_size`): a multiple of 512 bytes, at least 512. A large block may
/// come out larger still when the free block found is not worth splitting; the
/// trace does not say, so this is the estimate.
pub fn block_size(size: u64) -> u64 {
    size.max(1)
        .div_ceil(BLOCK_BYTES)
        .saturating_mul(BLOCK_BYTES)
}

fn bad(what: impl Into<String>) -> Error {
    Error::Trace(format!("PyTorch snapshot: {}", what.into()))
}

/// The fields the reader looks for, by the id of their key string (equal strings
/// share an id when the pickler memoised them, as Python's does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    Action,
    Addr,
    Size,
    Stream,
    Frames,
    Filename,
    Line,
    Name,
    Device,
    Address,
    TotalSize,
    RequestedSize,
    State,
    Blocks,
    Other,
}

impl Field {
    fn of(key: &str) -> Field {
        match key {
            "action" => Field::Action,
            "addr" => Field::Addr,
            "size" => Field::Size,
            "stream" => Field::Stream,
            "frames" => Field::Frames,
            "filename" => Field::Filename,
            "line" => Field::Line,
            "name" => Field::Name,
            "device" => Field::Device,
            "address" => Field::Address,
            "total_size" => Field::TotalSize,
            "requested_size" => Field::RequestedSize,
            "state" => Field::State,
            "blocks" => Field::Blocks,
            _ => Field::Other,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    Alloc,
    FreeRequested,
    FreeCompleted,
    SegmentAlloc,
    SegmentFree,
    SegmentMap,
    SegmentUnmap,
    /// `oom`, `snapshot`, `annotate` and any later ones: no memory changes hands.
    Other,
}

impl Action {
    fn of(name: &str) -> Action {
        match name {
            "alloc" => Action::Alloc,
            "free_requested" => Action::FreeRequested,
            "free_completed" => Action::FreeCompleted,
            "segment_alloc" => Action::SegmentAlloc,
            "segment_free" => Action::SegmentFree,
            "segment_map" => Action::SegmentMap,
            "segment_unmap" => Action::SegmentUnmap,
            _ => Action::Other,
        }
    }
}

/// Reads values out of the pickle, naming where each came from in its errors.
/// Strings and containers are read once each: their meaning is kept by id (the
/// pickle numbers them densely), so an event costs no lookup by content.
struct Reader<'p, 'a> {
    pickle: &'p Pickle<'a>,
    /// String id -> field or action, filled as they are met.
    fields: Vec<Option<Field>>,
    actions: Vec<Option<Action>>,
    /// Frame dict id -> index in the frame table, frames list id -> stack
    /// (`UNSEEN` until read).
    frames: Vec<u32>,
    stacks_by_list: Vec<u32>,
    stacks: Stacks,
}

const UNSEEN: u32 = u32::MAX;

impl Reader<'_, '_> {
    fn dict(&self, v: Value, what: &dyn Fn() -> String) -> Result<u32, Error> {
        match self.pickle.get(v) {
            Item::Container(Kind::Dict, d) => Ok(d),
            other => Err(bad(format!(
                "{} is {}, not a dict",
                what(),
                other.type_name()
            ))),
        }
    }

    fn list(&self, v: Value, what: &dyn Fn() -> String) -> Result<u32, Error> {
        match self.pickle.get(v) {
            Item::Container(Kind::List | Kind::Tuple, l) => Ok(l),
            other => Err(bad(format!(
                "{} is {}, not a list",
                what(),
                other.type_name()
            ))),
        }
    }

    fn field(&mut self, key: Value) -> Field {
        let Some(id) = self.pickle.string_id(key) else {
            return Field::Other;
        };
        let pickle = self.pickle;
        *self.fields[id as usize].get_or_insert_with(|| Field::of(pickle.string(id)))
    }

    fn action(&mut self, v: Value, what: &dyn Fn() -> String) -> Result<Action, Error> {
        let Some(id) = self.pickle.string_id(v) else {
            return Err(bad(format!(
                "{}.action is {}, not a string",
                what(),
                self.pickle.get(v).type_name()
            )));
        };
        let pickle = self.pickle;
        Ok(*self.actions[id as usize].get_or_insert_with(|| Action::of(pickle.string(id))))
    }

    /// An integer in `0..=max`.
    fn uint(&self, v: Value, max: u64, what: &dyn Fn() -> String) -> Result<u64, Error> {
        match self.pickle.get(v) {
            Item::Int(i) if (0..=i128::from(max)).contains(&i) => Ok(i as u64),
            Item::Int(i) => Err(bad(format!("{} is {i}, outside 0..={max}", what()))),
            other => Err(bad(format!(
                "{} is {}, not an integer",
                what(),
                other.type_name()
            ))),
        }
    }

    /// A stream: PyTorch writes the `cudaStream_t` as a signed 64-bit integer.
    fn stream(&self, v: Value, what: &dyn Fn() -> String) -> Result<u64, Error> {
        match self.pickle.get(v) {
            Item::Int(i) if i128::from(i64::MIN) <= i && i <= i128::from(u64::MAX) => Ok(i as u64),
            other => Err(bad(format!(
                "{} is {}, not a stream id",
                what(),
                other.type_name()
            ))),
        }
    }

    fn string(&self, v: Value, what: &dyn Fn() -> String) -> Result<String, Error> {
        match self.pickle.get(v) {
            Item::Str(s, _) => Ok(s.to_owned()),
            other => Err(bad(format!(
                "{} is {}, not a string",
                what(),
                other.type_name()
            ))),
        }
    }

    /// The stack a `frames` list stands for, each list and frame read once.
    fn stack(&mut self, v: Value, what: &dyn Fn() -> String) -> Result<u32, Error> {
        let list = self.list(v, &|| format!("{}.frames", what()))?;
        if self.stacks_by_list[list as usize] != UNSEEN {
            return Ok(self.stacks_by_list[list as usize]);
        }
        let mut frames = std::mem::take(&mut self.stacks.frames);
        for (i, f) in self.pickle.items(list).enumerate() {
            let where_ = || format!("{}.frames[{i}]", what());
            let index = match self.dict(f, &where_) {
                Ok(d) if self.frames[d as usize] != UNSEEN => Ok(self.frames[d as usize]),
                Ok(d) => self.frame(d, &where_).map(|frame| {
                    self.stacks.table.push(frame);
                    self.frames[d as usize] = self.stacks.table.len() as u32 - 1;
                    self.stacks.table.len() as u32 - 1
                }),
                Err(e) => Err(e),
            };
            match index {
                Ok(index) => frames.push(index),
                Err(e) => {
                    self.stacks.frames = frames;
                    return Err(e);
                }
            }
        }
        self.stacks.frames = frames;
        let s = self.stacks.push([]);
        self.stacks_by_list[list as usize] = s;
        Ok(s)
    }

    fn frame(&mut self, d: u32, what: &dyn Fn() -> String) -> Result<Frame, Error> {
        let mut frame = Frame::default();
        for (k, v) in self.pickle.pairs(d) {
            match self.field(k) {
                Field::Filename => {
                    frame.filename = self.string(v, &|| format!("{}.filename", what()))?
                }
                Field::Name => frame.name = self.string(v, &|| format!("{}.name", what()))?,
                Field::Line => {
                    frame.line =
                        self.uint(v, u64::from(u32::MAX), &|| format!("{}.line", what()))? as u32
                }
                _ => {}
            }
        }
        Ok(frame)
    }
}

/// One event's fields.
#[derive(Default)]
struct Event {
    action: Option<Action>,
    addr: Option<u64>,
    size: Option<u64>,
    stream: u64,
    stack: u32,
}

/// Largest size or address read: PyTorch writes them as 64-bit integers, and sizes
/// above 2^62 bytes exist nowhere (a replay adds them up in 64 bits).
const MAX_BYTES: u64 = 1 << 62;

/// Reads `device`'s recording (the device with the most events when `None`).
pub fn read(bytes: &[u8], limits: Limits, device: Option<u32>) -> Result<Recording, Error> {
    let pickle = Pickle::parse(bytes, limits).map_err(|e| bad(e.to_string()))?;
    let (strings, containers) = pickle.counts();
    let mut r = Reader {
        pickle: &pickle,
        fields: vec![None; strings],
        actions: vec![None; strings],
        frames: vec![UNSEEN; containers],
        stacks_by_list: vec![UNSEEN; containers],
        stacks: Stacks::default(),
    };
    let root = r.dict(pickle.root(), &|| "the file".into())?;
    let (mut segments, mut traces) = (None, None);
    for (k, v) in pickle.pairs(root) {
        match pickle.get(k) {
            Item::Str("segments", _) => segments = Some(v),
            Item::Str("device_traces", _) => traces = Some(v),
            _ => {}
        }
    }
    let (Some(segments), Some(traces)) = (segments, traces) else {
        return Err(bad(
            "no `segments` and `device_traces` (record with \
             torch.cuda.memory._record_memory_history() before _dump_snapshot)",
        ));
    };
    let traces = r.list(traces, &|| "device_traces".into())?;
    let devices: Vec<Value> = pickle.items(traces).collect();
    let mut lengths = Vec::with_capacity(devices.len());
    for (d, &t) in devices.iter().enumerate() {
        lengths.push(pickle.len(r.list(t, &|| format!("device_traces[{d}]"))?));
    }
    let device = match device {
        Some(d) if (d as usize) < devices.len() => d as usize,
        Some(d) => {
            return Err(bad(format!(
                "no device {d}: the snapshot traces {} devices",
                devices.len()
            )))
        }
        // The busiest device; the first of equals.
        None => (0..devices.len())
            .max_by_key(|&d| (lengths[d], std::cmp::Reverse(d)))
            .ok_or_else(|| bad("device_traces is empty"))?,
    };
    let trace = r.list(devices[device], &|| format!("device_traces[{device}]"))?;
    let n = pickle.len(trace);
    if n >= u32::MAX - 1 {
        return Err(bad(format!("{n} events: at most 2^32 - 2 are read")));
    }
    let end = n + 1;
    let mut out = Recording {
        label: format!("device {device}"),
        allocator: "PyTorch caching allocator".into(),
        events: n,
        max_buffer_size: crate::pool::BufferPoolConfig::default().max_buffer_size as u64,
        ..Recording::default()
    };
    // Address -> allocation live there, and freed ones awaiting `free_completed`.
    let mut live: FxHashMap<u64, usize> = FxHashMap::default();
    let mut pending: FxHashMap<u64, usize> = FxHashMap::default();
    // Address -> segment held there.
    let mut held: FxHashMap<u64, usize> = FxHashMap::default();
    let (mut reserved, mut grown, mut shrunk) = (0i128, 0i128, 0i128);
    let mut changes: Vec<(u32, i128)> = Vec::new();
    let (mut unmatched, mut other) = (0u64, 0u64);
    for (i, e) in pickle.items(trace).enumerate() {
        let at = i as u32 + 1;
        let what = || format!("device_traces[{device}][{i}]");
        let d = r.dict(e, &what)?;
        let mut ev = Event::default();
        for (k, v) in pickle.pairs(d) {
            match r.field(k) {
                Field::Action => ev.action = Some(r.action(v, &what)?),
                Field::Addr => ev.addr = Some(r.uint(v, u64::MAX, &|| format!("{}.addr", what()))?),
                Field::Size => {
                    ev.size = Some(r.uint(v, MAX_BYTES, &|| format!("{}.size", what()))?)
                }
                Field::Stream => ev.stream = r.stream(v, &|| format!("{}.stream", what()))?,
                Field::Frames => ev.stack = r.stack(v, &what)?,
                _ => {}
            }
        }
        let Some(action) = ev.action else {
            return Err(bad(format!("{} has no `action`", what())));
        };
        if action == Action::Other {
            other += 1;
            continue;
        }
        let (Some(addr), Some(size)) = (ev.addr, ev.size) else {
            return Err(bad(format!("{} has no `addr` or no `size`", what())));
        };
        let allocations = &mut out.allocations;
        match action {
            Action::Alloc => {
                if let Some(j) = live.insert(addr, allocations.len()) {
                    // Its free was not recorded (skip_actions): it ends here.
                    allocations[j].end = at;
                    allocations[j].released = at;
                    unmatched += 1;
                }
                allocations.push(Allocation {
                    size,
                    block: block_size(size),
                    address: addr,
                    stream: ev.stream,
                    start: at,
                    end,
                    released: end,
                    stack: ev.stack,
                    poolable: true,
                });
            }
            Action::FreeRequested => {
                let j = match live.remove(&addr) {
                    Some(j) => j,
                    None => {
                        // Allocated before the trace began.
                        allocations.push(Allocation {
                            size,
                            block: block_size(size),
                            address: addr,
                            stream: ev.stream,
                            start: 0,
                            end,
                            released: end,
                            stack: ev.stack,
                            poolable: true,
                        });
                        allocations.len() - 1
                    }
                };
                allocations[j].end = at;
                pending.insert(addr, j);
            }
            Action::FreeCompleted => match pending.remove(&addr) {
                Some(j) => allocations[j].released = at,
                // No free_requested recorded: the free ends it.
                None => match live.remove(&addr) {
                    Some(j) => {
                        allocations[j].end = at;
                        allocations[j].released = at;
                        unmatched += 1;
                    }
                    // Freed before the trace began; reusable from here.
                    None => unmatched += 1,
                },
            },
            Action::SegmentAlloc | Action::SegmentMap => {
                reserved += i128::from(size);
                grown += i128::from(size);
                changes.push((at, reserved));
                held.insert(addr, out.segments.len());
                out.segments.push(Segment {
                    address: addr,
                    size,
                    stream: ev.stream,
                    start: at,
                    end,
                });
            }
            Action::SegmentFree | Action::SegmentUnmap => {
                reserved -= i128::from(size);
                shrunk += i128::from(size);
                changes.push((at, reserved));
                match held.remove(&addr) {
                    Some(j) => out.segments[j].end = at,
                    // Held before the trace began.
                    None => out.segments.push(Segment {
                        address: addr,
                        size,
                        stream: ev.stream,
                        start: 0,
                        end: at,
                    }),
                }
            }
            Action::Other => {}
        }
    }

    // The segments at the end: the reserved bytes then, and the blocks still
    // allocated that the trace never saw allocated (live before it began).
    let segments = r.list(segments, &|| "segments".into())?;
    let mut reserved_at_end: i128 = 0;
    let mut before = Vec::new();
    for (s, seg) in pickle.items(segments).enumerate() {
        let what = || format!("segments[{s}]");
        let d = r.dict(seg, &what)?;
        let (mut dev, mut address, mut total, mut stream, mut blocks) = (None, 0, 0, 0, None);
        for (k, v) in pickle.pairs(d) {
            match r.field(k) {
                Field::Device => {
                    dev = Some(r.uint(v, u64::from(u32::MAX), &|| format!("{}.device", what()))?)
                }
                Field::Address => {
                    address = r.uint(v, u64::MAX, &|| format!("{}.address", what()))?
                }
                Field::TotalSize => {
                    total = r.uint(v, MAX_BYTES, &|| format!("{}.total_size", what()))?
                }
                Field::Stream => stream = r.stream(v, &|| format!("{}.stream", what()))?,
                Field::Blocks => blocks = Some(v),
                _ => {}
            }
        }
        // Segments without a device predate multi-device snapshots: device 0.
        if dev.unwrap_or(0) != device as u64 {
            continue;
        }
        reserved_at_end += i128::from(total);
        if !held.contains_key(&address) {
            out.segments.push(Segment {
                address,
                size: total,
                stream,
                start: 0,
                end,
            });
        }
        let Some(blocks) = blocks else { continue };
        let list = r.list(blocks, &|| format!("{}.blocks", what()))?;
        let mut offset = address;
        for (b, block) in pickle.items(list).enumerate() {
            let what = || format!("segments[{s}].blocks[{b}]");
            let bd = r.dict(block, &what)?;
            let (mut size, mut requested, mut state, mut addr, mut stack) =
                (None, None, None, None, 0);
            for (k, v) in pickle.pairs(bd) {
                match r.field(k) {
                    Field::Size => {
                        size = Some(r.uint(v, MAX_BYTES, &|| format!("{}.size", what()))?)
                    }
                    Field::RequestedSize => {
                        requested =
                            Some(r.uint(v, MAX_BYTES, &|| format!("{}.requested_size", what()))?)
                    }
                    Field::State => state = Some(r.string(v, &|| format!("{}.state", what()))?),
                    Field::Address => {
                        addr = Some(r.uint(v, u64::MAX, &|| format!("{}.address", what()))?)
                    }
                    Field::Frames => stack = r.stack(v, &what)?,
                    _ => {}
                }
            }
            let Some(size) = size else {
                return Err(bad(format!("{} has no `size`", what())));
            };
            // Older snapshots give no block address: blocks tile their segment.
            let addr = addr.unwrap_or(offset);
            offset = offset.saturating_add(size);
            if state.as_deref() == Some("active_allocated") && !live.contains_key(&addr) {
                before.push(Allocation {
                    size: requested.unwrap_or(size),
                    block: size,
                    address: addr,
                    stream,
                    start: 0,
                    end,
                    released: end,
                    stack,
                    poolable: true,
                });
            }
        }
    }
    out.allocations.extend(before);

    let at_start = reserved_at_end - grown + shrunk;
    let shift = if at_start < 0 {
        out.notes.push(format!(
            "the segments at the end hold {reserved_at_end} bytes, fewer than the trace \
             created ({grown} created, {shrunk} freed): reserved bytes counted from 0"
        ));
        -at_start
    } else {
        0
    };
    let to_u64 = |v: i128| u64::try_from(v.max(0)).unwrap_or(u64::MAX);
    out.reserved = Reserved {
        at_start: to_u64(at_start + shift),
        changes: changes
            .into_iter()
            .map(|(at, v)| (at, to_u64(at_start + shift + v)))
            .collect(),
    };
    if unmatched > 0 {
        out.notes.push(format!(
            "{unmatched} frees without their allocation or allocations without their free \
             (recorded with skip_actions, or the trace's ring buffer wrapped)"
        ));
    }
    if other > 0 {
        out.notes.push(format!(
            "{other} events that move no memory (oom, snapshot, annotate) skipped"
        ));
    }
    out.stacks = std::mem::take(&mut r.stacks);
    Ok(out)
}

//! Snapshots written here, for the tests of `tidepool::snapshot`: a pickler that
//! writes what Python's does for plain values (protocol 4: strings written once and
//! referred to after, every container memoised, items in batches of 1000), and a
//! training loop's snapshot of any size built with it. Natively and in wasm alike.
#![allow(dead_code)]

use std::collections::HashMap;

/// Python's pickler, for dicts, lists, tuples, strings, integers, floats, booleans
/// and `None`.
pub struct Pickler {
    pub out: Vec<u8>,
    strings: HashMap<String, u32>,
    memo: u32,
}

/// Items a batch (`APPENDS`, `SETITEMS`), as Python writes them.
const BATCH: usize = 1000;

impl Default for Pickler {
    fn default() -> Self {
        Pickler {
            out: vec![0x80, 4],
            strings: HashMap::new(),
            memo: 0,
        }
    }
}

impl Pickler {
    pub fn memoize(&mut self) -> u32 {
        self.out.push(0x94);
        self.memo += 1;
        self.memo - 1
    }

    /// A reference to memo slot `id`.
    pub fn get(&mut self, id: u32) {
        if id < 256 {
            self.out.extend([b'h', id as u8]);
        } else {
            self.out.push(b'j');
            self.out.extend(id.to_le_bytes());
        }
    }

    pub fn str(&mut self, s: &str) {
        if let Some(&id) = self.strings.get(s) {
            return self.get(id);
        }
        if s.len() < 256 {
            self.out.extend([0x8c, s.len() as u8]);
        } else {
            self.out.push(b'X');
            self.out.extend((s.len() as u32).to_le_bytes());
        }
        self.out.extend(s.as_bytes());
        let id = self.memoize();
        self.strings.insert(s.to_owned(), id);
    }

    pub fn int(&mut self, v: i64) {
        match v {
            0..=0xff => self.out.extend([b'K', v as u8]),
            0x100..=0xffff => {
                self.out.push(b'M');
                self.out.extend((v as u16).to_le_bytes());
            }
            _ if i32::try_from(v).is_ok() => {
                self.out.push(b'J');
                self.out.extend((v as i32).to_le_bytes());
            }
            _ => {
                // LONG1: the fewest little-endian two's complement bytes.
                let bytes = v.to_le_bytes();
                let mut n = 8;
                while n > 1 {
                    let (top, next) = (bytes[n - 1], bytes[n - 2]);
                    let redundant =
                        (top == 0 && next & 0x80 == 0) || (top == 0xff && next & 0x80 != 0);
                    if !redundant {
                        break;
                    }
                    n -= 1;
                }
                self.out.extend([0x8a, n as u8]);
                self.out.extend(&bytes[..n]);
            }
        }
    }

    /// A dict entry: a string key and an integer.
    pub fn entry_int(&mut self, key: &str, v: i64) {
        self.str(key);
        self.int(v);
    }

    /// A dict entry: a string key and a string.
    pub fn entry_str(&mut self, key: &str, v: &str) {
        self.str(key);
        self.str(v);
    }

    pub fn float(&mut self, v: f64) {
        self.out.push(b'G');
        self.out.extend(v.to_be_bytes());
    }

    pub fn bool(&mut self, v: bool) {
        self.out.push(if v { 0x88 } else { 0x89 });
    }

    pub fn none(&mut self) {
        self.out.push(b'N');
    }

    /// A dict of `n` entries, `entry(self, i)` writing the key and value of each.
    pub fn dict(&mut self, n: usize, mut entry: impl FnMut(&mut Self, usize)) -> u32 {
        self.out.push(b'}');
        let id = self.memoize();
        self.batches(n, b'u', |p, i| entry(p, i));
        id
    }

    /// A list of `n` items, `item(self, i)` writing each.
    pub fn list(&mut self, n: usize, mut item: impl FnMut(&mut Self, usize)) -> u32 {
        self.out.push(b']');
        let id = self.memoize();
        self.batches(n, b'e', |p, i| item(p, i));
        id
    }

    pub fn tuple2(&mut self, a: i64, b: i64) {
        self.int(a);
        self.int(b);
        self.out.push(0x86);
        self.memoize();
    }

    fn batches(&mut self, n: usize, op: u8, mut write: impl FnMut(&mut Self, usize)) {
        let mut i = 0;
        while i < n {
            let end = (i + BATCH).min(n);
            if end - i == 1 {
                write(self, i);
                self.out.push(if op == b'e' { b'a' } else { b's' });
            } else {
                self.out.push(b'(');
                for j in i..end {
                    write(self, j);
                }
                self.out.push(op);
            }
            i = end;
        }
    }

    pub fn finish(mut self) -> Vec<u8> {
        self.out.push(b'.');
        self.out
    }
}

/// A snapshot of no segments whose `device_traces` value `traces` writes.
pub fn with_traces(traces: impl Fn(&mut Pickler)) -> Vec<u8> {
    let mut p = Pickler::default();
    p.dict(2, |p, i| {
        if i == 0 {
            p.str("segments");
            p.list(0, |_, _| {});
        } else {
            p.str("device_traces");
            traces(p);
        }
    });
    p.finish()
}

/// One event of a made-up trace.
#[derive(Clone, Copy, Debug)]
pub struct Event {
    pub action: &'static str,
    pub addr: u64,
    pub size: u64,
    pub stream: i64,
    /// Which stack (the same stack for an allocation's alloc and frees).
    pub stack: usize,
}

/// A made-up training run: its events, the segments at the end, and what PyTorch
/// would report.
pub struct Run {
    pub events: Vec<Event>,
    /// (address, size, requested bytes when allocated, allocated)
    pub blocks: Vec<(u64, u64, u64, bool)>,
    pub max_allocated: u64,
    pub max_reserved: u64,
    /// Allocations and frees a step.
    pub step_symbols: usize,
    pub stacks: usize,
}

fn block(size: u64) -> u64 {
    size.max(1).div_ceil(512) * 512
}

/// A caching allocator that keeps freed blocks by size, one block a segment.
#[derive(Default)]
struct Sim {
    next_addr: u64,
    free: HashMap<u64, Vec<u64>>,
    /// address -> (block, requested, allocated)
    blocks: HashMap<u64, (u64, u64, bool)>,
    allocated: u64,
    reserved: u64,
    max_allocated: u64,
    max_reserved: u64,
    events: Vec<Event>,
    stacks: usize,
    recording: bool,
}

impl Sim {
    fn record(&mut self, action: &'static str, addr: u64, size: u64, stack: usize) {
        if self.recording {
            self.events.push(Event {
                action,
                addr,
                size,
                stream: 0,
                stack,
            });
        }
    }

    fn malloc(&mut self, size: u64) -> (u64, usize) {
        let b = block(size);
        let addr = match self.free.get_mut(&b).and_then(|v| v.pop()) {
            Some(addr) => addr,
            None => {
                let addr = self.next_addr;
                self.next_addr += b.div_ceil(2 << 20) * (2 << 20);
                self.reserved += b;
                self.record("segment_alloc", addr, b, 0);
                addr
            }
        };
        self.blocks.insert(addr, (b, size, true));
        self.allocated += b;
        self.max_allocated = self.max_allocated.max(self.allocated);
        self.max_reserved = self.max_reserved.max(self.reserved);
        self.stacks += 1;
        self.record("alloc", addr, size, self.stacks);
        (addr, self.stacks)
    }

    fn free(&mut self, addr: u64, size: u64, stack: usize) {
        let b = self.blocks[&addr].0;
        self.blocks.insert(addr, (b, 0, false));
        self.allocated -= b;
        self.record("free_requested", addr, size, stack);
        self.record("free_completed", addr, size, stack);
        self.free.entry(b).or_default().push(addr);
    }
}

/// `steps` training steps of `layers` layers (parameters allocated before the
/// trace): each step allocates activations forward and frees them backward.
pub fn run(steps: usize, layers: usize) -> Run {
    let mut sim = Sim {
        next_addr: 0x7f00_0000_0000,
        ..Sim::default()
    };
    for l in 0..layers {
        sim.malloc(4096 * (l as u64 % 3 + 1));
    }
    // Peak statistics reset when recording starts.
    sim.recording = true;
    sim.max_allocated = sim.allocated;
    sim.max_reserved = sim.reserved;
    let mut step_symbols = 0;
    for step in 0..steps {
        let before = sim.events.len();
        let mut live = Vec::new();
        for l in 0..layers {
            for k in 0..3u64 {
                let size = 1000 * (k + 1) + 300 * (l as u64 % 4) + 7;
                live.push((sim.malloc(size), size));
            }
        }
        while let Some(((addr, stack), size)) = live.pop() {
            sim.free(addr, size, stack);
        }
        if step == 1 {
            step_symbols = sim.events[before..]
                .iter()
                .filter(|e| e.action == "alloc" || e.action == "free_requested")
                .count();
        }
    }
    let mut blocks: Vec<(u64, u64, u64, bool)> = sim
        .blocks
        .iter()
        .map(|(&addr, &(b, size, live))| (addr, b, size, live))
        .collect();
    blocks.sort_unstable();
    Run {
        events: sim.events,
        blocks,
        max_allocated: sim.max_allocated,
        max_reserved: sim.max_reserved,
        step_symbols,
        stacks: sim.stacks,
    }
}

/// Frames a stack, and distinct frames in all: each allocation's stack is a list
/// of its own (PyTorch gathers a traceback an allocation) whose frames are shared.
pub const FRAMES_PER_STACK: usize = 20;
pub const DISTINCT_FRAMES: usize = 300;

/// `run` as the pickle `_dump_snapshot` writes.
pub fn pickle(run: &Run) -> Vec<u8> {
    let mut p = Pickler::default();
    // Memo ids of each frame dict and each stack's list, once written.
    let mut frames: Vec<Option<u32>> = vec![None; DISTINCT_FRAMES];
    let mut stacks: Vec<Option<u32>> = vec![None; run.stacks + 1];
    p.dict(3, |p, i| match i {
        0 => {
            p.str("segments");
            p.list(run.blocks.len(), |p, s| {
                let (addr, size, requested, live) = run.blocks[s];
                p.dict(10, |p, k| match k {
                    0 => p.entry_int("device", 0),
                    1 => p.entry_int("address", addr as i64),
                    2 => p.entry_int("total_size", size as i64),
                    3 => p.entry_int("allocated_size", if live { size as i64 } else { 0 }),
                    4 => p.entry_int("active_size", if live { size as i64 } else { 0 }),
                    5 => p.entry_int("requested_size", requested as i64),
                    6 => p.entry_int("stream", 0),
                    7 => p.entry_str("segment_type", "small"),
                    8 => {
                        p.str("segment_pool_id");
                        p.tuple2(0, 0);
                    }
                    _ => {
                        p.str("blocks");
                        p.list(1, |p, _| {
                            p.dict(5, |p, k| match k {
                                0 => p.entry_int("address", addr as i64),
                                1 => p.entry_int("size", size as i64),
                                2 => p.entry_int("requested_size", requested as i64),
                                3 => {
                                    p.str("state");
                                    p.str(if live { "active_allocated" } else { "inactive" });
                                }
                                _ => {
                                    p.str("frames");
                                    p.list(0, |_, _| {});
                                }
                            });
                        });
                    }
                });
            });
        }
        1 => {
            p.str("device_traces");
            p.list(1, |p, _| {
                p.list(run.events.len(), |p, i| {
                    let e = run.events[i];
                    p.dict(6, |p, k| match k {
                        0 => p.entry_str("action", e.action),
                        1 => p.entry_int("addr", e.addr as i64),
                        2 => p.entry_int("size", e.size as i64),
                        3 => p.entry_int("stream", e.stream),
                        4 => p.entry_int("time_us", 1_700_000_000_000_000 + i as i64),
                        _ => {
                            p.str("frames");
                            match stacks[e.stack] {
                                Some(id) => p.get(id),
                                None => {
                                    let id = p.list(FRAMES_PER_STACK, |p, f| {
                                        let which = (e.stack * 7 + f * 13) % DISTINCT_FRAMES;
                                        match frames[which] {
                                            Some(id) => p.get(id),
                                            None => {
                                                let id = p.dict(3, |p, k| match k {
                                                    0 => p.entry_str(
                                                        "filename",
                                                        &format!(
                                                            "/src/model/part{}.py",
                                                            which % 17
                                                        ),
                                                    ),
                                                    1 => p.entry_int("line", which as i64 + 1),
                                                    _ => p.entry_str(
                                                        "name",
                                                        &format!("function_{which}"),
                                                    ),
                                                });
                                                frames[which] = Some(id);
                                            }
                                        }
                                    });
                                    stacks[e.stack] = Some(id);
                                }
                            }
                        }
                    });
                });
            });
        }
        _ => {
            p.str("allocator_settings");
            p.dict(2, |p, k| match k {
                0 => {
                    p.str("garbage_collection_threshold");
                    p.float(0.0);
                }
                _ => {
                    p.str("expandable_segments");
                    p.bool(false);
                }
            });
        }
    });
    p.finish()
}

/// A snapshot of at least `bytes` bytes: enough steps of a 24-layer run.
pub fn of_size(bytes: usize) -> (Run, Vec<u8>) {
    // Bytes a step, from two small runs (the first step writes the stacks' frames).
    let (two, three) = (pickle(&run(2, 24)).len(), pickle(&run(3, 24)).len());
    let steps = bytes.saturating_sub(two) / (three - two) + 3;
    let run = run(steps, 24);
    let bytes = pickle(&run);
    (run, bytes)
}

/// This thread's CPU time natively (Linux; 0 elsewhere), for figures that a loaded
/// machine's waiting does not blur.
pub fn cpu_ms() -> f64 {
    #[cfg(target_os = "linux")]
    if let Ok(stat) = std::fs::read_to_string("/proc/thread-self/stat") {
        // Fields after the command's closing parenthesis; utime and stime are the
        // 12th and 13th of them, in ticks of 10 ms.
        let rest = stat.rsplit(')').next().unwrap_or("");
        let f: Vec<f64> = rest
            .split_whitespace()
            .map(|x| x.parse().unwrap_or(0.0))
            .collect();
        return (f.get(11).unwrap_or(&0.0) + f.get(12).unwrap_or(&0.0)) * 10.0;
    }
    0.0
}

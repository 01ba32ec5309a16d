//! The allocation trace: every pool and buffer event of a step, in order, with the
//! op that asked. Off by default; off, each event site costs one relaxed atomic load.
//!
//! A training step repeats exactly, so one step's trace tells the whole story and
//! [`crate::replay`] can run it through other policies without the GPU. The JSON
//! format is documented in `docs/trace.md`.
//!
//! Events come in three families:
//! - a tensor's birth: `hit`, `miss`, `oversize` (from the pool or new) or
//!   `unpooled` (a buffer that never joins the pool: `upload`, or `--no-pool`);
//! - a tensor's death: `release` (kept by the pool), `reject` (turned away, with its
//!   `cause`) or `discard` (an unpooled buffer);
//! - GPU buffers themselves: `create`, `destroy`, `evict` (destroyed by idle
//!   eviction or `trim`).
//!
//! The op: births are credited to the next kernel dispatched (launchers draw their
//! outputs, then dispatch), everything else to the last kernel dispatched. The
//! layer is whatever [`crate::WgpuContext::set_trace_layer`] set last.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::Mutex;

use crate::pool::{BucketStats, Rejection};

/// Format name and version written in every trace file.
pub const FORMAT: &str = "tidepool-trace";
pub const VERSION: u32 = 1;

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A tensor got a free buffer from its size class.
    Hit,
    /// Its class was empty: a new buffer (its `create` comes just before).
    Miss,
    /// Above the pool's largest class: a new buffer (after its `create`), never pooled.
    Oversize,
    /// A buffer that never joins the pool (`WgpuContext::upload`, or pooling off).
    Unpooled,
    /// A tensor died; the pool kept its buffer.
    Release,
    /// A tensor died; the pool turned its buffer away (`cause`); a `destroy` follows.
    Reject,
    /// An unpooled tensor died; a `destroy` follows.
    Discard,
    /// A GPU buffer was created.
    Create,
    /// A GPU buffer was destroyed (after the submit when recording).
    Destroy,
    /// A free buffer was destroyed by idle eviction or `trim`.
    Evict,
}

impl EventKind {
    /// Births: the tensor is live from this event.
    pub fn is_birth(self) -> bool {
        matches!(
            self,
            EventKind::Hit | EventKind::Miss | EventKind::Oversize | EventKind::Unpooled
        )
    }

    /// Deaths: the tensor is dead from this event.
    pub fn is_death(self) -> bool {
        matches!(
            self,
            EventKind::Release | EventKind::Reject | EventKind::Discard
        )
    }
}

/// One event.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TraceEvent {
    /// Position within the step, from 0.
    pub seq: u32,
    pub kind: EventKind,
    /// The kernel (pipeline name) that asked; see the module docs.
    pub op: Cow<'static, str>,
    /// Transformer block, when the model set one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer: Option<u32>,
    /// `storage`, `upload`, `staging`, `readback` or `uniform`.
    pub purpose: Cow<'static, str>,
    /// Bytes asked for (for `create`/`destroy`/`evict`: the buffer's size).
    pub requested: u64,
    /// The size class (the buffer's size).
    pub class: u64,
    /// Stable id of the GPU buffer within the context, from 1 in creation order.
    pub buffer: u64,
    /// Where the tensor starts in `buffer`, for a tensor at a planned range of an
    /// arena (the planned policy's births and deaths): many tensors share an arena,
    /// and `(buffer, offset)` tells them apart. Absent for whole buffers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// Why a `reject` was turned away.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<Rejection>,
    /// Bytes of live tensors (size classes) just after the event.
    pub in_use: u64,
    /// Bytes the pool held free just after the event.
    pub held: u64,
}

/// One step's events and where the pool stood when it began.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StepTrace {
    /// Training step number (1 = the first).
    pub step: u32,
    /// `first`, `steady`, or what the caller named it.
    pub label: String,
    /// Bytes of live tensors when the step began (weights, optimizer state, ...).
    pub in_use_at_start: u64,
    /// Bytes the pool held free when the step began, and per class.
    pub held_at_start: u64,
    pub free_at_start: Vec<BucketStats>,
    pub events: Vec<TraceEvent>,
    /// The most bytes reserved at once during the step, as the run's
    /// `peak_bytes_reserved` counts them (pooled buffers in use and held free, and
    /// the planned policy's arenas). Absent in files written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_reserved: Option<u64>,
}

/// A trace file: the run's setting and some traced steps.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Trace {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`VERSION`].
    pub version: u32,
    /// The adapter it ran on.
    pub adapter: String,
    /// The pool's size policy (`pow2`, `pow2/8`, `exact`).
    pub policy: String,
    /// The pool's largest pooled class, bytes.
    pub max_buffer_size: u64,
    /// The pool's `fit_ratio` (a free buffer up to this many times a request's
    /// class may serve it). Absent in files written before it existed: 1.
    #[serde(default = "one")]
    pub fit_ratio: u32,
    pub steps: Vec<StepTrace>,
}

fn one() -> u32 {
    1
}

impl Trace {
    pub fn new(adapter: &str, policy: &str, max_buffer_size: u64) -> Self {
        Trace {
            format: FORMAT.into(),
            version: VERSION,
            adapter: adapter.into(),
            policy: policy.into(),
            max_buffer_size,
            fit_ratio: 1,
            steps: Vec::new(),
        }
    }

    /// Parses and checks a trace file's text.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let trace: Trace =
            serde_json::from_str(text).map_err(|e| format!("not a tidepool trace: {e}"))?;
        if trace.format != FORMAT || trace.version != VERSION {
            return Err(format!(
                "not a {FORMAT} version {VERSION} file (format {:?}, version {})",
                trace.format, trace.version
            ));
        }
        Ok(trace)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a trace serialises")
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where events are recorded. Owned by the memory manager.
pub(crate) struct Recorder {
    on: AtomicBool,
    /// `u32::MAX`: no layer.
    layer: AtomicU32,
    state: Mutex<State>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            on: AtomicBool::new(false),
            layer: AtomicU32::new(u32::MAX),
            state: Mutex::default(),
        }
    }
}

#[derive(Default)]
struct State {
    events: Vec<TraceEvent>,
    /// Births from here on wait for the next dispatch to name their op.
    pending: Vec<usize>,
    last_op: &'static str,
}

/// An event's fields other than its position, op and layer.
pub(crate) struct Fields {
    pub kind: EventKind,
    pub purpose: &'static str,
    pub requested: u64,
    pub class: u64,
    pub buffer: u64,
    pub offset: Option<u64>,
    pub cause: Option<Rejection>,
    pub in_use: u64,
    pub held: u64,
}

impl Recorder {
    #[inline]
    pub fn on(&self) -> bool {
        self.on.load(Relaxed)
    }

    pub fn start(&self) {
        let mut state = lock(&self.state);
        *state = State::default();
        self.on.store(true, Relaxed);
    }

    /// Stops recording and hands over the events.
    pub fn stop(&self) -> Vec<TraceEvent> {
        self.on.store(false, Relaxed);
        let mut state = lock(&self.state);
        let last = state.last_op;
        let mut events = std::mem::take(&mut state.events);
        // Births after the last dispatch (a readback, a copy) go to the last op.
        for i in std::mem::take(&mut state.pending) {
            events[i].op = Cow::Borrowed(last);
        }
        events
    }

    pub fn set_layer(&self, layer: Option<u32>) {
        self.layer.store(layer.unwrap_or(u32::MAX), Relaxed);
    }

    pub fn record(&self, f: Fields) {
        let layer = self.layer.load(Relaxed);
        let mut state = lock(&self.state);
        let seq = state.events.len() as u32;
        let birth = f.kind.is_birth() || f.kind == EventKind::Create;
        if birth {
            state.pending.push(seq as usize);
        }
        let op = if birth { "" } else { state.last_op };
        state.events.push(TraceEvent {
            seq,
            kind: f.kind,
            op: Cow::Borrowed(op),
            layer: (layer != u32::MAX).then_some(layer),
            purpose: Cow::Borrowed(f.purpose),
            requested: f.requested,
            class: f.class,
            buffer: f.buffer,
            offset: f.offset,
            cause: f.cause,
            in_use: f.in_use,
            held: f.held,
        });
    }

    /// Events so far (a mark for [`Recorder::name_births_since`]).
    pub fn mark(&self) -> usize {
        lock(&self.state).events.len()
    }

    /// Births since `mark` are `op`'s, not the next kernel's: for buffers drawn
    /// outside a kernel launcher (a step's gradient arena).
    pub fn name_births_since(&self, mark: usize, op: &'static str) {
        let mut state = lock(&self.state);
        let state = &mut *state;
        let (events, pending) = (&mut state.events, &mut state.pending);
        pending.retain(|&i| {
            if i >= mark {
                events[i].op = Cow::Borrowed(op);
            }
            i < mark
        });
    }

    /// A kernel was dispatched: it is the op of the births waiting for one.
    pub fn dispatched(&self, op: &'static str) {
        let mut state = lock(&self.state);
        for i in std::mem::take(&mut state.pending) {
            state.events[i].op = Cow::Borrowed(op);
        }
        state.last_op = op;
    }
}

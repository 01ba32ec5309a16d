//! The context's counters: what it created, dispatched and submitted, and the bytes
//! its live buffers take, kept as relaxed atomics and read as one snapshot. What was
//! created is also counted by the path that asked ([`Path`]) and, for buffers, by
//! what they are for ([`BuffersByPurpose`]): after warm-up a training step creates
//! nothing, and a path that needs objects of its own (an evaluation, a sample) makes
//! them once, at its first use, where these counts show it.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};

/// What the context is doing for its caller, for the counts of what it creates:
/// set by the trainer around each of its paths ([`super::WgpuContext::on_path`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Path {
    /// Anything else: building the trainer, uploading the weights, a kernel run by hand.
    #[default]
    Setup,
    /// Training steps.
    Train,
    /// Held-out evaluation.
    Evaluate,
    /// Text sampling.
    Sample,
    /// Saving or loading a checkpoint.
    Checkpoint,
}

const PATHS: usize = 5;

/// Objects created: buffers, bind groups, pipelines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Created {
    pub buffers: u64,
    pub bind_groups: u64,
    pub pipelines: u64,
}

impl Created {
    fn since(self, before: Created) -> Created {
        Created {
            buffers: self.buffers.saturating_sub(before.buffers),
            bind_groups: self.bind_groups.saturating_sub(before.bind_groups),
            pipelines: self.pipelines.saturating_sub(before.pipelines),
        }
    }

    fn plus(self, other: Created) -> Created {
        Created {
            buffers: self.buffers + other.buffers,
            bind_groups: self.bind_groups + other.bind_groups,
            pipelines: self.pipelines + other.pipelines,
        }
    }
}

/// [`Created`] by the [`Path`] that asked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CreatedByPath {
    pub setup: Created,
    pub train: Created,
    pub evaluate: Created,
    pub sample: Created,
    pub checkpoint: Created,
}

impl CreatedByPath {
    fn paths(&self) -> [Created; PATHS] {
        [
            self.setup,
            self.train,
            self.evaluate,
            self.sample,
            self.checkpoint,
        ]
    }

    fn from_paths([setup, train, evaluate, sample, checkpoint]: [Created; PATHS]) -> Self {
        CreatedByPath {
            setup,
            train,
            evaluate,
            sample,
            checkpoint,
        }
    }

    /// What was created after `before` (an earlier snapshot of the same counts).
    pub fn since(&self, before: &CreatedByPath) -> CreatedByPath {
        let (now, then) = (self.paths(), before.paths());
        CreatedByPath::from_paths(std::array::from_fn(|i| now[i].since(then[i])))
    }

    /// Every path's together.
    pub fn total(&self) -> Created {
        self.paths()
            .into_iter()
            .fold(Created::default(), Created::plus)
    }
}

/// Buffers created, by what they are for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct BuffersByPurpose {
    /// Pooled storage (tensors).
    pub storage: u64,
    /// Storage filled at creation, never pooled.
    pub upload: u64,
    /// Upload staging chunks.
    pub staging: u64,
    /// Readback buffers.
    pub readback: u64,
    /// Chunks of the uniform-parameter arena.
    pub uniform: u64,
    /// Timestamp-query resolve buffers.
    pub timestamps: u64,
}

impl BuffersByPurpose {
    fn counts(&self) -> [u64; 6] {
        [
            self.storage,
            self.upload,
            self.staging,
            self.readback,
            self.uniform,
            self.timestamps,
        ]
    }

    /// What was created after `before`.
    pub fn since(&self, before: &BuffersByPurpose) -> BuffersByPurpose {
        let (now, then) = (self.counts(), before.counts());
        let [storage, upload, staging, readback, uniform, timestamps] =
            std::array::from_fn(|i| now[i].saturating_sub(then[i]));
        BuffersByPurpose {
            storage,
            upload,
            staging,
            readback,
            uniform,
            timestamps,
        }
    }
}

/// The context's counters, next to the pool's [`crate::BufferPoolStats`].
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct ContextCounters {
    /// Compute dispatches recorded.
    pub dispatches: u64,
    /// Queue submits.
    pub submits: u64,
    /// Batches written into a buffer kept across steps through the queue.
    pub queue_writes: u64,
    /// GPU buffers this context created, of every kind (pooled, uploads, staging,
    /// readback, kernel parameters). Flat in steady state means the pool is doing
    /// its job.
    pub buffers_created: u64,
    /// Their bytes.
    pub bytes_created: u64,
    /// Buffers the context destroyed (not pooled, rejected or evicted by the pool).
    pub buffers_destroyed: u64,
    /// Bind groups created (one per dispatch unless cached).
    pub bind_groups_created: u64,
    /// Command encoders created (one per submit).
    pub encoders_created: u64,
    /// Compute pipelines created (one per kernel, on first use).
    pub pipelines_created: u64,
    /// `write_buffer` calls that brought the kernels' uniform parameters up to date
    /// (at most one per arena chunk a submit, none when no parameter changed).
    pub uniform_writes: u64,
    /// Bytes of live `PooledBuffer`s (their size classes) now.
    pub bytes_in_use: u64,
    /// The most `bytes_in_use` has been.
    pub peak_bytes_in_use: u64,
    /// Bytes the live `PooledBuffer`s asked for (before rounding) now.
    pub bytes_requested_in_use: u64,
    /// The most `bytes_requested_in_use` has been.
    pub peak_bytes_requested_in_use: u64,
    /// The most GPU memory the pooled buffers have taken at once: in use plus held
    /// free by the pool. `peak_bytes_reserved / peak_bytes_requested_in_use` is what a
    /// size policy costs.
    pub peak_bytes_reserved: u64,
    /// Buffers, bind groups and pipelines created, by the path that asked.
    pub created_by_path: CreatedByPath,
    /// Buffers created, by what they are for.
    pub buffers_by_purpose: BuffersByPurpose,
    /// Bytes of the planned policy's arenas now (0 under the other policies).
    pub arena_bytes: u64,
    /// Storage requests served at their planned range.
    pub plan_hits: u64,
    /// Storage requests inside a planned step that the plan did not foresee (a
    /// different size or order); the pool served them and the next step is
    /// planned again.
    pub plan_misses: u64,
    /// Storage requests outside any training step (evaluation, sampling, a step's
    /// readback) while a plan is active: the pool serves them.
    pub plan_outside: u64,
    /// Dispatches that bound every storage operand `read_write`: all of them where
    /// forced (`--bindings read-write`), else those that read from an arena they
    /// also write (a planned step that went another way than the traced one).
    pub read_write_dispatches: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub dispatches: AtomicU64,
    pub submits: AtomicU64,
    pub queue_writes: AtomicU64,
    pub buffers_created: AtomicU64,
    pub bytes_created: AtomicU64,
    pub buffers_destroyed: AtomicU64,
    pub bind_groups_created: AtomicU64,
    pub encoders_created: AtomicU64,
    pub pipelines_created: AtomicU64,
    pub uniform_writes: AtomicU64,
    pub bytes_in_use: AtomicU64,
    pub peak_bytes_in_use: AtomicU64,
    pub bytes_requested_in_use: AtomicU64,
    pub peak_bytes_requested_in_use: AtomicU64,
    pub peak_bytes_reserved: AtomicU64,
    /// The most bytes reserved since [`Counters::start_traced_peak`]: a traced step's
    /// own peak, which [`Counters::reset_peaks`] does not start over.
    traced_peak_reserved: AtomicU64,
    pub arena_bytes: AtomicU64,
    /// Bytes of live tensors at planned ranges (part of `bytes_in_use`).
    pub planned_bytes_in_use: AtomicU64,
    pub plan_hits: AtomicU64,
    pub plan_misses: AtomicU64,
    pub plan_outside: AtomicU64,
    pub read_write_dispatches: AtomicU64,
    /// The [`Path`] now, as its index.
    path: AtomicU8,
    /// Per path: buffers, bind groups, pipelines.
    by_path: [[AtomicU64; 3]; PATHS],
    /// Per [`super::memory::Purpose`], in its order.
    by_purpose: [AtomicU64; 6],
}

/// What a creation was: the column of `Counters::by_path`.
#[derive(Clone, Copy)]
pub(crate) enum Object {
    Buffer = 0,
    BindGroup = 1,
    Pipeline = 2,
}

impl Counters {
    /// Sets the path now and returns the one before.
    pub fn set_path(&self, path: Path) -> Path {
        match self.path.swap(path as u8, Relaxed) {
            1 => Path::Train,
            2 => Path::Evaluate,
            3 => Path::Sample,
            4 => Path::Checkpoint,
            _ => Path::Setup,
        }
    }

    /// One `object` created, on the path now (buffers also by `purpose`, an index
    /// in [`BuffersByPurpose`]'s order).
    pub fn created(&self, object: Object, purpose: Option<usize>) {
        let path = usize::from(self.path.load(Relaxed)).min(PATHS - 1);
        self.by_path[path][object as usize].fetch_add(1, Relaxed);
        if let Some(i) = purpose {
            self.by_purpose[i].fetch_add(1, Relaxed);
        }
    }

    fn created_by_path(&self) -> CreatedByPath {
        CreatedByPath::from_paths(std::array::from_fn(|p| {
            let [buffers, bind_groups, pipelines] = &self.by_path[p];
            Created {
                buffers: buffers.load(Relaxed),
                bind_groups: bind_groups.load(Relaxed),
                pipelines: pipelines.load(Relaxed),
            }
        }))
    }

    fn buffers_by_purpose(&self) -> BuffersByPurpose {
        let [storage, upload, staging, readback, uniform, timestamps] =
            std::array::from_fn(|i| self.by_purpose[i].load(Relaxed));
        BuffersByPurpose {
            storage,
            upload,
            staging,
            readback,
            uniform,
            timestamps,
        }
    }

    pub fn snapshot(&self) -> ContextCounters {
        ContextCounters {
            dispatches: self.dispatches.load(Relaxed),
            submits: self.submits.load(Relaxed),
            queue_writes: self.queue_writes.load(Relaxed),
            buffers_created: self.buffers_created.load(Relaxed),
            bytes_created: self.bytes_created.load(Relaxed),
            buffers_destroyed: self.buffers_destroyed.load(Relaxed),
            bind_groups_created: self.bind_groups_created.load(Relaxed),
            encoders_created: self.encoders_created.load(Relaxed),
            pipelines_created: self.pipelines_created.load(Relaxed),
            uniform_writes: self.uniform_writes.load(Relaxed),
            bytes_in_use: self.bytes_in_use.load(Relaxed),
            peak_bytes_in_use: self.peak_bytes_in_use.load(Relaxed),
            bytes_requested_in_use: self.bytes_requested_in_use.load(Relaxed),
            peak_bytes_requested_in_use: self.peak_bytes_requested_in_use.load(Relaxed),
            peak_bytes_reserved: self.peak_bytes_reserved.load(Relaxed),
            created_by_path: self.created_by_path(),
            buffers_by_purpose: self.buffers_by_purpose(),
            arena_bytes: self.arena_bytes.load(Relaxed),
            plan_hits: self.plan_hits.load(Relaxed),
            plan_misses: self.plan_misses.load(Relaxed),
            plan_outside: self.plan_outside.load(Relaxed),
            read_write_dispatches: self.read_write_dispatches.load(Relaxed),
        }
    }

    /// Starts the peaks over from the values now, so that they measure what follows
    /// (a steady step after warm-up) and not the run so far.
    pub fn reset_peaks(&self, reserved_now: u64) {
        let at = |peak: &AtomicU64, now: &AtomicU64| peak.store(now.load(Relaxed), Relaxed);
        at(&self.peak_bytes_in_use, &self.bytes_in_use);
        at(
            &self.peak_bytes_requested_in_use,
            &self.bytes_requested_in_use,
        );
        self.peak_bytes_reserved.store(reserved_now, Relaxed);
        self.traced_peak_reserved.fetch_max(reserved_now, Relaxed);
    }

    /// Bytes reserved (in use and held free, arenas included) reached `reserved`:
    /// the peaks follow.
    pub fn note_reserved(&self, reserved: u64) {
        self.peak_bytes_reserved.fetch_max(reserved, Relaxed);
        self.traced_peak_reserved.fetch_max(reserved, Relaxed);
    }

    /// A traced step begins with `reserved_now` bytes reserved.
    pub fn start_traced_peak(&self, reserved_now: u64) {
        self.traced_peak_reserved.store(reserved_now, Relaxed);
    }

    /// The most bytes reserved since [`Counters::start_traced_peak`].
    pub fn traced_peak_reserved(&self) -> u64 {
        self.traced_peak_reserved.load(Relaxed)
    }
}

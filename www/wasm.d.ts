// Types of the wasm package, pkg/tidepool.js (`import init, { Trainer } from 'tidepool-gpu/wasm'`).
// wasm-bindgen writes pkg/tidepool.d.ts with `any` wherever a value crosses as a
// plain object (src/web/ serialises them with serde); this file gives those
// objects their shapes. tests/types/ checks that the methods here are exactly the
// generated ones, so a method added in src/web/ must be added here too.

export type { InitInput, InitOutput, SyncInitInput } from '../pkg/tidepool.js';
export { default, initSync, presets, policies, start } from '../pkg/tidepool.js';

/** The model presets `presets()` lists. */
export type PresetName = 'tiny' | 'small' | 'shakespeare';

/** How finely `pow2/N` splits each octave: a power of two up to 1024. */
export type PolicySubdivisions = 2 | 4 | 8 | 16 | 32 | 64 | 128 | 256 | 512 | 1024;

/** A size policy: `pow2`, `pow2/N` (each octave split in N), or `exact`. */
export type SizePolicyName = 'pow2' | `pow2/${PolicySubdivisions}` | 'exact';

// wasm-bindgen gives Trainer a [Symbol.dispose]() (for `using`). Symbol.dispose is in
// TypeScript's lib only from ESNext.Disposable on, so a project on the default ES2022
// lib would fail on it (TS2550): declared here as that lib declares it, which merges
// with it where a project has it.
declare global {
  interface SymbolConstructor {
    readonly dispose: unique symbol;
  }
}

/** What `Trainer.create` takes; unset fields come from the preset. Unknown fields are errors. */
export interface TrainerConfig {
  /** `tiny` (default), `small` or `shakespeare`: see `presets()`. */
  preset?: PresetName;
  layers?: number;
  heads?: number;
  /** Embedding width: a multiple of 4 and of `heads`; width / heads at most 128. */
  width?: number;
  context?: number;
  batch?: number;
  lr?: number;
  /** Length of the learning-rate schedule. */
  steps?: number;
  warmup?: number;
  /** Dropout probability during training. */
  dropout?: number;
  /** `nanogpt` (embeddings, residual branches, attention probabilities) or `residual`. */
  dropout_placement?: 'nanogpt' | 'residual';
  weight_decay?: number;
  grad_clip?: number;
  /** A whole number below 2^53. */
  seed?: number;
  /** Held-out evaluation every this many steps (inside `step()`; 0 or unset: never). */
  eval_every?: number;
  eval_batches?: number;
  /** `false`: every GPU buffer created fresh and destroyed after its step. */
  pool?: boolean;
  policy?: SizePolicyName;
  /**
   * Matmul operands: `f32` (default) or `f16` (rounded to f16, summed in f32). `f16`
   * needs the adapter's `shader-f16`; without it `create` rejects with kind `config`.
   */
  precision?: 'f32' | 'f16';
  /**
   * A step's work goes to the GPU in parts of up to this many dispatches (the first 4,
   * each next twice the last), so the GPU starts while the rest is recorded (0: one
   * submit a step; default 32; at most 2^20).
   */
  submit_every?: number;
  /**
   * Make each block's layernorm outputs again in the backward instead of keeping them
   * from the forward: less memory at the step's peak, one more layernorm pass each
   * (default false).
   */
  recompute?: boolean;
}

/**
 * Why a promise of the wasm API rejected: `error.kind`. `busy`: the call was made
 * before the trainer's previous one resolved; await each call before the next
 * (`steps(n)` alone may have two in flight).
 */
export type ErrorKind = 'config' | 'too_large' | 'corpus' | 'trace' | 'checkpoint' | 'no_webgpu' | 'device_lost' | 'busy' | 'internal';

/** What `trace()` resolves to; `JSON.stringify` it for `replayTrace` or a file. */
export interface AllocationTrace {
  steps: Record<string, unknown>[];
  [field: string]: unknown;
}

/** One arena of a memory plan: its buffer id in the allocation trace (`buffer` of its events) and size. */
export interface PlanArena {
  buffer: number;
  bytes: number;
}

/** Where one planned tensor lies: its arena (an index into `arenas`), offset and bytes bound. */
export interface PlanRange {
  arena: number;
  offset: number;
  size: number;
}

/** What `memoryPlan()` returns: the plan the planned policy's steps follow. */
export interface MemoryPlan {
  arenas: PlanArena[];
  /** Each planned tensor in the order a step asks for them (its births at arena ranges come in this order). */
  ranges: PlanRange[];
  /** Bytes the arenas take together. */
  reserved: number;
  /** Plans made so far (a new one when the step changed). */
  plans_made: number;
}

/** One row of a replay: an allocator's peak against the lower bound. */
export interface ReplayRow {
  /** `lower bound`, `<the allocator that ran> (recorded)`, `planned (live)`, `pow2/8 fit2`, `offset plan`, ... */
  allocator: string;
  peak_bytes: number;
  /** `peak_bytes` over the lower bound. */
  ratio: number;
  buffers_created: number;
  hits: number;
  /** Why the figure is not what the row's name promises (a plan cut short). */
  note?: string;
  [field: string]: unknown;
}

/** The most bytes at once: live (requested), allocated (the allocator's blocks), reserved. */
export interface Peaks {
  live: number;
  allocated: number;
  reserved: number;
}

/** One recording of a file (a PyTorch snapshot's device, a traced step) and its step replayed. */
export interface StepReport {
  /** `device 0`, `step 3 (steady)`. */
  recording: string;
  /** The allocator that ran: `PyTorch caching allocator`, `tidepool pow2/8 fit2`. */
  allocator: string;
  events: number;
  allocations: number;
  /** Over the whole recording: `allocated` and `reserved` are PyTorch's `max_memory_allocated` and `max_memory_reserved`. */
  peaks: Peaks;
  /** The step replayed: events `first_event..end_event`. */
  first_event: number;
  end_event: number;
  /** The repeating step found, the range asked for, or (none found) the whole recording. */
  chosen: 'found' | 'range' | 'whole';
  /** The step's length in allocations and frees, whole repeats, and the share that matched a step later. */
  period: { symbols: number; repeats: number; matched: number } | null;
  step_peaks: Peaks;
  replay: { step: number; label: string; tensors: number; lower_bound: number; rows: ReplayRow[] };
  [field: string]: unknown;
}

/** What `replayTrace` and `Snapshot.report()` return: `tidepool trace replay --json`. */
export interface RecordingReport {
  format: 'pytorch-snapshot' | 'tidepool-trace';
  steps: StepReport[];
  /** What the reader assumed or skipped. */
  notes: string[];
}

/**
 * A recording as the timeline draws it, one entry an allocation (in birth order) in
 * typed arrays; positions: 0 before the first event, i + 1 just after event i.
 */
export interface RecordingTimeline {
  label: string;
  allocator: string;
  events: number;
  /** The most bytes live, and its first position. */
  peak: number;
  peak_at: number;
  /** Live over positions start..end. */
  start: Uint32Array;
  end: Uint32Array;
  /** Bytes requested. */
  size: Float64Array;
  /** Index into `streams`. */
  stream: Uint32Array;
  /** Index of the stack in `stack_offsets`; 0 is the empty one. */
  stack: Uint32Array;
  /** The allocations by `end`. */
  by_end: Uint32Array;
  streams: string[];
  /** Bytes live and reserved after each position (`events + 1`). */
  live: Float64Array;
  reserved: Float64Array;
  frame_names: string[];
  frame_files: string[];
  frame_lines: Uint32Array;
  /** Stack i is `stack_frames[stack_offsets[i]..stack_offsets[i + 1]]`, innermost first. */
  stack_frames: Uint32Array;
  stack_offsets: Uint32Array;
  /** The frame each stack is named by (the program's own innermost), or `no_frame`. */
  stack_label: Uint32Array;
  no_frame: number;
}

/** `trainer.adapter()` */
export interface AdapterInfo {
  name: string;
  /** `vulkan`, `metal`, `dx12`, `webgpu`, ... */
  backend: string;
  /** The adapter offers `shader-f16`, which `precision: 'f16'` needs. */
  shader_f16: boolean;
  /** The kernels' block reductions run on subgroups (else through shared memory). */
  subgroups: boolean;
}

/** `trainer.corpus()` */
export interface CorpusInfo {
  name: string;
  bytes: number;
  vocab: number;
  tokens: number;
}

/** `trainer.model()`: the resolved model and training settings. */
export interface ModelInfo {
  layers: number;
  heads: number;
  width: number;
  context: number;
  vocab: number;
  batch: number;
  /** Number of parameters. */
  params: number;
  lr: number;
  policy: string;
  pool: boolean;
  steps: number;
  eval_every: number;
  eval_batches: number;
  dropout: number;
  precision: 'f32' | 'f16';
  submit_every: number;
  recompute: boolean;
}

export interface BucketStats {
  /** The size class, bytes. */
  size: number;
  /** Free buffers of that class. */
  count: number;
}

/** The pool's counters (`BufferPoolStats` in the crate). */
export interface PoolStats {
  total_pooled: number;
  buckets: BucketStats[];
  bytes_held: number;
  peak_bytes_held: number;
  hits: number;
  /** Of the hits, those served from a larger class than the request's own (the pool's fit ratio). */
  fit_hits: number;
  misses: number;
  oversize_requests: number;
  bytes_requested: number;
  bytes_allocated: number;
  releases_accepted: number;
  rejected_bucket_full: number;
  rejected_pool_full: number;
  rejected_too_large: number;
  rejected_over_budget: number;
  rejected_not_a_class: number;
  buffers_destroyed: number;
  bytes_destroyed: number;
  buffers_evicted: number;
  bytes_evicted: number;
  [counter: string]: unknown;
}

/** Objects created: buffers, bind groups, pipelines (`Created` in the crate). */
export interface Created {
  buffers: number;
  bind_groups: number;
  pipelines: number;
}

/** What each path of the trainer created (`CreatedByPath` in the crate). */
export interface CreatedByPath {
  /** Building the trainer, uploading its weights. */
  setup: Created;
  train: Created;
  evaluate: Created;
  sample: Created;
  /** Saving or loading a checkpoint. */
  checkpoint: Created;
}

/** Buffers created by what they are for (`BuffersByPurpose` in the crate). */
export interface BuffersByPurpose {
  storage: number;
  upload: number;
  staging: number;
  readback: number;
  uniform: number;
  timestamps: number;
}

/** The context's counters (`ContextCounters` in the crate). */
export interface ContextCounters {
  dispatches: number;
  submits: number;
  /** Batches written into the trainer's batch buffers through the queue. */
  queue_writes: number;
  buffers_created: number;
  bytes_created: number;
  buffers_destroyed: number;
  bind_groups_created: number;
  encoders_created: number;
  pipelines_created: number;
  /** `writeBuffer` calls for the kernels' parameters: only changed bytes are written. */
  uniform_writes: number;
  bytes_in_use: number;
  peak_bytes_in_use: number;
  bytes_requested_in_use: number;
  peak_bytes_requested_in_use: number;
  peak_bytes_reserved: number;
  created_by_path: CreatedByPath;
  buffers_by_purpose: BuffersByPurpose;
  [counter: string]: unknown;
}

/** One step's figures (`StepStats` in the crate): what `step()` resolves to. */
export interface StepStats {
  step: number;
  loss: number;
  /** Wall time of the step, upload to loss. */
  ms: number;
  /** The host's part: recording and submitting the step's work. */
  record_ms: number;
  tokens_per_s: number;
  lr: number;
  grad_norm: number;
  /** Pool hits / acquires since the start, 0..1. */
  hit_rate: number;
  /** The same, this step only. */
  step_hit_rate: number;
  buffers_created: number;
  /**
   * Created this step and since the step before (an evaluation, a sample, a save):
   * 0 after warm-up with the pool, but where a path first runs.
   */
  buffers_created_step: number;
  /** Bind groups created this step (and since the step before): 0 after warm-up. */
  bind_groups_created_step: number;
  /** Pipelines created this step (and since the step before). */
  pipelines_created_step: number;
  /** What this step (and what ran since the step before) created, by path. */
  created_step_by_path: CreatedByPath;
  /** This step's buffers by what they are for. */
  buffers_created_step_by_purpose: BuffersByPurpose;
  /** Compute dispatches recorded this step (forward, backward, optimizer). */
  dispatches_step: number;
  bytes_held: number;
  peak_bytes_held: number;
  bytes_in_use: number;
  peak_bytes_in_use: number;
  peak_bytes_requested: number;
  total_pooled: number;
  buckets: BucketStats[];
  dispatches: number;
  submits: number;
  /** The latest held-out loss, when one was evaluated. */
  val_loss: number | null;
  pool: PoolStats;
  context: ContextCounters;
}

/**
 * A GPT training on its own WebGPU device and pool. Calls that return promises
 * must not overlap: await each before the next (a second one is refused with kind
 * `busy`, and so is a synchronous call made meanwhile), except `steps(n)`, which may
 * have two in flight (the getters answer meanwhile). Rejections are `Error`s whose
 * message says what to change. After `free()` the object is spent: any call throws
 * wasm-bindgen's own error.
 */
export declare class Trainer {
  private constructor();
  /**
   * `corpus`: text, or UTF-8 bytes (empty, binary and invalid UTF-8 are refused);
   * without one, the built-in corpus. `name` labels it in messages.
   */
  static create(config?: TrainerConfig | null, corpus?: string | Uint8Array | null, name?: string | null): Promise<Trainer>;
  /**
   * Continues the run saved by `save()` (a safetensors file, docs/checkpoint.md).
   * Without a corpus the trainer samples but does not train.
   */
  static load(bytes: Uint8Array | ArrayBuffer, corpus?: string | Uint8Array | null, name?: string | null): Promise<Trainer>;
  /**
   * Builds a new trainer in this one's place, after checking the settings against
   * this device; refused settings leave this trainer as it was.
   */
  replace(config?: TrainerConfig | null, corpus?: string | Uint8Array | null, name?: string | null): Promise<void>;
  /** The run as a checkpoint (safetensors bytes). */
  save(): Promise<Uint8Array>;
  /** One training step with the allocation trace on (docs/trace.md has the format). */
  trace(): Promise<AllocationTrace>;
  adapter(): AdapterInfo;
  corpus(): CorpusInfo;
  model(): ModelInfo;
  /** The latest step's figures without stepping. */
  stats(): StepStats;
  /** The context's and the pool's counters now (with what ran since the latest step). */
  counters(): { context: ContextCounters; pool: PoolStats };
  /** The planned policy's active plan; `null` under the other policies and before the first step. */
  memoryPlan(): MemoryPlan | null;
  /** One training step. */
  step(): Promise<StepStats>;
  /**
   * `n` training steps (1 to 1024) recorded back to back, their losses read once at
   * the end (the GPU never waits for the host between them); each `ms` is the call's
   * time over `n` (from the end of the call before, when that one was in flight).
   * The steps are submitted before this returns: a second `steps(n)` may be called
   * before the first resolves, and its steps run on the GPU while the first's losses
   * come back (in a browser that saves a millisecond or more a call). A third, or one
   * after a call whose steps reach `eval_every`, is `busy`. Calls resolve in order.
   */
  steps(n: number): Promise<StepStats[]>;
  /** The mean held-out loss. */
  evaluate(): Promise<number>;
  /**
   * `length` characters from the model after `prompt` (every character of it in the
   * vocabulary); `temperature` 0 is greedy, `top_k` 0 takes all.
   */
  sample(prompt: string, length: number, temperature: number, top_k: number): Promise<string>;
  /** Releases the trainer's GPU memory now. */
  free(): void;
  [Symbol.dispose](): void;
}

/**
 * A recording read once (a PyTorch memory snapshot, `torch.cuda.memory._dump_snapshot`'s
 * pickle, or a tidepool trace): reported and drawn from here. Files it cannot read
 * throw with kind `trace`; `free()` lets its memory go.
 */
export declare class Snapshot {
  private constructor();
  /** Reads the file's bytes; `device`: a PyTorch snapshot's (default: the one with the most events). */
  static read(bytes: Uint8Array, device?: number | null): Snapshot;
  /** Throws what `read` would for a file of this many bytes, before any is read. */
  static checkSize(bytes: number): void;
  readonly format: 'pytorch-snapshot' | 'tidepool-trace';
  /** How many recordings the file holds. */
  readonly recordings: number;
  /** Each recording's repeating step (or all of it) replayed. */
  report(): RecordingReport;
  /** Events `start..end` of a recording replayed. */
  replay(recording: number, start: number, end: number): StepReport;
  timeline(recording: number): RecordingTimeline;
  free(): void;
  [Symbol.dispose](): void;
}

/** What `new Schedule(options)` takes; every field is optional, unknown fields are errors. */
export interface ScheduleOptions {
  /** Training a call, at most, in ms by the last measured ms a step (unset or `Infinity`: no bound). */
  callMs?: number;
  /** Steps a call, at most: 1 to 1024 (default 16). */
  maxAtOnce?: number;
  /** Calls overlap where a step takes at most this many ms (unset or `null`: never). */
  overlapMs?: number | null;
  /** A held-out evaluation is due after every multiple of this step (0 or unset: never). */
  evalEvery?: number;
  /** A save is due after every multiple of this step (0 or unset: never). */
  saveEvery?: number;
  /** The run's last step (0 or unset: none). */
  end?: number;
}

/**
 * The training schedule the CLI follows too: how many steps each `steps(n)` call
 * takes, and whether the next call may start before the one in flight is back. A
 * bad option or argument (NaN, negative, fractional, too large) throws an `Error`
 * with kind `config` naming it.
 */
export declare class Schedule {
  constructor(options?: ScheduleOptions | null);
  /**
   * Steps of the call starting after step `step` (at least 1; 0 from step 2^32 - 1,
   * the counter being full): as many as fit in `callMs` by `msPerStep` (`undefined`,
   * `null` or 0 before a step is measured: 1), at most `maxAtOnce`, never past a step
   * where an evaluation, a save or the end is due.
   */
  stepsFrom(step: number, msPerStep?: number | null): number;
  /** Whether calls may overlap at this ms a step. */
  overlaps(msPerStep?: number | null): boolean;
  /** An evaluation is due after `step` (a multiple of `evalEvery`). */
  evaluationDueAt(step: number): boolean;
  /** A save is due after `step` (a multiple of `saveEvery`). */
  saveDueAt(step: number): boolean;
  /** Nothing (evaluation, save, the run's end) is due after a call ending at `end`. */
  nothingDueAt(end: number): boolean;
  free(): void;
  [Symbol.dispose](): void;
}

/** The settings of a preset, as `Trainer.create` would use them. */
export declare function presetConfig(name: string): TrainerConfig & Record<string, unknown>;
/** The full settings a config resolves to, checked without touching the GPU. */
export declare function resolveConfig(config?: TrainerConfig | null): TrainerConfig & Record<string, unknown>;
/** The largest corpus the wasm takes, in bytes (64 MiB). */
export declare function maxCorpusBytes(): number;
/** Where the page finds the default corpus, relative to the page. */
export declare function defaultCorpusPath(): string;
/** A trace replayed through every size policy and plan, against the lower bound and the pool that ran. */
export declare function replayTrace(json: string): RecordingReport;

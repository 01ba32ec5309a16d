// Types of the trainer widget, www/tidepool.mjs (`import { mount } from 'tidepool-gpu'`).
// The wasm Trainer's types are in ./wasm.d.ts ('tidepool-gpu/wasm').

import type { AdapterInfo, CorpusInfo, ModelInfo, PresetName, SizePolicyName, StepStats } from './wasm.js';

export type * from './wasm.js';

/** When the worker evaluates and samples while training (all optional; www/worker-schedule.mjs). */
export interface TidepoolSchedule {
  /** Steps between held-out evaluations (default 20)... */
  evalEvery?: number;
  /** ...unless that would spend more than this share of the wall clock (0.15). */
  evalShare?: number;
  /** Step of the first sample (10). */
  firstSample?: number;
  /** At most one sample every this many seconds (15)... */
  sampleSeconds?: number;
  /** ...and at most this share of the wall clock (0.15). */
  sampleShare?: number;
  /** A sample's length is what fits in this many ms (2500). */
  sampleBudgetMs?: number;
  /** Characters a sample, at most (200) and at least (24). */
  sampleLength?: number;
  sampleMinLength?: number;
  /** Length of the first sample, before anything is measured (32). */
  firstSampleLength?: number;
  /** Sampling temperature (0.8); 0 is greedy. */
  temperature?: number;
  /** Top-k (0: all tokens). */
  topK?: number;
  /** Pause at this step (0: the length of the learning-rate schedule). */
  maxSteps?: number;
  /**
   * While running, steps are trained several a call, as many as take at most this
   * many ms by the last call's time a step (16), so a Pause waits at most about that
   * long; a slower step goes alone.
   */
  batchMs?: number;
  /** Steps a call, at most (16; 1 trains one step a call). */
  maxAtOnce?: number;
  /**
   * Start the next call before the last one's losses are back, where nothing is due at
   * its end and steps are fast enough for two a call (default true).
   */
  overlap?: boolean;
}

/** `mount(element, options)`; every field is optional. Settings apply on Reset. */
export interface TidepoolOptions {
  /** Heading shown above the trainer (default `tidepool`; empty: none). */
  title?: string;
  /** Model preset: `tiny` (default), `small`, `shakespeare`. */
  preset?: PresetName;
  /** Train with the buffer pool (default true); false creates every buffer fresh. */
  pool?: boolean;
  /** Size classes of the pool; unset: the trainer's default. */
  policy?: SizePolicyName;
  /** Recompute the layernorm outputs in the backward: less memory, a little slower (default false). */
  recompute?: boolean;
  /** Learning rate; unset: the preset's. */
  lr?: number;
  /** Sequences a step; unset: the preset's. */
  batch?: number;
  /** Tokens a sequence; unset: the preset's. */
  context?: number;
  seed?: number;
  /** Length of the learning-rate schedule; training pauses there. */
  steps?: number;
  /** Text (or its UTF-8 bytes) to train on instead of the default corpus. */
  corpus?: string | Uint8Array;
  /** Its name in the widget (default `custom text`). */
  corpusName?: string;
  /** A text file fetched at mount and trained on. */
  corpusUrl?: string;
  /** Start training once the model is built. */
  autostart?: boolean;
  /**
   * Where the package's files are, for a bundler or server that moved them. Each
   * defaults to its place in the package, written so that bundlers (Vite, webpack,
   * Rollup) find and emit it; a URL that fails is an error of kind `load` naming it.
   * `pkgUrl`: the wasm package's JS (`pkg/tidepool.js`).
   */
  pkgUrl?: string | URL;
  /** The wasm package's `.wasm` (`pkg/tidepool_bg.wasm`; with `pkgUrl` alone, the one beside it). */
  wasmUrl?: string | URL;
  /** The training worker's module (`www/worker.mjs`). */
  workerUrl?: string | URL;
  /**
   * Render into the element's (open) shadow root, with the widget's styles adopted there
   * only: the host page's CSS cannot reach it and its CSS never leaks out. The
   * `<tidepool-trainer>` element always does. Default false: the widget renders into the
   * element (class `tp`), its styles adopted by the document.
   */
  shadow?: boolean;
  /** Evaluation and sampling cadence. */
  schedule?: TidepoolSchedule;
  /**
   * How soon a silent worker is declared stalled (ms): pinged `every` (5000), stalled
   * when a ping goes unanswered for `answer` (30000) or one request runs for `busy`
   * (300000).
   */
  watchdog?: { every?: number; answer?: number; busy?: number };
  /** Save the run to IndexedDB every this many steps while training (default 200; 0: never). */
  autosaveEvery?: number;
  /** IndexedDB key of the autosaved run (default `last`): give each trainer on a page its own. */
  autosaveKey?: string;
}

/**
 * Kinds of error (`error.kind`): the wasm API's (`config` ... `internal`) and the page's
 * own: `load` (the worker or wasm did not load), `csp` (the page's Content-Security-Policy
 * blocked it; the message names the directive), `crashed`, `stalled` (the worker stopped
 * answering), `stopped`, `storage` (the browser would not keep a saved run).
 */
export type TidepoolErrorKind =
  | 'config' | 'too_large' | 'corpus' | 'checkpoint' | 'no_webgpu' | 'device_lost' | 'busy' | 'internal'
  | 'load' | 'csp' | 'crashed' | 'stalled' | 'stopped' | 'storage';

/** Detail of `tidepool:created`: a new model was built (at mount, Reset, pool switch, corpus change). */
export interface TidepoolCreatedDetail {
  type: 'created';
  id?: number;
  adapter: AdapterInfo;
  corpus: CorpusInfo;
  model: ModelInfo;
}

/** Detail of `tidepool:sample`. */
export interface TidepoolSampleDetail {
  type: 'sample';
  id?: number;
  /** The step the model had reached. */
  step: number;
  text: string;
}

/** Detail of `tidepool:state`: training started or stopped. */
export interface TidepoolStateDetail {
  type: 'state';
  running: boolean;
  step: number;
  /** Why it paused on its own (the schedule's end, ...), or null. */
  reason: string | null;
  /**
   * The last step the worker had reported when the Start or Pause this confirms
   * reached it (null before any): a pause stops after the call in flight then, so
   * `step - asked_at` is at most one call's steps.
   */
  asked_at: number | null;
}

/** Detail of `tidepool:error`: the widget shows it too. */
export interface TidepoolErrorDetail {
  message: string;
  kind?: TidepoolErrorKind;
}

/**
 * Events a trainer's element dispatches (they bubble):
 * `element.addEventListener('tidepool:step', (e) => e.detail.loss)`.
 */
export interface TidepoolEventMap {
  'tidepool:created': CustomEvent<TidepoolCreatedDetail>;
  /** After every step; the detail is the step's figures. */
  /** `ahead`: the step's call started before the one before it came back (two in flight). */
  'tidepool:step': CustomEvent<StepStats & { ahead?: boolean }>;
  'tidepool:sample': CustomEvent<TidepoolSampleDetail>;
  'tidepool:state': CustomEvent<TidepoolStateDetail>;
  'tidepool:error': CustomEvent<TidepoolErrorDetail>;
  /** A checkpoint was downloaded (Save). */
  'tidepool:saved': CustomEvent<{ step: number; name: string; bytes: number }>;
  /** A checkpoint was loaded or the last run resumed. */
  'tidepool:loaded': CustomEvent<{ step: number; label: string }>;
  /** The prompt box (or `sample` with a prompt) produced text. */
  'tidepool:generated': CustomEvent<{ prompt: string; text: string; step: number }>;
}

/** One run's history, as the charts draw it (index i is the i-th step of this run). */
export interface TidepoolRun {
  label: string;
  /** Steps recorded (a run loaded from a checkpoint starts with none; past 20,000, every other one is let go). */
  n: number;
  /** The step of each entry, rising. */
  x: number[];
  loss: number[];
  val: (number | null)[];
  hit: number[];
  hitCum: number[];
  created: number[];
  held: number[];
  inUse: number[];
  ms: number[];
  tps: number[];
  bindGroups: number[];
  pipelines: number[];
  sizes: Set<number>;
  latest: StepStats | null;
}

/** What `mount()` returns, and what `<tidepool-trainer>` holds as `.tidepool`. */
export interface TidepoolController {
  /** Trains continuously (builds the model first if needed). */
  start(): void;
  /** Stops after the steps in flight (at most `schedule.batchMs` of training). */
  pause(): void;
  /** One step, when paused; resolves once it is done. */
  stepOnce(): Promise<void>;
  /** A new model with the settings now in the form; resolves to false when it could not be built. */
  reset(): Promise<boolean>;
  /** Restarts training with the pool on or off. */
  setPool(on: boolean): Promise<void>;
  /** A sample from the current model now (shown, and sent as `tidepool:sample`); resolves once shown. */
  sample(): Promise<void>;
  /**
   * Text, UTF-8 bytes or a File to train on; `undefined` goes back to the default
   * corpus. `name` labels it. Anything else rejects with kind `config`.
   */
  useCorpus(corpus: string | Uint8Array | Blob | undefined, name?: string): Promise<unknown>;
  /** A new worker, wasm instance and GPU device (what Restart does); `run`: train once built. */
  restart(run?: boolean): Promise<void>;
  /** The watchdog's settings in ms (see client.mjs), changeable at any time. */
  readonly watchdog: { every: number; answer: number; busy: number };
  /** What the widget is doing now. */
  readonly state: { running: boolean; trainer: boolean; building: number; loaded: boolean; worker: boolean; waiting: number };
  /** Stops the worker, frees its GPU device and empties the element. */
  destroy(): void;
  readonly running: boolean;
  readonly history: TidepoolRun;
  /** The run before the last Reset or pool switch, drawn dashed; null before one. */
  readonly previous: TidepoolRun | null;
  readonly latest: StepStats | null;
  /** Runs one training step with the allocation trace on and shows it in the memory timeline; resolves once shown. */
  traceStep(): Promise<void>;
  /** Downloads the run as a `.safetensors` checkpoint. */
  save(): Promise<void>;
  /** Continues the run saved in `file`; resolves to false when the file was refused (a message shows). */
  loadCheckpoint(file: Blob): Promise<boolean>;
  /**
   * The last traced step shown, or null: the trace (docs/trace.md), its report
   * (`replayTrace`: `{format, steps, notes}`), and per position (0: the step's start,
   * i + 1: after event i) the height of the stack drawn (`top`, bytes in use) and the
   * pool's free bytes (`held`).
   */
  readonly lastTrace: {
    trace: Record<string, unknown>;
    replay: Record<string, unknown>;
    /** The planned policy's memoryPlan() after the step; null under the other policies. */
    plan: Record<string, unknown> | null;
    top: number[];
    held: number[];
    /** The arena view (planned policy): each band, each tensor at its range, and its rectangle as drawn (CSS px). */
    arenas: {
      arenas: { buffer: number; bytes: number; base: number; peak: number }[];
      tensors: { arena: number; offset: number; size: number; start: number; end: number }[];
      rects: { x: number; y: number; w: number; h: number }[] | null;
    } | null;
  } | null;
  readonly element: HTMLElement;
}

/** Mounts a trainer into `element` (replacing one mounted there) and returns its controller. */
export declare function mount(element: HTMLElement, options?: TidepoolOptions): TidepoolController;

/** Options from a query string: `?preset=small&batch=4&context=32&lr=0.002&pool=off&policy=exact&autostart`. */
export declare function optionsFromQuery(search?: string): TidepoolOptions;

/** Attributes of `<tidepool-trainer>`, read once when it joins the page. */
export interface TidepoolTrainerAttributes {
  preset?: PresetName;
  /** `off`, `false` or `0` turn the pool off. */
  pool?: 'on' | 'off' | 'true' | 'false' | '1' | '0';
  policy?: SizePolicyName;
  lr?: string;
  batch?: string;
  context?: string;
  seed?: string;
  steps?: string;
  'corpus-url'?: string;
  title?: string;
  /** Present: start training once the model is built. */
  autostart?: '' | boolean;
  'pkg-url'?: string;
  'wasm-url'?: string;
  'worker-url'?: string;
}

/**
 * `<tidepool-trainer preset="tiny" batch="2" context="8" autostart></tidepool-trainer>`:
 * the element form of `mount()`. Its controller is `.tidepool` once connected;
 * removed from the page, it frees its GPU device.
 */
export declare class TidepoolTrainer extends HTMLElement {
  tidepool?: TidepoolController;
  connectedCallback(): void;
  disconnectedCallback(): void;
}

declare global {
  interface HTMLElementTagNameMap {
    'tidepool-trainer': TidepoolTrainer;
  }
  // the events bubble: any element (the mount point, a container) can listen
  interface HTMLElementEventMap extends TidepoolEventMap {}
  interface HTMLElement {
    /** Set on an element `mount()` was called on. */
    tidepool?: TidepoolController;
  }
}

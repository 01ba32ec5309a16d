// When the worker trains, evaluates, samples and saves: decisions only, from the
// settings, the step reached and what was measured. The worker's loop
// (worker-training.mjs) asks; nothing here touches the trainer.
//
// Evaluations and samples cost GPU time (on SwiftShader a 200-character sample is a
// minute), so each is held to a share of the wall clock, a sample's length follows
// the measured time per character, and neither runs once a pause is asked for: Pause
// takes effect right after the steps in flight.
//
// While running, the worker trains several steps a call (trainer.steps(n)): the GPU
// then goes from one step to the next while the host records, instead of waiting for
// each loss to be read. As many as fit in batchMs by the last call's time a step, at
// most maxAtOnce, and never past a step that evaluates, saves or ends the run. A step
// slower than batchMs / 2 (a CPU adapter) goes one at a time.
//
// A call of several steps starts the next call before awaiting its own losses (two
// in flight), where nothing is due at its end: the GPU then never waits for the
// losses to come back and the next call to be recorded (in Chromium a millisecond or
// more a call).
//
// That arithmetic (steps a call, overlap, what is due at a step) is the crate's
// train::Schedule, through the wasm's `Schedule` class (src/web/schedule.rs), which
// the CLI follows too; what is the page's own stays here: the settings' clamping in
// front of it (the class throws on what this clamps), and the time shares of
// evaluations and samples.

import { kindError } from './errors.mjs';

/** What a page may set through mount()'s `schedule` (TidepoolSchedule in tidepool.d.ts). */
export const SCHEDULE_DEFAULTS = Object.freeze({
  batchMs: 16, // training a call, at most: what a Pause may wait for
  maxAtOnce: 16, // steps a call, at most
  overlap: true, // start the next call before the last one's losses are back
  evalEvery: 20, // steps between held-out evaluations...
  evalShare: 0.15, // ...unless that would spend more than this share of the time
  firstSample: 10, // step of the first sample
  sampleSeconds: 15, // then at most one every this many seconds...
  sampleShare: 0.15, // ...and at most this share of the time
  sampleBudgetMs: 2500, // a sample's length is what fits in this
  sampleLength: 200, // characters, at most
  sampleMinLength: 24,
  firstSampleLength: 32, // before anything is measured
  temperature: 0.8,
  topK: 0, // 0: all
  maxSteps: 0, // pause here (0: the length of the lr schedule)
  autosaveEvery: 0, // steps between checkpoints sent to the page to keep (0: none)
});

/** The wasm's step counter is a u32: no call may take it past this. */
export const MAX_STEP = 2 ** 32 - 1;
/** steps(n) takes 1 to 1024 steps a call. */
const MAX_CALL = 1024;

/** `v` as a whole number in [min, max] (anything else: min). */
const whole = (v, min, max) => Math.min(max, Math.max(min, Math.floor(Number(v) || 0)));

export class Schedule {
  /**
   * @param {object} settings  SCHEDULE_DEFAULTS' keys; the rest are kept and ignored
   * @param {() => number} now  milliseconds (performance.now in the worker; a test's clock)
   */
  constructor(settings = {}, now = () => performance.now(), WasmSchedule = null) {
    this.settings = { ...SCHEDULE_DEFAULTS };
    this.now = now;
    this.WasmSchedule = WasmSchedule;
    this.calls = null;
    this.update(settings);
    this.restart(0);
  }

  /** The wasm package's `Schedule` class, once it is loaded: nothing is scheduled before. */
  bind(WasmSchedule) {
    this.WasmSchedule = WasmSchedule;
    this.rebuild();
  }

  /** Changes settings (a page's, or an autosave switched off) from now on. */
  update(settings = {}) {
    for (const [key, value] of Object.entries(settings ?? {})) {
      if (key in SCHEDULE_DEFAULTS && value !== undefined) this.settings[key] = value;
    }
    this.settings.autosaveEvery = whole(this.settings.autosaveEvery, 0, MAX_STEP);
    this.rebuild();
  }

  /** The wasm schedule of these settings, each clamped first as the page always has. */
  rebuild() {
    if (!this.WasmSchedule || this.maxSteps === undefined) return;
    const s = this.settings;
    const batchMs = Number(s.batchMs);
    // A budget of 0 or less (or not a number) leaves one step a call, as it always did.
    const callMs = batchMs > 0 ? batchMs : Number.MIN_VALUE;
    this.calls?.free();
    this.calls = new this.WasmSchedule({
      callMs,
      maxAtOnce: whole(s.maxAtOnce, 1, MAX_CALL),
      // Fast enough for two steps a call: where a step takes at most half the budget.
      overlapMs: s.overlap && batchMs > 0 ? callMs / 2 : null,
      evalEvery: this.evalEvery,
      saveEvery: this.saveEvery,
      end: this.maxSteps,
    });
  }

  /** The wasm schedule; an error of kind `load` before the package is. */
  get rust() {
    if (!this.calls) throw kindError('load', 'the wasm package is not loaded: nothing can be scheduled yet.');
    return this.calls;
  }

  /** The last measured ms a step, as the wasm schedule takes it (0: none yet). */
  get measured() {
    return this.msPerStep > 0 && Number.isFinite(this.msPerStep) ? this.msPerStep : 0;
  }

  /** A new trainer: nothing measured yet; the run ends at maxSteps, else at `modelSteps` (its lr schedule). */
  restart(modelSteps) {
    const at = this.now();
    this.lastSample = { at, ms: 0, step: 0 };
    this.lastEval = { at, ms: 0 };
    this.msPerChar = 0; // measured by each sample
    this.msPerStep = 0; // measured by each training call (0: none yet)
    this.maxSteps = whole(this.settings.maxSteps || modelSteps || 0, 0, MAX_STEP);
    this.rebuild();
  }

  /** Steps between evaluations, between autosaves (0: never). */
  get evalEvery() {
    return whole(this.settings.evalEvery, 0, MAX_STEP);
  }
  get saveEvery() {
    return this.settings.autosaveEvery;
  }

  /** How many steps the next running call takes from `step`; 0 when the counter is full. */
  stepsAtOnce(step) {
    return this.rust.stepsFrom(Math.min(step, MAX_STEP), this.measured);
  }

  /** Steps are fast enough to take several a call: calls then overlap (unless `overlap` is off). */
  overlaps() {
    return this.rust.overlaps(this.measured);
  }

  /** Nothing is due after the call ending at `end`, so the next may start before it comes back. */
  plainEnd(end) {
    return this.rust.nothingDueAt(end) && !this.sampleDue(end);
  }

  /** An evaluation is due after `step` and fits its share of the time. */
  evalDue(step) {
    return this.rust.evaluationDueAt(step) && this.shareLeft(this.lastEval, this.settings.evalShare);
  }

  /** A sample is due after `step`. */
  sampleDue(step) {
    const s = this.settings;
    if (!(s.sampleLength > 0)) return false;
    if (this.lastSample.step === 0) return step >= s.firstSample;
    return this.now() - this.lastSample.at >= s.sampleSeconds * 1000 && this.shareLeft(this.lastSample, s.sampleShare);
  }

  /** An autosave is due after `step`. */
  saveDue(step) {
    return this.rust.saveDueAt(step);
  }

  /** The run ends at `step`. */
  finished(step) {
    return this.maxSteps > 0 && step >= this.maxSteps;
  }

  /** True when a job that last took `last.ms` may run again and stay within `share` of the time. */
  shareLeft(last, share) {
    return this.now() - last.at >= last.ms * (1 / share - 1);
  }

  /** Characters in the next sample: what fits its budget by the last one's time a character. */
  sampleLength() {
    const s = this.settings;
    if (!this.msPerChar) return Math.min(s.firstSampleLength, s.sampleLength);
    const fits = Math.floor(s.sampleBudgetMs / this.msPerChar);
    return Math.max(s.sampleMinLength, Math.min(s.sampleLength, fits));
  }

  /** A training call came back: `lastMs` its last step's ms (0: unknown), else `wallMs` over `n`. */
  calledSteps(n, lastMs, wallMs) {
    this.msPerStep = lastMs > 0 ? lastMs : wallMs / n;
  }

  evaluated(t0, t1) {
    this.lastEval = { at: t1, ms: t1 - t0 };
  }

  /** A sample of `length` characters took t0..t1; `step`: the step it was due after (0: asked for). */
  sampled(length, t0, t1, step = this.lastSample.step) {
    this.msPerChar = (t1 - t0) / Math.max(1, length);
    this.lastSample = { at: t1, ms: t1 - t0, step };
  }
}

// The worker's training loop: one call of steps at a time, or two in flight where
// the schedule allows (worker-schedule.mjs says when), then whatever is due after it:
// an evaluation, a sample, an autosave, the end of the run.

import { kindError } from './errors.mjs';
import { MAX_STEP } from './worker-schedule.mjs';

export class Training {
  /** @param session the worker's Session (worker-protocol.mjs): its trainer, run flag, queue and messages */
  constructor(session, schedule) {
    this.session = session;
    this.schedule = schedule;
    this.ahead = null; // {promise, n, end, early, quiet}: a call started before the one before it came back
  }

  /** A new trainer: its schedule starts afresh. */
  restart(modelSteps) {
    this.ahead = null;
    this.schedule.restart(modelSteps);
  }

  /** The call in flight ahead, if any, says nothing of its failure: the one before it already did. */
  quiet() {
    if (this.ahead) this.ahead.quiet = true;
  }

  // A training call of n steps from `from`: step() for one alone, steps(n) for a call
  // that may have another in flight beside it.
  startCall(n, from, { single = false, early = false } = {}) {
    const trainer = this.session.trainer;
    const promise = single ? trainer.step().then((s) => [s]) : trainer.steps(n);
    promise.catch(() => {}); // awaited later, or dropped with a failure before it (quiet)
    return { promise, n, end: from + n, single, early, quiet: false };
  }

  /**
   * One training call and what is due after it. `id`: a Step once (exactly one step,
   * its 'step' the reply); without one, the running loop (as many as fit).
   */
  async call(id) {
    const { session, schedule } = this;
    session.phase('step');
    let call = this.ahead;
    this.ahead = null;
    const running = id === undefined && session.wantRun;
    const overlap = running && schedule.overlaps();
    if (!call) {
      const from = session.currentStep();
      const n = running ? schedule.stepsAtOnce(from) : Math.min(1, MAX_STEP - from);
      if (n < 1) throw kindError('config', `the step counter is at ${from}, the most it holds (${MAX_STEP}): this run cannot train further. Reset starts a new one.`);
      call = this.startCall(n, from, { single: n === 1 && !overlap });
    }
    if (overlap && !call.single && !session.queue.length && schedule.plainEnd(call.end)) {
      const n = schedule.stepsAtOnce(call.end);
      if (n > 0) this.ahead = this.startCall(n, call.end, { early: true });
    }
    const t0 = performance.now();
    let all;
    try {
      all = session.plain(await call.promise);
    } catch (err) {
      if (call.quiet) return; // the call before it failed, and said so
      throw err;
    }
    // each step's ms: its call's time over its steps, from the call before's end
    schedule.calledSteps(all.length, all[all.length - 1].ms, performance.now() - t0);
    if (call.early) for (const s of all) s.ahead = true;
    for (const s of all.slice(0, -1)) session.post({ type: 'step', stats: s });
    const stats = all[all.length - 1];
    session.post({ type: 'step', id, stats });
    if (this.ahead) return; // nothing was due at this call's end (plainEnd)
    await this.afterCall(stats.step);
  }

  // Evaluation and samples only while running on: a pause is not kept waiting.
  async afterCall(step) {
    const { session, schedule } = this;
    if (session.wantRun && schedule.evalDue(step)) {
      session.phase('evaluate');
      const t0 = performance.now();
      session.post({ type: 'eval', step, loss: await session.trainer.evaluate() });
      schedule.evaluated(t0, performance.now());
    }
    if (session.wantRun && schedule.sampleDue(step)) {
      session.phase('sample');
      const s = schedule.settings;
      const text = await this.sample(schedule.sampleLength(), s.temperature, s.topK, '\n', step);
      session.post({ type: 'sample', step, text });
    }
    if (session.wantRun && schedule.saveDue(step)) {
      session.phase('save');
      const bytes = await session.trainer.save();
      session.post({ type: 'autosave', step, bytes }, [bytes.buffer]);
    }
    if (session.wantRun && schedule.finished(step)) {
      session.wantRun = false;
      session.report(`finished the ${schedule.maxSteps}-step schedule`);
    }
  }

  /** A timed sample (its time sets the next one's length); `dueAfter`: the step a scheduled one was due after. */
  async sample(length, temperature, topK, prompt = '\n', dueAfter = undefined) {
    const t0 = performance.now();
    const text = await this.session.trainer.sample(prompt, length, temperature, topK);
    this.schedule.sampled(length, t0, performance.now(), dueAfter);
    return text;
  }
}

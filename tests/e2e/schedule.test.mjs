// Unit tests (node:test, no browser) of www/worker-schedule.mjs: how many steps a
// training call takes, when calls may overlap, and when evaluations, samples and
// autosaves come due, on a clock the test moves. The calls' arithmetic is the wasm
// package's Schedule (make pkg), loaded here in Node as the worker loads it.
// worker.test.mjs checks the same rules through the page.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { initSync, Schedule as WasmSchedule } from '../../pkg/tidepool.js';
import { MAX_STEP, SCHEDULE_DEFAULTS, Schedule } from '../../www/worker-schedule.mjs';

initSync({ module: readFileSync(new URL('../../pkg/tidepool_bg.wasm', import.meta.url)) });

function clocked(settings) {
  const clock = { now: 0 };
  const schedule = new Schedule(settings, () => clock.now, WasmSchedule);
  return { schedule, clock };
}

test('nothing is scheduled before the wasm package is loaded', () => {
  const schedule = new Schedule({});
  assert.throws(() => schedule.stepsAtOnce(0), (err) => err.kind === 'load');
  schedule.bind(WasmSchedule);
  assert.equal(schedule.stepsAtOnce(0), 1);
});

/** The calls a running loop makes from `from` to the run's end: [first, last] steps. */
function calls(schedule, from) {
  const out = [];
  for (let step = from; !schedule.finished(step); ) {
    const n = schedule.stepsAtOnce(step);
    out.push([step + 1, step + n]);
    step += n;
  }
  return out;
}

test('calls fill batchMs, at most maxAtOnce, and end at each evaluation and at the last step', () => {
  const { schedule } = clocked({ batchMs: 1e9, maxAtOnce: 4, evalEvery: 6, evalShare: 1, sampleLength: 0, maxSteps: 14 });
  schedule.restart(0);
  assert.equal(schedule.stepsAtOnce(1), 1, 'nothing measured yet: one step');
  schedule.calledSteps(1, 40, 40);
  assert.deepEqual(calls(schedule, 1), [[2, 5], [6, 6], [7, 10], [11, 12], [13, 14]]);
});

test('a slow step goes alone; steps fast enough for two a call overlap', () => {
  const { schedule } = clocked({ batchMs: 16, maxAtOnce: 16 });
  schedule.calledSteps(1, 20, 20);
  assert.equal(schedule.stepsAtOnce(100), 1);
  assert.equal(schedule.overlaps(), false);
  schedule.calledSteps(8, 2, 16);
  assert.equal(schedule.stepsAtOnce(100), 8);
  assert.equal(schedule.overlaps(), true);
  schedule.update({ overlap: false });
  assert.equal(schedule.overlaps(), false, 'overlap: false keeps one call in flight');
});

test('a call never takes the step counter past its largest value', () => {
  const { schedule } = clocked({ batchMs: 1e9, maxAtOnce: 16, evalEvery: 0 });
  schedule.restart(0);
  schedule.calledSteps(16, 1, 16);
  assert.equal(schedule.stepsAtOnce(MAX_STEP - 5), 5);
  assert.equal(schedule.stepsAtOnce(MAX_STEP - 1), 1);
  assert.equal(schedule.stepsAtOnce(MAX_STEP), 0, 'nothing more to take');
  assert.equal(schedule.stepsAtOnce(2 ** 40), 0);
});

test('autosaves come due on their multiples and end calls there; hostile settings are clamped', () => {
  const { schedule } = clocked({ batchMs: 1e9, maxAtOnce: 16, evalEvery: 0, autosaveEvery: 5 });
  schedule.calledSteps(16, 1, 16);
  assert.equal(schedule.stepsAtOnce(3), 2);
  assert.equal(schedule.saveDue(5), true);
  assert.equal(schedule.plainEnd(5), false);
  assert.equal(schedule.plainEnd(7), true);
  for (const every of [Number.NaN, -3, 'x', Infinity]) {
    schedule.update({ autosaveEvery: every });
    assert.ok(Number.isInteger(schedule.saveEvery) && schedule.saveEvery >= 0, `autosaveEvery ${every} -> ${schedule.saveEvery}`);
  }
  schedule.update({ autosaveEvery: 0, maxAtOnce: 1e12 });
  assert.equal(schedule.stepsAtOnce(0), 1024, 'steps(n) takes at most 1024');
  schedule.update({ batchMs: Number.NaN });
  assert.equal(schedule.stepsAtOnce(0), 1);
});

test('samples: the first at firstSample, then held to their share of the time; their length follows the measured speed', () => {
  const { schedule, clock } = clocked({ firstSample: 10, sampleSeconds: 15, sampleShare: 0.15, sampleBudgetMs: 2500 });
  assert.equal(schedule.sampleDue(9), false);
  assert.equal(schedule.sampleDue(10), true);
  assert.equal(schedule.sampleLength(), SCHEDULE_DEFAULTS.firstSampleLength);
  schedule.sampled(32, clock.now, (clock.now += 3200), 10); // 100 ms a character
  assert.equal(schedule.sampleLength(), 25, 'what fits 2.5 s');
  clock.now += 14_000;
  assert.equal(schedule.sampleDue(20), false, 'not before sampleSeconds');
  clock.now += 4_000;
  assert.equal(schedule.sampleDue(20), false, 'nor over its share: 3.2 s of sampling wants 18 s of the rest');
  clock.now += 1_000;
  assert.equal(schedule.sampleDue(20), true);
  schedule.update({ sampleLength: 0 });
  assert.equal(schedule.sampleDue(30), false, 'sampleLength 0: never');
});

test('evaluations are held to their share of the time', () => {
  const { schedule, clock } = clocked({ evalEvery: 10, evalShare: 0.5 });
  assert.equal(schedule.evalDue(9), false);
  assert.equal(schedule.evalDue(10), true);
  schedule.evaluated(clock.now, (clock.now += 1000));
  clock.now += 500;
  assert.equal(schedule.evalDue(20), false, 'half the time at most');
  clock.now += 500;
  assert.equal(schedule.evalDue(20), true);
});

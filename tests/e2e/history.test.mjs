// Unit tests (node:test, no browser) of what a run remembers: www/history.mjs (the
// history the charts draw) and the check of runs saved in IndexedDB
// (checkpoints.mjs's checkRecord). A history holds what was recorded, never padding
// up to a step counter; a stored record that is not one of ours is refused with
// what is wrong.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { checkRecord } from '../../www/checkpoints.mjs';
import { MAX_HISTORY, MAX_KEPT, SERIES, checkRun, continued, emptyRun, recordEval, recordStep } from '../../www/history.mjs';
import { MAX_STEP } from '../../www/worker-schedule.mjs';

const stats = (step, extra = {}) => ({
  step,
  loss: 4 - step / 100,
  step_hit_rate: 1,
  hit_rate: 0.9,
  buffers_created_step: 0,
  bind_groups_created_step: 0,
  pipelines_created_step: 0,
  bytes_held: 1024,
  bytes_in_use: 2048,
  ms: 5,
  tokens_per_s: 1000,
  val_loss: null,
  buckets: [{ size: 256, count: 2 }],
  ...extra,
});

function run(steps) {
  const r = emptyRun('pool on, tiny, batch 2');
  for (const s of steps) recordStep(r, stats(s));
  return r;
}

test('a history holds the steps recorded, each series the same length', () => {
  const r = run([1, 2, 3]);
  assert.equal(r.n, 3);
  for (const key of SERIES) assert.equal(r[key].length, 3, key);
  assert.deepEqual(r.x, [1, 2, 3]);
  assert.deepEqual([...r.sizes], [256]);
  assert.equal(checkRun(r), null);
  assert.equal(checkRun(structuredClone(r)), null, 'as IndexedDB gives it back');
});

test('a run loaded at step 9,999,999 records from there, with nothing padded before it', () => {
  const loaded = continued(emptyRun('loaded'), null, stats(9_999_999));
  assert.equal(loaded.n, 0, 'nothing recorded yet');
  assert.equal(loaded.latest.step, 9_999_999, 'the loaded step shows as the latest');
  assert.equal(loaded.latest.loss, null, 'its loss is not in the file');
  for (const key of SERIES) assert.equal(loaded[key].length, 0, key);
  recordStep(loaded, stats(10_000_000));
  assert.deepEqual(loaded.x, [10_000_000]);
  assert.equal(loaded.n, 1);
});

test('a saved history continues where it ends at the loaded step, else a fresh one starts', () => {
  const saved = run([1, 2, 3]);
  const back = continued(emptyRun('new label'), saved, stats(3));
  assert.equal(back.n, 3);
  assert.equal(back.label, 'new label');
  const elsewhere = continued(emptyRun('x'), saved, stats(7));
  assert.equal(elsewhere.n, 0, 'a history of another step is not continued');
});

test('a step that does not come after the last is shown but not recorded (a wrapped counter)', () => {
  const r = run([MAX_STEP - 1, MAX_STEP]);
  recordStep(r, stats(0));
  assert.deepEqual(r.x, [MAX_STEP - 1, MAX_STEP]);
  assert.equal(r.latest.step, 0);
  assert.equal(checkRun(r), null);
  recordStep(r, stats(Number.NaN));
  assert.equal(r.n, 2);
});

test('held-out losses land on their step, once each', () => {
  const r = emptyRun('');
  assert.equal(recordStep(r, stats(1, { val_loss: 3.5 })), 3.5);
  assert.equal(recordStep(r, stats(2, { val_loss: 3.5 })), null, 'the same evaluation is plotted once');
  recordEval(r, 2, 3.25);
  assert.deepEqual(r.val, [3.5, 3.25]);
});

test('checkRun names what is wrong with a damaged history', () => {
  const cases = [
    [(r) => (r.x = 5), /history\.x is not a list/],
    [(r) => (r.loss = r.loss.slice(1)), /history\.loss holds 2 values for 3 steps/],
    [(r) => (r.ms[1] = 'slow'), /history\.ms\[1\] is not a number/],
    [(r) => (r.x[2] = 2), /history\.x\[2\] is not a step after the one before/],
    [(r) => (r.n = -1), /step count/],
    [(r) => (r.n = MAX_HISTORY + 1), /step count/],
    [(r) => (r.n = 9_999_999), /step count/],
    [(r) => (r.sizes = [256]), /size classes/],
    [(r) => (r.latest = { step: 'three' }), /latest step/],
    [(r) => (r.label = 7), /label/],
  ];
  for (const [damage, want] of cases) {
    const r = run([1, 2, 3]);
    damage(r);
    assert.match(checkRun(r) ?? 'accepted', want);
  }
  const sparse = run([1, 2, 3]);
  sparse.hit = new Array(3); // holes, as a padded history had
  assert.match(checkRun(sparse), /history\.hit\[0\] is not a number/);
  assert.match(checkRun(null), /not an object/);
});

test('checkRecord refuses a stored run that is not one of ours, and says why', () => {
  const good = { bytes: new Uint8Array(16), step: 3, preset: 'tiny', date: Date.now(), corpus: null, history: run([1, 2, 3]) };
  assert.equal(checkRecord(good), null);
  assert.equal(checkRecord({ ...good, history: undefined }), null, 'a record without a history resumes without one');
  assert.equal(checkRecord({ ...good, corpus: { name: 'notes.txt', data: 'abc' } }), null);
  const cases = [
    [{ ...good, history: { ...good.history, x: 5 } }, /chart history is damaged: history\.x is not a list/],
    [{ ...good, bytes: 'not bytes' }, /no checkpoint bytes/],
    [{ ...good, step: MAX_STEP + 1 }, /step .* is not a whole number from 0 to 4294967295/],
    [{ ...good, step: -1 }, /step/],
    [{ ...good, date: 'yesterday' }, /date/],
    [{ ...good, preset: 5 }, /preset/],
    [{ ...good, corpus: { name: 5, data: 'abc' } }, /corpus has no name/],
    [{ ...good, corpus: { name: 'a', data: 5 } }, /corpus's text/],
    [7, /not a saved run/],
  ];
  for (const [record, want] of cases) assert.match(checkRecord(record) ?? 'accepted', want);
});

test('a long run keeps a bounded history: every other step let go, the latest and every evaluation kept', () => {
  const r = emptyRun('');
  const steps = 3 * MAX_KEPT + 7;
  for (let step = 1; step <= steps; step++) recordStep(r, stats(step, { val_loss: step % 1000 === 0 ? step / 1e6 : null }));
  assert.ok(r.n <= MAX_KEPT && r.n > MAX_KEPT / 2, `${r.n} steps kept`);
  for (const key of SERIES) assert.equal(r[key].length, r.n, key);
  assert.equal(r.x[r.n - 1], steps, 'the latest step stays');
  assert.equal(checkRun(r), null, 'still a history: steps rising');
  const evaluated = r.val.filter((v) => v !== null).length;
  assert.equal(evaluated, Math.floor(steps / 1000), 'every evaluation is still on the chart');
});

// The training worker's failures: a crash (a Rust panic ends in a wasm trap) settles
// every request waiting on it and Restart trains again on a new worker; a worker that
// stops answering, or whose step never finishes, is noticed by the watchdog, says so,
// and Restart trains again. While running, the worker trains several steps a call.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { FAST, open, setup, theWorker, tid, waitNumber, waitReady } from './helpers.mjs';

let env;
before(async () => {
  env = await setup();
});
after(() => env?.close());

/** Waits for the error box and returns [title, text, kind of the widget's error event]. */
async function shownError(page, kind) {
  await page.locator(tid('error')).waitFor({ state: 'visible', timeout: 60_000 });
  return [await page.locator('.tp-error-title').innerText(), await page.locator(tid('error')).innerText(), await kind];
}

const nextErrorKind = (page) =>
  page.evaluate(
    () => new Promise((done) => document.querySelector('.tp').addEventListener('tidepool:error', (e) => done(e.detail.kind), { once: true })),
  );

async function restartTrains(page) {
  const restart = page.locator('.tp-error button:text("Restart")');
  assert.ok(await restart.isVisible(), 'Restart is offered');
  // the new worker's first step compiles every shader again
  await page.evaluate(() => (document.querySelector('.tp').tidepool.watchdog.busy = 300_000));
  await restart.click();
  await waitReady(page);
  assert.equal(await page.locator(tid('error')).isVisible(), false, 'the message goes with Restart');
  assert.equal(await page.evaluate(() => document.querySelector('.tp').tidepool.running), false, 'it was not training: Restart does not start it');
  const at = await page.evaluate(() => document.querySelector('.tp').tidepool.history.n);
  await page.evaluate(() => document.querySelector('.tp').tidepool.stepOnce());
  await waitNumber(page, 'step-count', (n) => n === at + 1, { timeout: 60_000, what: 'a step after Restart' });
}

test('a crash settles every waiting request, shows it crashed, and Restart trains again', { timeout: 180_000 }, async () => {
  const { page, errors } = await open(env, FAST);
  await waitReady(page);
  await page.click(tid('step-once'));
  await waitNumber(page, 'step-count', (n) => n === 1, { timeout: 60_000, what: 'the first step' });

  // What a Rust panic does in the browser: console_error_panic_hook prints it, then
  // the wasm traps ("unreachable") in the middle of the step's future, whose promise
  // never settles. Here the trap comes from the next command encoder.
  const worker = await theWorker(page);
  await worker.evaluate(() => {
    GPUDevice.prototype.createCommandEncoder = function () {
      console.error('panicked at src/injected.rs:1:1:\ninjected by worker.test.mjs');
      throw new WebAssembly.RuntimeError('unreachable');
    };
  });
  const kind = nextErrorKind(page);
  // a step, then a sample and a reset queued behind it: all three must settle
  const settled = page.evaluate(async () => {
    const t = document.querySelector('.tp').tidepool;
    const waiting = [t.stepOnce(), t.sample(), t.reset()];
    const timeout = new Promise((done) => setTimeout(() => done('still waiting after 30 s'), 30_000));
    return Promise.race([Promise.allSettled(waiting).then(() => 'settled'), timeout]);
  });
  assert.equal(await settled, 'settled', 'every request to the crashed worker settles');
  const [title, text, k] = await shownError(page, kind);
  assert.equal(k, 'crashed');
  assert.equal(title, 'tidepool crashed');
  assert.match(text, /injected by worker\.test\.mjs/, 'the panic message shows');
  assert.doesNotMatch(text, /worker was (stopped|replaced)/);
  assert.ok(await page.locator(tid('step-once')).isDisabled(), 'no stepping a dead worker');

  await restartTrains(page);
  assert.doesNotMatch(await page.locator('.tp-status').innerText(), /stopped/i);
  assert.deepEqual(errors.filter((e) => e.startsWith('page:')), [], 'no uncaught exceptions in the page');
});

describe('the watchdog', () => {
  let page;

  // A widget on a blank page with a fast watchdog: pinged every 0.3 s, dead after 2 s
  // without an answer, or after 3 s on one step once the first (which compiles every
  // shader: tens of seconds on a busy SwiftShader) is done. The tests share the page:
  // each ends with a Restart that trains.
  before(async () => {
    ({ page } = await open(env, 'www/blank.html'));
    await page.evaluate(async () => {
      const { mount } = await import('/www/tidepool.mjs');
      const el = document.body.appendChild(document.createElement('div'));
      // The schedule is the batching test's (Step once ignores it).
      const schedule = { batchMs: 1e9, maxAtOnce: 4, evalEvery: 6, evalShare: 1, sampleLength: 0, maxSteps: 14 };
      mount(el, { batch: 2, context: 8, watchdog: { every: 300, answer: 2000 }, schedule });
    });
    await waitReady(page);
    await page.evaluate(() => document.querySelector('.tp').tidepool.stepOnce());
    await waitNumber(page, 'step-count', (n) => n === 1, { timeout: 60_000, what: 'the first step' });
  });
  const tighten = () => page.evaluate(() => (document.querySelector('.tp').tidepool.watchdog.busy = 3000));

  test('running trains several steps a call, never past an evaluation or the last step', { timeout: 120_000 }, async () => {
    // batchMs lets every call take maxAtOnce (4) steps, but a call ends at each
    // evaluation (every 6) and at maxSteps (14): from step 1, calls of 4, 1, 4, 2, 2.
    await page.evaluate(() => {
      window.seen = [];
      document.querySelector('.tp').addEventListener('tidepool:step', (e) => window.seen.push({ step: e.detail.step, ms: e.detail.ms, ahead: Boolean(e.detail.ahead) }));
      document.querySelector('.tp').tidepool.start();
    });
    await page.waitForFunction(() => document.querySelector('.tp').tidepool.running === false && window.seen.length >= 13, null, { timeout: 90_000 });
    await page.waitForTimeout(500); // nothing more comes
    const seen = await page.evaluate(() => window.seen);
    assert.deepEqual(seen.map((s) => s.step), [2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14], 'each step once, in order, none past maxSteps');
    // A call's steps share its time (the call's over its steps): one value a call.
    const calls = [[2, 5], [6, 6], [7, 10], [11, 12], [13, 14]];
    for (const [first, last] of calls) {
      const ms = seen.filter((s) => s.step >= first && s.step <= last).map((s) => s.ms);
      assert.ok(ms.every((m) => m === ms[0] && m > 0), `steps ${first}-${last} were one call: ${ms}`);
    }
    // Each call of several steps starts the next before its own losses are back,
    // unless something is due at its end: 6 and 12 evaluate, 14 ends the run. So
    // [6] starts while [2-5] is in flight and [11-12] while [7-10] is; the rest
    // start after the call before.
    const ahead = seen.filter((s) => s.ahead).map((s) => s.step);
    assert.deepEqual(ahead, [6, 11, 12], 'the calls started ahead');
    const h = await page.evaluate(() => {
      const { x, val } = document.querySelector('.tp').tidepool.history;
      return { x: Array.from(x.slice(0, 14)), val: Array.from(val.slice(0, 14)) };
    });
    const evaluated = h.x.filter((_, i) => h.val[i] != null);
    assert.deepEqual(evaluated, [6, 12], 'evaluated at each multiple of evalEvery, after its own step');
    assert.match(await page.locator('.tp-status').innerText(), /14/, 'paused at the last step');
  });

  test('a step that never finishes is noticed, and Restart trains again', { timeout: 120_000 }, async () => {
    await tighten();
    const kind = nextErrorKind(page);
    // the GPU never hands the step's results back; the worker itself still answers
    const worker = await theWorker(page);
    await worker.evaluate(() => {
      GPUBuffer.prototype.mapAsync = () => new Promise(() => {});
    });
    const t0 = Date.now();
    const step = page.evaluate(() => document.querySelector('.tp').tidepool.stepOnce().then(() => 'settled'));
    const [title, text, k] = await shownError(page, kind);
    assert.ok(Date.now() - t0 < 20_000, `noticed after ${Date.now() - t0} ms`);
    assert.equal(k, 'stalled');
    assert.equal(title, 'tidepool stopped answering');
    assert.match(text, /"step" has not finished/);
    assert.equal(await step, 'settled', 'the step request settles');
    await restartTrains(page);
  });

  test('a worker that stops answering is noticed, and Restart trains again', { timeout: 120_000 }, async () => {
    await tighten();
    const kind = nextErrorKind(page);
    // its event loop blocked for good: no message, no error, nothing
    const worker = await theWorker(page);
    await worker.evaluate(() => {
      setTimeout(() => {
        for (;;);
      }, 0);
    });
    const t0 = Date.now();
    const [title, text, k] = await shownError(page, kind);
    assert.ok(Date.now() - t0 < 15_000, `noticed after ${Date.now() - t0} ms`);
    assert.equal(k, 'stalled');
    assert.equal(title, 'tidepool stopped answering');
    assert.match(text, /stopped answering/);
    await restartTrains(page);
  });
});

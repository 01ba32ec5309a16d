// A GPU device lost mid-run (here destroyed from inside the training worker) shows
// the device-lost message (not a crash: the worker lives on) with Restart, and
// Restart trains again on a new device. A crash is worker.test.mjs's.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { FAST, history, open, setup, theWorker, tid, waitNumber, waitReady } from './helpers.mjs';

let env;
before(async () => {
  env = await setup();
});
after(() => env?.close());

test('a lost device shows the device-lost message and Restart trains again', { timeout: 150_000 }, async () => {
  const { page, errors } = await open(env, FAST);
  await waitReady(page);
  await page.click(tid('step-once'));
  await waitNumber(page, 'step-count', (n) => n === 1, { timeout: 60_000, what: 'the first step' });

  // The next command encoder the trainer makes destroys its device first.
  const worker = await theWorker(page);
  assert.ok(worker, 'training runs in a worker');
  await worker.evaluate(() => {
    const create = GPUDevice.prototype.createCommandEncoder;
    GPUDevice.prototype.createCommandEncoder = function (...args) {
      GPUDevice.prototype.createCommandEncoder = create;
      this.destroy();
      return create.apply(this, args);
    };
  });
  const kinds = page.evaluate(
    () => new Promise((done) => document.querySelector('.tp').addEventListener('tidepool:error', (e) => done(e.detail.kind), { once: true })),
  );
  await page.click(tid('start'));
  const error = page.locator(tid('error'));
  await error.waitFor({ state: 'visible', timeout: 60_000 });
  assert.equal(await kinds, 'device_lost', 'the error is a device loss');
  assert.equal(await page.locator('.tp-error-title').innerText(), 'The GPU device was lost');
  const text = await error.innerText();
  assert.match(text, /device was lost/i, text);
  assert.doesNotMatch(text, /crashed|panicked/i, text);
  const restart = page.locator('.tp-error button:text("Restart")');
  assert.ok(await restart.isVisible(), 'Restart is offered');
  assert.ok(await page.locator(tid('pause')).isDisabled(), 'training stopped');

  await restart.click();
  await waitNumber(page, 'step-count', (n) => n >= 2, { timeout: 90_000, what: 'training after Restart' });
  assert.equal(await error.isVisible(), false, 'the message goes with Restart');
  assert.ok((await history(page)).loss.every(Number.isFinite));
  await page.click(tid('pause'));
  assert.deepEqual(errors.filter((e) => e.startsWith('page:')), [], 'no uncaught exceptions in the page');
});

// A Chromium without WebGPU (launched without --enable-unsafe-webgpu: navigator.gpu
// exists but requestAdapter() gives null) gets a message that says which browsers
// and flags give WebGPU, and a page whose controls still answer.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { open, setup, tid } from './helpers.mjs';

let env;
before(async () => {
  env = await setup({ webgpu: false });
});
after(() => env?.close());

test('a browser without WebGPU shows the no-WebGPU message', { timeout: 90_000 }, async () => {
  const { page, errors } = await open(env, '');
  const error = page.locator(tid('error'));
  await error.waitFor({ state: 'visible', timeout: 60_000 });
  const text = await error.innerText();
  assert.match(text, /No WebGPU/, text);
  assert.match(text, /Chrome/, 'names browsers that have it');
  assert.match(text, /--enable-unsafe-webgpu/, 'names the flag');

  // Start tries again and says so again, through the wasm this time; nothing breaks.
  await page.click('.tp-error button:text("Dismiss")');
  assert.equal(await error.isVisible(), false);
  await page.click(tid('start'));
  await error.waitFor({ state: 'visible', timeout: 60_000 });
  assert.match(await error.innerText(), /WebGPU|GPU adapter/);
  assert.equal(await page.locator(tid('step-count')).innerText(), '0');
  assert.ok(await page.locator(tid('reset')).isEnabled());
  assert.deepEqual(errors.filter((e) => e.startsWith('page:')), [], 'no uncaught exceptions');
});

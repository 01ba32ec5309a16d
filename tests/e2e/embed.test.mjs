// www/embed.html: two trainers on one page (a <tidepool-trainer> element and a
// mount() call), pool on and pool off, each with its own worker and GPU device,
// training at once and independently.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { FAST, history, num, open, setup, tid, waitNumber, waitPaused, waitReady } from './helpers.mjs';

const LEFT = '#with-pool';
const RIGHT = '#without-pool';

let env;
before(async () => {
  env = await setup();
});
after(() => env?.close());

test('embed.html runs two trainers at once, independently', { timeout: 240_000 }, async () => {
  const { page, errors } = await open(env, `www/embed.html${FAST}`, { width: 1400, height: 900 });
  await waitReady(page, LEFT);
  await waitReady(page, RIGHT);
  assert.equal(await page.locator(tid('pool-toggle', LEFT)).isChecked(), true);
  assert.equal(await page.locator(tid('pool-toggle', RIGHT)).isChecked(), false);

  await page.click('#start-both');
  await waitNumber(page, 'step-count', (n) => n >= 5, { scope: LEFT, timeout: 150_000, what: 'left: 5 steps' });

  // Pause one: it stops, the other goes on. The pooled one pauses as soon as it has 5
  // steps, before its first sample (after step 10; waiting for the other's 5 steps
  // first once let it reach step 11). A pause waits for the work in flight; with two
  // trainers sharing SwiftShader beside another test file on 2 cores, one full e2e
  // run here timed out after waitPaused's 30 s (repeated runs pause in under 0.4 s):
  // more room, and waitPaused says what the widget showed when it gives up.
  const PAUSE_MS = 120_000;
  await page.click(tid('pause', LEFT));
  const leftAt = await waitPaused(page, LEFT, PAUSE_MS);
  await waitNumber(page, 'step-count', (n) => n >= 5, { scope: RIGHT, timeout: 150_000, what: 'right: 5 steps' });
  const rightAt = await num(page, 'step-count', RIGHT);
  await waitNumber(page, 'step-count', (n) => n >= rightAt + 3, { scope: RIGHT, timeout: 60_000, what: 'right keeps training' });
  assert.equal(await num(page, 'step-count', LEFT), leftAt, 'left stays paused');
  await page.click(tid('pause', RIGHT));
  await waitPaused(page, RIGHT, PAUSE_MS);

  // Their own state: the pooled one stopped creating buffers after its first step, the
  // other never did. Should the pause still land past step 10, the first sample's own
  // objects (made once, at its first run) count in that step: once, and no other.
  const left = await history(page, LEFT);
  const right = await history(page, RIGHT);
  const firstRuns = left.created.slice(9).filter((c) => c > 0).length;
  assert.ok(
    left.created.slice(1, 9).every((c) => c === 0) && firstRuns <= 1,
    `pool on: no buffers created after the first step but by the first sample (${left.created})`,
  );
  assert.ok(right.created.every((c) => c > 0), `pool off: buffers created every step (${right.created})`);
  assert.equal(await num(page, 'buffers-created', LEFT), left.created.at(-1), "the latest step's count");
  assert.ok((await num(page, 'buffers-created', RIGHT)) > 0);
  assert.notEqual(left.n, right.n, 'separate step counts');

  // Reset one: the other keeps its run.
  await page.click(tid('reset', RIGHT));
  await waitNumber(page, 'step-count', (n) => n === 0, { scope: RIGHT, timeout: 60_000, what: 'right reset' });
  assert.equal(await num(page, 'step-count', LEFT), leftAt);
  assert.deepEqual(errors, [], 'no console errors');
});

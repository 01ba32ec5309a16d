// The page trains 300 steps with its evaluations and samples on, and after warm-up
// no step creates a buffer or a bind group: the training path never, an evaluation
// or a sample only the first time it runs (the step stats say which path made what).

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { FAST, open, setup } from './helpers.mjs';

const STEPS = 300;

describe('a long run on the page', { timeout: 900_000 }, () => {
  let env;
  before(async () => {
    env = await setup();
  });
  after(() => env?.close());

  test(`${STEPS} steps with evaluations and samples create nothing after warm-up`, { timeout: 840_000 }, async () => {
    const page = await env.browser.newPage();
    await page.addInitScript(() => {
      window.seen = { steps: [], samples: 0, errors: [] };
      document.addEventListener('tidepool:step', (e) => window.seen.steps.push(e.detail));
      document.addEventListener('tidepool:sample', () => window.seen.samples++);
      document.addEventListener('tidepool:error', (e) => window.seen.errors.push(e.detail.message));
    });
    const errors = [];
    page.on('pageerror', (e) => errors.push(`page: ${e.message}`));
    // Evaluations every 20 steps (the page's default) and samples every few seconds.
    await page.goto(`${env.server.url}${FAST}&steps=${STEPS}&autostart`);
    await page
      .waitForFunction((n) => window.seen.steps.some((s) => s.step >= n) || window.seen.errors.length, STEPS, {
        timeout: 780_000,
        polling: 500,
      })
      .catch(async (e) => {
        const at = await page.evaluate(() => ({ last: window.seen.steps.at(-1)?.step, errors: window.seen.errors }));
        throw new Error(`${e.message}: the last step reported was ${at.last}, errors ${JSON.stringify(at.errors)}`);
      });
    const seen = await page.evaluate(() => window.seen);
    assert.deepEqual(seen.errors, [], 'no training error');
    assert.deepEqual(errors, [], 'no page error');
    const steps = seen.steps.filter((s) => s.step > 2);
    assert.ok(steps.length >= STEPS - 2, `every step reported (${steps.length})`);
    assert.ok(steps.some((s) => s.val_loss !== null && s.val_loss !== undefined), 'the page evaluated');
    assert.ok(seen.samples > 0, 'the page sampled');

    const firsts = { evaluate: [], sample: [], checkpoint: [] };
    for (const s of steps) {
      const by = s.created_step_by_path;
      for (const path of ['setup', 'train']) {
        const c = by[path];
        assert.equal(c.buffers + c.bind_groups + c.pipelines, 0, `step ${s.step}: ${path} created ${JSON.stringify(c)}`);
      }
      for (const path of Object.keys(firsts)) {
        const c = by[path];
        if (c.buffers + c.bind_groups + c.pipelines > 0) firsts[path].push(s.step);
      }
    }
    for (const [path, at] of Object.entries(firsts)) {
      assert.ok(at.length <= 1, `${path} created objects only the first time it ran, not at steps ${at}`);
    }
    // Every step but those of a path's first run: 0 buffers and 0 bind groups.
    const first = new Set(Object.values(firsts).flat());
    const created = steps.filter((s) => !first.has(s.step) && s.buffers_created_step + s.bind_groups_created_step > 0);
    assert.deepEqual(created.map((s) => s.step), [], 'steps after warm-up that created buffers or bind groups');
    await page.close();
  });
});

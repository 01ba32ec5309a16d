// The planned policy in the page (headless Chromium, WebGPU on SwiftShader): after
// its traced first step, each preset's steps hold their tensors in planned arenas,
// the stats the page receives put reserved within 1% of requested, and the page
// shows the arenas and that the plan served every request of a step. The widget
// neither samples nor evaluates here: those draw their own buffers from the pool,
// outside the plan, and the peaks would count them (a call of many steps could pass
// the first sample before the test reads the stats).

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { num, open, setup, tid, waitNumber } from './helpers.mjs';

let env;
before(async () => {
  env = await setup();
});
after(() => env?.close());

for (const preset of ['tiny', 'small']) {
  test(`${preset}: planned steps reserve within 1% of what they request`, { timeout: 300_000 }, async () => {
    const { page, errors } = await open(env, 'www/blank.html');
    await page.evaluate(async (preset) => {
      const { mount } = await import('/www/tidepool.mjs');
      const el = document.body.appendChild(document.createElement('div'));
      const schedule = { sampleLength: 0, evalEvery: 0 };
      mount(el, { batch: 2, context: 8, preset, policy: 'planned', autostart: true, schedule });
    }, preset);
    await waitNumber(page, 'step-count', (n) => n >= 4, { timeout: 240_000, what: '4 steps' });
    const s = await page.evaluate(() => document.querySelector('.tp').tidepool.latest);
    const c = s.context;
    assert.ok(c.arena_bytes > 0, 'the plan has arenas');
    assert.ok(c.plan_hits > 0, 'steps took planned ranges');
    assert.equal(c.plan_misses, 0, 'every request of a step foreseen');
    const ratio = c.peak_bytes_reserved / c.peak_bytes_requested_in_use;
    assert.ok(ratio <= 1.01, `reserved ${c.peak_bytes_reserved} for ${c.peak_bytes_requested_in_use} requested: ${ratio}`);
    assert.equal(await num(page, 'buffers-created'), 0, 'a planned step creates no buffer');
    assert.ok(await page.locator(tid('arena-bytes')).isVisible(), 'the arenas show');
    assert.match(await page.locator(tid('plan-fallbacks')).innerText(), /^0 unforeseen/);
    assert.deepEqual(errors, [], 'no console errors');
    await page.close();
  });
}

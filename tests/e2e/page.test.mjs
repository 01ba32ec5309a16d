// The main page (index.html) in headless Chromium with WebGPU on SwiftShader:
// it loads cleanly, trains, charts the pool, pauses, steps, resets, and runs with
// the pool off. The tests share one page and run in order, like a person would.

import assert from 'node:assert/strict';
import { copyFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { FAST, ROOT, history, mean, num, open, screenshotPath, setup, tid, waitNumber, waitPaused, waitReady } from './helpers.mjs';

describe('the page', { timeout: 900_000 }, () => {
  let env;
  let page;
  let errors;

  before(async () => {
    env = await setup();
    ({ page, errors } = await open(env, FAST));
  });
  after(() => env?.close());

  test('loads with no console errors and shows the adapter by the name it reports', { timeout: 90_000 }, async () => {
    await waitReady(page);
    const shown = await page.locator(tid('adapter')).innerText();
    // What the browser's adapter says of itself: its description, or (browsers often
    // leave that empty) its vendor, architecture and device.
    const reported = await page.evaluate(async () => {
      const info = (await navigator.gpu.requestAdapter()).info;
      const parts = [info.vendor, info.architecture, info.device, info.description].filter(Boolean);
      return info.description || parts.join(' ');
    });
    assert.ok(reported, 'the adapter reports a name');
    assert.equal(shown, `${reported} (webgpu)`, 'the page shows the name the adapter reports, and the backend');
    assert.equal(await num(page, 'step-count'), 0);
    assert.equal(await page.locator(tid('error')).isVisible(), false, 'no error message shows');
    for (const id of ['start', 'pause', 'step-once', 'reset', 'pool-toggle', 'corpus-file', 'sample']) {
      assert.equal(await page.locator(tid(id)).count(), 1, `one ${id}`);
    }
    for (const id of ['chart-loss', 'chart-hit-rate', 'chart-bytes', 'chart-buckets', 'chart-step-time']) {
      assert.equal(await page.locator(tid(id)).count(), 1, `one ${id}`);
    }
    assert.deepEqual(errors, [], 'no console errors while loading');
  });

  test('Start trains: steps pass, the loss falls, the pool hits, a sample appears', { timeout: 180_000 }, async () => {
    await page.click(tid('start'));
    const firstLoss = Number.parseFloat(await waitLoss(page));
    const steps = await waitNumber(page, 'step-count', (n) => n >= 20, { timeout: 150_000, what: '20 steps' });
    assert.ok(steps >= 20);

    const lossNow = await num(page, 'loss');
    const h = await history(page);
    assert.ok(Number.isFinite(firstLoss) && Number.isFinite(lossNow), 'the loss shows as a number');
    assert.ok(mean(h.loss.slice(-5)) < mean(h.loss.slice(0, 5)), `loss falls: first ${h.loss.slice(0, 5)} last ${h.loss.slice(-5)}`);
    assert.ok(lossNow < firstLoss, `the loss shown falls: ${firstLoss} -> ${lossNow}`);

    // hit-rate chart: a point per step, and after the first steps nearly every acquire hits
    const hit = page.locator(tid('chart-hit-rate'));
    assert.ok(Number(await hit.getAttribute('data-points')) >= 20, 'hit-rate chart has points');
    assert.ok(Number(await hit.getAttribute('data-latest')) >= 0.9, `latest hit rate ${await hit.getAttribute('data-latest')}`);
    assert.ok((await hit.locator('canvas').count()) > 0, 'hit-rate chart is drawn');
    assert.ok((await num(page, 'hit-rate')) >= 90, 'hit rate shown (percent)');
    assert.ok(mean(h.hit.slice(5)) >= 0.9, `hit rate after the first steps: ${h.hit.slice(5)}`);
    // Training goes on while the test reads: the figures are drawn once a frame, so read
    // the shown step and its buffers together and compare with that step's record.
    const shown = await page.evaluate(() => {
      const text = (id) => document.querySelector(`[data-testid="${id}"]`).textContent;
      const h = document.querySelector('.tp').tidepool.history;
      const step = Number(text('step-count'));
      return { step, created: Number(text('buffers-created')), recorded: h.created[h.x.indexOf(step)] };
    });
    assert.equal(shown.created, shown.recorded, `buffers created shown at step ${shown.step}`);
    assert.ok((await num(page, 'bytes-held')) > 0, 'the pool holds bytes');

    const buckets = page.locator(tid('chart-buckets'));
    assert.ok(Number(await buckets.getAttribute('data-points')) > 0, 'buckets chart has bars');
    for (const id of ['chart-loss', 'chart-bytes', 'chart-step-time']) {
      assert.ok(Number(await page.locator(tid(id)).getAttribute('data-points')) >= 20, `${id} has points`);
    }

    await page.waitForFunction((sel) => document.querySelector(sel).textContent.trim().length > 0, tid('sample'), {
      timeout: 120_000,
      polling: 200,
    });

    // the held-out loss: evaluated every 20 steps, and drawn on the loss chart
    await page.waitForFunction(() => document.querySelector('[data-ref="valLoss"]').textContent !== '', null, {
      timeout: 90_000,
      polling: 200,
    });
    const val = await page.evaluate(() => document.querySelector('.tp').tidepool.history.val.filter((v) => v != null));
    assert.ok(val.length > 0 && val.every(Number.isFinite), `held-out losses ${val}`);

    // the README's screenshot: the page mid-run
    const shot = screenshotPath();
    await page.screenshot({ path: shot, fullPage: true });
    if (process.env.UPDATE_DOCS_SCREENSHOT) {
      mkdirSync(join(ROOT, 'docs'), { recursive: true });
      copyFileSync(shot, join(ROOT, 'docs', 'screenshot.png'));
    }
  });

  test('Pause stops steps within the calls in flight', { timeout: 60_000 }, async () => {
    // The worker trains as many steps a call as fit in 16 ms (schedule.batchMs) by its
    // last call's time a step: one at a time where a step takes more than 8 ms.
    const ms = await page.evaluate(() => document.querySelector('.tp').tidepool.latest.ms);
    const call = Math.min(16, Math.max(1, Math.floor(16 / ms)));
    // Calls of several steps run two in flight (worker.mjs, `ahead`): both finish.
    const inFlight = call > 1 ? 2 : 1;
    await page.evaluate(() => {
      window.tpStates = [];
      document.querySelector('.tp').addEventListener('tidepool:state', (e) => window.tpStates.push(e.detail));
    });
    await page.click(tid('pause'));
    const paused = await waitPaused(page);
    // The calls in flight when the pause reached the worker finish, and no more: the
    // worker's confirmation says which step it had posted when the pause arrived. (The
    // page may be steps behind the worker on a loaded machine: its own count at the
    // press bounds nothing.)
    const state = await page.evaluate(() => window.tpStates.findLast((m) => !m.running));
    assert.ok(state, 'the pause is confirmed');
    assert.equal(state.step, paused, 'the confirmation names the step paused at');
    assert.ok(
      state.step >= state.asked_at && state.step <= state.asked_at + inFlight * call,
      `paused at ${state.step}, the pause arrived after step ${state.asked_at}, ${call} a call, ${inFlight} in flight (${ms} ms a step)`,
    );
    await page.waitForTimeout(2500); // several SwiftShader steps' worth
    assert.equal(await num(page, 'step-count'), paused, 'no steps while paused');
    assert.equal((await history(page)).n, paused);
    assert.ok(await page.locator(tid('start')).isEnabled(), 'Start is offered again');
  });

  test('Step once takes exactly one step', { timeout: 60_000 }, async () => {
    const at = await num(page, 'step-count');
    await page.click(tid('step-once'));
    await waitNumber(page, 'step-count', (n) => n === at + 1, { timeout: 30_000, what: 'one step' });
    await page.waitForTimeout(1500);
    assert.equal(await num(page, 'step-count'), at + 1);
  });

  test('the keyboard runs it: Enter on Start, then on Pause', { timeout: 60_000 }, async () => {
    const at = await num(page, 'step-count');
    await page.focus(tid('start'));
    await page.keyboard.press('Enter');
    await waitNumber(page, 'step-count', (n) => n > at, { timeout: 30_000, what: 'a step after Enter' });
    await page.waitForFunction((sel) => document.activeElement === document.querySelector(sel), tid('pause'), { timeout: 10_000 });
    await page.keyboard.press('Enter'); // focus moved to Pause with the press
    await waitPaused(page);
    assert.equal(await page.evaluate(() => document.activeElement.dataset.testid), 'start');
  });

  test('Reset starts over, with the settings changed', { timeout: 180_000 }, async () => {
    assert.ok((await num(page, 'step-count')) > 0);
    assert.match(await page.locator('.tp-model').innerText(), /context 8 · .*batch 2 /);
    await page.click('.tp-settings summary');
    await page.getByLabel('Batch').fill('3');
    await page.getByLabel('Batch').press('Tab');
    await page.click(tid('reset'));
    await waitNumber(page, 'step-count', (n) => n === 0, { timeout: 60_000, what: 'step 0 after Reset' });
    await waitReady(page);
    assert.match(await page.locator('.tp-model').innerText(), /batch 3 /, 'the new batch applies');
    assert.equal((await history(page)).n, 0);
    assert.equal(await page.locator(tid('chart-hit-rate')).getAttribute('data-points'), '0');
    assert.equal(await page.locator(tid('loss')).innerText(), '');
    await page.click(tid('step-once'));
    await waitNumber(page, 'step-count', (n) => n === 1, { timeout: 90_000, what: 'step 1 after Reset' });
  });

  test('Precision: f16 is offered exactly where the adapter has shader-f16', { timeout: 180_000 }, async () => {
    const has = await page.evaluate(async () => (await navigator.gpu.requestAdapter()).features.has('shader-f16'));
    const select = page.locator(tid('precision'));
    assert.equal(await select.inputValue(), 'f32', 'f32 by default');
    const f16 = select.locator('option[value="f16"]');
    assert.equal(await f16.isDisabled(), !has, `shader-f16 ${has ? 'offered' : 'absent'}`);
    const hint = await page.locator(tid('precision-hint')).innerText();
    if (!has) {
      assert.match(hint, /shader-f16/, 'the hint says what f16 needs');
      return;
    }
    await select.selectOption('f16');
    await page.click(tid('reset'));
    await waitReady(page);
    assert.match(await page.locator('.tp-model').innerText(), /f16 matmuls/, 'the model line shows f16');
    await page.click(tid('step-once'));
    await waitNumber(page, 'step-count', (n) => n === 1, { timeout: 90_000, what: 'an f16 step' });
    await select.selectOption('f32');
    await page.click(tid('reset'));
    await waitReady(page);
  });

  test('Pool off creates buffers every step', { timeout: 120_000 }, async () => {
    const toggle = page.locator(tid('pool-toggle'));
    assert.equal(await toggle.isChecked(), true);
    await toggle.press('Space'); // the switch is keyboard operable
    await waitNumber(page, 'step-count', (n) => n === 0, { timeout: 60_000, what: 'restart with the pool off' });
    await waitReady(page);
    assert.equal(await toggle.isChecked(), false);
    await page.click(tid('start'));
    await waitNumber(page, 'step-count', (n) => n >= 5, { timeout: 90_000, what: '5 steps with the pool off' });
    await page.click(tid('pause'));
    await waitPaused(page);
    const h = await history(page);
    assert.ok(h.created.length >= 5);
    assert.ok(
      h.created.every((c) => c > 0),
      `every step created buffers: ${h.created}`,
    );
    assert.ok((await num(page, 'buffers-created')) > 0, 'the figure shows buffers created this step');
    assert.ok(h.hit.every((r) => !(r > 0)), `no pool hits with the pool off: ${h.hit}`);
    assert.equal(await num(page, 'bytes-held'), 0, 'the pool holds nothing');

  });

  test('Pool back on: the first step creates buffers, then none do', { timeout: 120_000 }, async () => {
    const toggle = page.locator(tid('pool-toggle'));
    await toggle.press('Space');
    await waitNumber(page, 'step-count', (n) => n === 0, { timeout: 60_000, what: 'restart with the pool on' });
    await waitReady(page);
    assert.equal(await toggle.isChecked(), true);
    // Step once, six times: no evaluation or sample comes between steps to acquire
    // buffers of other sizes, so every step after the first reuses what it freed.
    for (let i = 1; i <= 6; i++) {
      await page.click(tid('step-once'));
      await waitNumber(page, 'step-count', (n) => n === i, { timeout: 60_000, what: `step ${i}` });
    }
    const h = await history(page);
    assert.equal(h.n, 6);
    assert.ok(h.created[0] > 0, `the first step creates the buffers it needs: ${h.created}`);
    assert.deepEqual(h.created.slice(1), [0, 0, 0, 0, 0], `no step after the first creates one: ${h.created}`);
    assert.ok(h.hit.slice(1).every((r) => r === 1), `every acquire after the first step hits: ${h.hit}`);
    assert.equal(await num(page, 'buffers-created'), 0, 'the figure shows none created');
    assert.equal(await page.locator(tid('error')).isVisible(), false);
  });
});

// The loss shows once the first step lands.
async function waitLoss(page) {
  await page.waitForFunction((sel) => document.querySelector(sel).textContent !== '', tid('loss'), { timeout: 60_000, polling: 50 });
  return page.locator(tid('loss')).innerText();
}

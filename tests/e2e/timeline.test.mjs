// The memory timeline and the what-if replay table in headless Chromium
// on SwiftShader: Trace runs one traced step; what the panel shows is checked against
// that step's trace JSON (computed here, not by the page's code) and the replay table
// against the wasm's replayTrace run here on the same JSON. Saves target/timeline.png
// (and docs/timeline.png with UPDATE_DOCS_SCREENSHOT=1).

import assert from 'node:assert/strict';
import { copyFileSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { FAST, ROOT, num, open, setup, tid, waitNumber, waitReady } from './helpers.mjs';

const BIRTHS = ['hit', 'miss', 'oversize', 'unpooled'];
const DEATHS = ['release', 'reject', 'discard'];

describe('the memory timeline', { timeout: 600_000 }, () => {
  let env;
  let page;
  let errors;

  before(async () => {
    env = await setup();
    ({ page, errors } = await open(env, FAST, { width: 1100, height: 900 }));
  });
  after(() => env?.close());

  test('is closed and traces nothing until asked', { timeout: 120_000 }, async () => {
    await waitReady(page);
    const timeline = page.locator(tid('timeline'));
    assert.equal(await timeline.getAttribute('open'), null, 'the panel starts closed');
    assert.equal(await page.locator(tid('trace-every')).inputValue(), '0', 'automatic tracing is off by default');
    // a first plain step, so that the traced one is a steady step
    await page.click(tid('step-once'));
    await waitNumber(page, 'step-count', (n) => n === 1, { timeout: 90_000, what: 'step 1' });
    assert.equal(await timeline.getAttribute('data-step'), null, 'no step was traced');
  });

  test('Trace shows the step: peak, bands and free bytes match the trace JSON', { timeout: 180_000 }, async () => {
    await page.click(`${tid('timeline')} > summary`);
    await page.click(tid('trace'));
    await page.waitForFunction(() => document.querySelector('[data-testid="timeline"]').dataset.step, null, { timeout: 150_000, polling: 100 });
    const { trace, replay, top, held } = await page.evaluate(() => document.querySelector('.tp').tidepool.lastTrace);
    assert.equal(trace.format, 'tidepool-trace');
    assert.equal(trace.steps.length, 1);
    const step = trace.steps[0];
    assert.equal(step.step, 2, 'the traced step is the next training step');
    assert.equal(step.label, 'steady');
    await waitNumber(page, 'step-count', (n) => n === 2, { timeout: 10_000, what: 'the traced step counted' });
    const events = step.events;
    assert.ok(events.length > 10, `a step has events (${events.length})`);

    // the stack drawn, rebuilt from births and deaths, stands as high as the trace's
    // in_use counter after every event, and the free bytes per class add up to `held`
    assert.deepEqual(top, [step.in_use_at_start, ...events.map((e) => e.in_use)], 'the stack height at every event');
    assert.deepEqual(held, [step.held_at_start, ...events.map((e) => e.held)], 'the free bytes at every event');

    const panel = page.locator(tid('timeline'));
    const data = async (name) => Number(await panel.getAttribute(`data-${name}`));

    // the peak shown is the most bytes in use at once, by the trace's own counter
    const peak = Math.max(step.in_use_at_start, ...events.map((e) => e.in_use));
    assert.equal(await data('peak'), peak, 'the peak drawn is the trace\'s peak of in_use');
    const peakText = await page.locator(tid('timeline-peak')).innerText();
    assert.match(peakText, new RegExp(`\\(${peak} B\\)`), `the peak is shown: ${peakText}`);

    // one band per tensor (birth to the next death of its buffer, or a death with no
    // birth in the step), in as many buffers as the step's births and deaths name
    let tensors = 0;
    const open = new Set();
    const buffers = new Set();
    for (const e of events) {
      if (BIRTHS.includes(e.kind)) {
        tensors++;
        open.add(e.buffer);
        buffers.add(e.buffer);
      } else if (DEATHS.includes(e.kind)) {
        if (!open.delete(e.buffer)) tensors++;
        buffers.add(e.buffer);
      }
    }
    assert.equal(await data('bands'), tensors, 'a band per tensor');
    assert.equal(await data('buffers'), buffers.size, 'bands in as many distinct buffers as the trace names');
    assert.ok(buffers.size > 5, `several buffers (${buffers.size})`);
    assert.equal(await data('events'), events.length);
    // a steady step reuses: some buffer holds more than one tensor, every birth hits
    assert.ok(events.filter((e) => e.kind === 'hit').length > 0, 'a steady step hits');

    // the free-bytes panel: its largest total is the trace's largest `held`
    const heldPeak = Math.max(step.held_at_start, ...events.map((e) => e.held));
    assert.equal(await data('held-peak'), heldPeak, 'free bytes per class add up to the pool\'s held bytes');

    // the replay table is replayTrace's output for this very JSON
    const expected = await page.evaluate(async (json) => {
      const wasm = await import(new URL('pkg/tidepool.js', location.href));
      await wasm.default();
      return wasm.replayTrace(json);
    }, JSON.stringify(trace));
    assert.deepEqual(replay, expected, 'the page replayed the same trace');
    const rows = await page.locator(`${tid('replay-table')} tbody tr`).evaluateAll((trs) =>
      trs.map((tr) => ({ allocator: tr.cells[0].textContent, peak: Number(tr.cells[1].textContent), ratio: tr.cells[3].textContent })),
    );
    assert.equal(expected.format, 'tidepool-trace');
    const want = expected.steps[0].replay.rows;
    assert.match(want[1].allocator, /^tidepool .* \(recorded\)$/, 'the pool that ran is a row');
    assert.ok(want.some((r) => r.allocator === 'lower bound') && want.some((r) => r.allocator === 'offset plan'), 'bound and plan rows');
    assert.ok(want.some((r) => r.allocator === 'exact') && want.some((r) => r.allocator.startsWith('pow2')), 'policy rows');
    assert.ok(want.some((r) => r.allocator === 'pow2/8 fit4') && want.some((r) => r.allocator === 'object plan'), 'fitting pool and object plan rows');
    assert.deepEqual(
      rows,
      want.map((r) => ({ allocator: r.allocator, peak: r.peak_bytes, ratio: r.ratio.toFixed(3) })),
      'every replay row shown with its peak bytes and ratio to the lower bound',
    );
    assert.deepEqual(errors, [], 'no console errors');
  });

  test('hovering a band shows its op, size, class and hit or miss', { timeout: 60_000 }, async () => {
    const { trace } = await page.evaluate(() => document.querySelector('.tp').tidepool.lastTrace);
    const ops = new Set(trace.steps[0].events.map((e) => e.op));
    const canvas = page.locator(tid('timeline-live'));
    await canvas.scrollIntoViewIfNeeded(); // the mouse moves only over what is in view
    const box = await canvas.boundingBox();
    const tip = page.locator(tid('timeline-tooltip'));
    let op = null;
    // sweep the plot until the pointer is over a tensor's band
    for (let fy = 0.15; fy < 0.95 && !op; fy += 0.1) {
      for (let fx = 0.1; fx < 0.98 && !op; fx += 0.04) {
        await page.mouse.move(box.x + box.width * fx, box.y + box.height * fy);
        // a tensor born in the step (one born before shows no request)
        if ((await tip.isVisible()) && /requested/.test(await tip.innerText())) op = await page.locator(tid('tooltip-op')).innerText();
      }
    }
    assert.ok(op, 'a band shows a tooltip');
    assert.ok(ops.has(op), `the tooltip names an op of the trace: ${op}`);
    const text = await tip.innerText();
    assert.match(text, /requested .*class/, text);
    assert.match(text, /\bhit\b|\bmiss\b|unpooled|oversize|before the step/, text);
    assert.match(text, /buffer \d+/, text);
    // docs/timeline.png, with the tooltip up (rewritten only when asked, as page.test.mjs does)
    const shot = join(ROOT, 'target', 'timeline.png');
    mkdirSync(dirname(shot), { recursive: true });
    await page.locator(tid('timeline')).screenshot({ path: shot });
    if (process.env.UPDATE_DOCS_SCREENSHOT) copyFileSync(shot, join(ROOT, 'docs', 'timeline.png'));
    await page.mouse.move(0, 0);
    assert.equal(await tip.isVisible(), false, 'the tooltip goes with the pointer');
  });

  test('every N steps it traces while training, only while the panel is open', { timeout: 180_000 }, async () => {
    const panel = page.locator(tid('timeline'));
    const traces = async () => Number(await panel.getAttribute('data-traces'));
    const before = await traces();
    await page.fill(tid('trace-every'), '2');
    await page.click(tid('start'));
    await page.waitForFunction((n) => Number(document.querySelector('[data-testid="timeline"]').dataset.traces) >= n + 2, before, {
      timeout: 150_000,
      polling: 100,
    });
    const traced = Number(await panel.getAttribute('data-step'));
    assert.ok(traced > 2, `a later step was traced (${traced})`);
    // closed: training goes on and nothing more is traced
    await page.click(`${tid('timeline')} > summary`);
    // a trace asked for just before the close may still land: wait for it
    await page.waitForFunction(() => !document.querySelector('[data-testid="trace"]').disabled, null, { timeout: 60_000, polling: 50 });
    const closed = await traces();
    const step = await num(page, 'step-count');
    await waitNumber(page, 'step-count', (n) => n >= step + 5, { timeout: 90_000, what: '5 more steps' });
    assert.equal(await traces(), closed, 'no trace while the panel is closed');
    await page.click(tid('pause'));
    assert.deepEqual(errors, [], 'no console errors');
  });
});

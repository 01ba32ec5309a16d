// The memory timeline's arena view under the planned policy, in headless Chromium on
// SwiftShader: a traced planned step is drawn one band per arena of the plan, each
// tensor at its offset. What is drawn is checked against the plan the wasm hands out
// (Trainer.memoryPlan(), through the worker) and against the trace JSON, which names
// each planned tensor's arena buffer and offset on its own; the replay table's
// "planned (live)" row is the step's measured peak. Saves target/timeline-arenas.png
// (and docs/timeline-arenas.png with UPDATE_DOCS_SCREENSHOT=1).

import assert from 'node:assert/strict';
import { copyFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { arenaView } from '../../www/timeline-arenas.mjs';
import { FAST, ROOT, open, setup, tid, waitNumber, waitReady } from './helpers.mjs';

const BIRTHS = ['hit', 'miss', 'oversize', 'unpooled'];
const DEATHS = ['release', 'reject', 'discard'];

describe('the arena view', { timeout: 600_000 }, () => {
  let env;
  let page;
  let errors;

  before(async () => {
    env = await setup();
    ({ page, errors } = await open(env, `${FAST}&policy=planned`, { width: 1100, height: 1100 }));
  });
  after(() => env?.close());

  const traceOnce = async (step) => {
    await page.click(tid('trace'));
    await page.waitForFunction((n) => Number(document.querySelector('[data-testid="timeline"]').dataset.step) === n, step, {
      timeout: 150_000,
      polling: 100,
    });
    await waitNumber(page, 'step-count', (n) => n === step, { timeout: 10_000, what: `step ${step} counted` });
    return page.evaluate(() => document.querySelector('.tp').tidepool.lastTrace);
  };

  test('the first step runs on the pool: a plan, no arena view yet', { timeout: 200_000 }, async () => {
    await waitReady(page);
    await page.click(`${tid('timeline')} > summary`);
    const { trace, plan, arenas } = await traceOnce(1);
    assert.equal(trace.policy, 'planned');
    assert.ok(plan && plan.arenas.length > 0, 'the step was planned');
    assert.equal(plan.plans_made, 1);
    assert.equal(arenas, null, 'no tensor of the first step lies in an arena');
    assert.equal(trace.steps[0].events.filter((e) => e.offset !== undefined).length, 0);
    assert.equal(await page.locator(tid('timeline')).getAttribute('data-arenas'), '0');
    assert.equal(await page.locator(tid('timeline-arenas-figure')).isVisible(), false);
    assert.match(await page.locator(tid('timeline-note')).innerText(), /trace a later step to see the arenas/);
  });

  test('a planned step draws each arena and each tensor at the plan\'s offset', { timeout: 200_000 }, async () => {
    const { trace, replay, plan, arenas, top } = await traceOnce(2);
    const step = trace.steps[0];
    assert.equal(step.label, 'steady');
    // the live view tells apart the tensors sharing an arena: its stack stands as high
    // as the trace's in_use after every event
    assert.deepEqual(top, [step.in_use_at_start, ...step.events.map((e) => e.in_use)], 'the stack height at every event');
    let tensors = 0;
    const born = new Set();
    for (const e of step.events) {
      const key = `${e.buffer}@${e.offset}`;
      if (BIRTHS.includes(e.kind)) {
        tensors++;
        born.add(key);
      } else if (DEATHS.includes(e.kind) && !born.delete(key)) tensors++;
    }
    const bands = Number(await page.locator(tid('timeline')).getAttribute('data-bands'));
    assert.equal(bands, tensors, 'a band per tensor: a birth to the death at the same buffer and offset');

    // The trace on its own: each birth at an arena range, in order, is the plan's range.
    const arenaOf = new Map(plan.arenas.map((a, i) => [a.buffer, i]));
    assert.ok([...arenaOf.keys()].every((id) => id > 0), 'every arena is named by its trace buffer id');
    const traced = step.events
      .filter((e) => BIRTHS.includes(e.kind) && e.offset !== undefined)
      .map((e) => ({ arena: arenaOf.get(e.buffer), offset: e.offset, size: e.class }));
    const planned = plan.ranges.map(({ arena, offset, size }) => ({ arena, offset, size }));
    assert.ok(planned.length > 10, `a step plans many tensors (${planned.length})`);
    assert.deepEqual(traced, planned, 'the trace puts every tensor where the plan says');

    // What the view drew: one band per arena of the plan's size, and the tensors born
    // in the step at the plan's ranges, in the step's order.
    assert.deepEqual(
      arenas.arenas.map((a) => a.bytes),
      plan.arenas.map((a) => a.bytes),
      'a band per arena, as large',
    );
    const drawn = arenas.tensors
      .map((t, k) => ({ ...t, k }))
      .filter((t) => t.start > 0)
      .sort((a, b) => a.start - b.start)
      .map(({ arena, offset, size }) => ({ arena, offset, size }));
    assert.deepEqual(drawn, planned, 'each tensor drawn at its planned offset');
    assert.equal(await page.locator(tid('timeline')).getAttribute('data-arenas'), String(plan.arenas.length));
    assert.ok(await page.locator(tid('timeline-arenas-figure')).isVisible(), 'the arena view shows');
    const note = await page.locator(tid('timeline-arenas-note')).innerText();
    assert.ok(note.includes(`(${plan.reserved} B)`), `the plan's bytes are shown: ${note}`);
    const legend = await page.locator(`${tid('timeline-arenas-legend')} span`).evaluateAll((spans) =>
      spans.map((s) => ({ bytes: Number(s.dataset.bytes), peak: Number(s.dataset.peak) })),
    );
    assert.deepEqual(
      legend.map((a) => a.bytes),
      plan.arenas.map((a) => a.bytes),
    );
    legend.forEach((a, i) => assert.ok(a.peak > 0 && a.peak <= a.bytes, `arena ${i}: ${a.peak} live of ${a.bytes}`));

    // The pixels: each tensor's rectangle is painted, and within an arena a higher
    // offset is drawn higher up (within the pixel a sliver is widened to).
    const rects = arenas.rects;
    assert.equal(rects.length, arenas.tensors.length);
    const alphas = await page.locator(tid('timeline-arenas')).evaluate((c, rs) => {
      const g = c.getContext('2d');
      const scale = c.width / c.clientWidth;
      return rs.map((r) => (r.w >= 2 && r.h >= 2 ? g.getImageData(Math.floor((r.x + r.w / 2) * scale), Math.floor((r.y + r.h / 2) * scale), 1, 1).data[3] : null));
    }, rects);
    const painted = alphas.filter((a) => a !== null);
    assert.ok(painted.length > 5, `several rectangles large enough to sample (${painted.length})`);
    assert.ok(
      painted.every((a) => a > 200),
      `every tensor is painted opaque: ${alphas}`,
    );
    arenas.tensors.forEach((t, i) => {
      arenas.tensors.forEach((u, j) => {
        if (t.arena === u.arena && t.offset < u.offset) {
          const [bt, bu] = [rects[i].y + rects[i].h, rects[j].y + rects[j].h];
          assert.ok(bt >= bu - 1, `offset ${t.offset} drawn below offset ${u.offset}`);
        }
      });
    });

    // The replay table: a "planned (live)" row of what the step really reserved,
    // which is the run's peak the page's stats report.
    const live = replay.steps[0].replay.rows.find((r) => r.allocator === 'planned (live)');
    assert.ok(live, 'the replay has the planned run\'s own row');
    assert.equal(live.peak_bytes, step.peak_reserved);
    const stats = await page.evaluate(() => document.querySelector('.tp').tidepool.latest);
    assert.equal(live.peak_bytes, stats.context.peak_bytes_reserved, 'the row is what the run measured');
    const row = page.locator(`${tid('replay-table')} tbody tr[data-allocator="planned (live)"]`);
    assert.equal(Number(await row.getAttribute('data-peak')), live.peak_bytes);
    // Hovering the largest tensor names its arena and offset.
    const big = arenas.tensors.reduce((b, t, i) => (t.size * (t.end - t.start) > b.area ? { i, area: t.size * (t.end - t.start) } : b), { i: 0, area: 0 }).i;
    const canvas = page.locator(tid('timeline-arenas'));
    await canvas.scrollIntoViewIfNeeded();
    const box = await canvas.boundingBox();
    const r = rects[big];
    await page.mouse.move(box.x + r.x + r.w / 2, box.y + r.y + r.h / 2);
    const tip = page.locator(tid('timeline-arenas-tooltip'));
    assert.ok(await tip.isVisible(), 'a tooltip over the tensor');
    const t = arenas.tensors[big];
    assert.match(await tip.innerText(), new RegExp(`arena ${t.arena} · offset ${t.offset} `));
    mkdirSync(join(ROOT, 'target'), { recursive: true });
    const shot = join(ROOT, 'target', 'timeline-arenas.png');
    await page.locator(tid('timeline-arenas-figure')).screenshot({ path: shot });
    if (process.env.UPDATE_DOCS_SCREENSHOT) copyFileSync(shot, join(ROOT, 'docs', 'timeline-arenas.png'));
    assert.deepEqual(errors, [], 'no console errors');
  });
});

// Without a browser: two arenas, a tensor live when the step began, births and deaths
// interleaved at one offset, and a whole pooled buffer that is no arena's.
test('arenaView places each tensor by arena buffer and offset, and finds each arena\'s peak', () => {
  const plan = { arenas: [{ buffer: 7, bytes: 4096 }, { buffer: 9, bytes: 1024 }], ranges: [], reserved: 5120, plans_made: 1 };
  const e = (kind, buffer, offset, size, op = 'k') => ({ kind, buffer, offset, class: size, requested: size, op });
  const step = {
    events: [
      e('release', 7, 3072, 1024), // live when the step began: columns 0..1
      e('hit', 7, 0, 2048), // 2..4
      e('hit', 9, 0, 1024), // 3..6
      e('release', 7, 0, 2048),
      e('hit', 7, 0, 512), // 5..7 (the end)
      e('release', 9, 0, 1024),
      { kind: 'hit', buffer: 3, class: 256, requested: 256, op: 'k' }, // a pooled buffer
    ],
  };
  const view = arenaView(step, plan);
  assert.deepEqual(
    view.tensors.map(({ arena, offset, size, start, end }) => [arena, offset, size, start, end]),
    [
      [0, 3072, 1024, 0, 1],
      [0, 0, 2048, 2, 4],
      [1, 0, 1024, 3, 6],
      [0, 0, 512, 5, 8],
    ],
  );
  assert.deepEqual(
    view.arenas.map(({ base, bytes, peak }) => [base, bytes, peak]),
    [
      [0, 4096, 2048],
      [4096, 1024, 1024],
    ],
  );
  assert.equal(view.total, 5120);
  assert.equal(arenaView(step, null), null, 'no plan, no view');
  assert.equal(arenaView({ events: [step.events[6]] }, plan), null, 'a step with nothing in the arenas');
});

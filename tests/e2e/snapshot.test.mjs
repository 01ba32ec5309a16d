// Recordings opened in the memory timeline (www/timeline-file.mjs) in headless
// Chromium: each PyTorch snapshot committed in tests/fixtures/snapshots/ dropped on
// the panel shows its live bytes, reserved bytes, hover and replay table (checked
// against the wasm's own Snapshot.report() on the same bytes, and PyTorch's figures);
// hostile files show a message while training goes on; a tidepool trace opens the
// same way; and a synthetic 100 MB snapshot (written by tests/snapshot_fixture/
// through `cargo test`), the first file opened (twice, the faster counted), opens
// within 5 s and zooms and pans within 50 ms a frame.
// Saves target/snapshot.png (and docs/snapshot.png with UPDATE_DOCS_SCREENSHOT=1).

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { FAST, ROOT, open, setup, tid, waitNumber, waitReady } from './helpers.mjs';

const FIXTURES = join(ROOT, 'tests', 'fixtures', 'snapshots');
const SNAPSHOTS = ['gpt_eager', 'gpt_sdpa', 'resnet18', 'gpt2'];
const BIG = join(ROOT, 'target', 'e2e-snapshot-100mb.pickle');

// The page's time to open the 100 MB snapshot (the first file, read as the panel's
// worker finishes starting) and to draw a frame of it, at most: the targets. Seen on a
// 2-core machine: 1.6 to 1.7 s alone, 2.5 to 4.5 s beside another test file and other
// builds; frames of 1 to 10 ms, a few of 20 to 90 and one of 260 under that load.
const OPEN_MS = 5000;
const FRAME_MS = 50;

/** Writes the 100 MB snapshot with the generator the Rust tests use; its figures. */
function writeBigSnapshot() {
  const cargo = spawnSync('cargo', ['test', '--release', '--quiet', '--test', 'snapshot', '--', '--ignored', '--exact', 'write_a_snapshot_file'], {
    cwd: ROOT,
    env: { ...process.env, TIDEPOOL_SNAPSHOT_OUT: BIG, TIDEPOOL_SNAPSHOT_MB: '100' },
    stdio: ['ignore', 'inherit', 'inherit'],
    timeout: 1_200_000,
  });
  assert.equal(cargo.status, 0, 'cargo wrote the 100 MB snapshot');
  return JSON.parse(readFileSync(`${BIG}.json`, 'utf8'));
}

/** The timeline panel's state: how many opens have finished, and how the last went. */
const opens = (page) => page.evaluate(() => Number(document.querySelector('[data-testid="timeline"]').dataset.snapshotOpens ?? 0));

// A file input of the test's own, outside the widget: Playwright hands it a file from
// disk by its path (nothing crosses the DevTools pipe, which holds at most 100 MB) or
// from bytes, and the page drops that File on the panel.
const PICKER = 'e2e-recording';

/**
 * Drops `file` (a path, or {name, mimeType, buffer}) on the timeline panel as a
 * person drops one; resolves with the panel's state once the page has shown it or
 * refused it.
 */
async function drop(page, file) {
  const before = await opens(page);
  await page.setInputFiles(`#${PICKER}`, file);
  await page.evaluate((picker) => {
    const data = new DataTransfer();
    data.items.add(document.getElementById(picker).files[0]);
    const panel = document.querySelector('[data-testid="timeline"]');
    for (const type of ['dragenter', 'dragover', 'drop']) panel.dispatchEvent(new DragEvent(type, { dataTransfer: data, bubbles: true, cancelable: true }));
  }, PICKER);
  await page.waitForFunction((n) => Number(document.querySelector('[data-testid="timeline"]').dataset.snapshotOpens ?? 0) > n, before, { timeout: 120_000, polling: 20 });
  return page.evaluate(() => {
    const panel = document.querySelector('[data-testid="timeline"]');
    const view = panel.querySelector('[data-testid="snapshot"]');
    const message = panel.querySelector('[data-testid="snapshot-message"]');
    return { state: panel.dataset.snapshotState, data: { ...view.dataset }, message: message.textContent, kind: message.dataset.kind ?? '' };
  });
}

/** The wasm's own `Snapshot.read(file dropped last)[method](...args)`, run in the page. */
function wasmSnapshot(page, method, ...args) {
  return page.evaluate(
    async ({ picker, method, args }) => {
      const wasm = await import(new URL('pkg/tidepool.js', location.href));
      await wasm.default();
      const file = document.getElementById(picker).files[0];
      const snapshot = wasm.Snapshot.read(new Uint8Array(await file.arrayBuffer()));
      try {
        return snapshot[method](...args);
      } finally {
        snapshot.free();
      }
    },
    { picker: PICKER, method, args },
  );
}

const tableRows = (page) =>
  page.locator(`${tid('snapshot-table')} tbody tr`).evaluateAll((trs) => trs.map((tr) => ({ allocator: tr.dataset.allocator, peak: Number(tr.dataset.peak) })));

/** Waits for the next frame drawn after `action`; that frame's ms. */
async function frameAfter(page, action) {
  const view = page.locator(tid('snapshot'));
  const draws = Number(await view.getAttribute('data-draws'));
  await action();
  await page.waitForFunction((n) => Number(document.querySelector('[data-testid="snapshot"]').dataset.draws) > n, draws, { timeout: 10_000, polling: 'raf' });
  return Number(await view.getAttribute('data-draw-ms'));
}

const quantile = (xs, q) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))];

describe('recordings opened in the memory timeline', { timeout: 1_800_000 }, () => {
  let env;
  let page;
  let errors;
  let big;
  before(async () => {
    big = writeBigSnapshot();
    env = await setup();
    ({ page, errors } = await open(env, FAST, { width: 1100, height: 1000 }));
    await page.evaluate((id) => {
      const input = Object.assign(document.createElement('input'), { type: 'file', id, hidden: true });
      document.body.append(input);
    }, PICKER);
    await page.click(`${tid('timeline')} > summary`);
  });
  after(() => env?.close());

  test('the panel says the file stays in the browser', async () => {
    // The panel fills once its module has loaded after the click; under a second
    // test file's load that can trail the click.
    const said = /read here, in this browser: nothing is uploaded/;
    await page.locator(tid('timeline')).getByText(said).first().waitFor({ timeout: 15_000 }).catch(() => {});
    const text = await page.locator(tid('timeline')).innerText();
    assert.match(text, /read here, in this browser: nothing is uploaded/);
    assert.ok(await page.locator(tid('snapshot-choose')).isVisible(), 'a button chooses a file');
  });

  test('a 100 MB snapshot opens within 5 s; zoom and pan draw within 50 ms a frame', { timeout: 600_000 }, async () => {
    // Opened twice, the faster counted: another test file runs beside this one, and
    // the machine's other work may take the CPU for seconds at a time.
    const times = [];
    const parts = [];
    let shown;
    for (let i = 0; i < 2; i++) {
      shown = await drop(page, BIG);
      assert.equal(shown.state, 'shown', shown.message);
      times.push(Number(shown.data.openMs));
      parts.push(shown.data.openParts);
    }
    const openMs = Math.min(...times);
    const opened = times.map((t, i) => `${t} ms (in the worker, ms: ${parts[i]})`).join(', then ');
    assert.equal(Number(shown.data.events), big.events);
    // the generator's own figures: PyTorch's allocated (blocks) and reserved
    const summary = await page.locator(tid('snapshot-summary')).innerText();
    assert.equal(Number(shown.data.reservedPeak), big.max_memory_reserved);
    assert.match(summary, new RegExp(`the repeating step \\(${big.step_symbols} allocations and frees`), summary);

    const canvas = page.locator(tid('snapshot-live'));
    await canvas.scrollIntoViewIfNeeded();
    const box = await canvas.boundingBox();
    const cx = box.x + box.width / 2;
    const cy = box.y + box.height / 2;
    await page.mouse.move(cx, cy);
    const zoomIn = [];
    const pan = [];
    const zoomOut = [];
    for (let i = 0; i < 12; i++) zoomIn.push(await frameAfter(page, () => page.mouse.wheel(0, -400)));
    const view = page.locator(tid('snapshot'));
    const span = () => view.evaluate((v) => Number(v.dataset.to) - Number(v.dataset.from));
    assert.ok((await span()) < big.events / 100, `zoomed in (${await span()} positions)`);
    for (let i = 0; i < 12; i++) {
      pan.push(
        await frameAfter(page, async () => {
          await page.mouse.down();
          await page.mouse.move(cx - 150, cy, { steps: 1 });
          await page.mouse.up();
          await page.mouse.move(cx, cy);
        }),
      );
    }
    for (let i = 0; i < 12; i++) zoomOut.push(await frameAfter(page, () => page.mouse.wheel(0, 400)));
    assert.ok((await span()) > big.events, 'back to the whole recording');
    const all = [...zoomIn, ...pan, ...zoomOut];
    const fmt = (xs) => xs.map((x) => x.toFixed(1)).join(' ');
    console.log(
      `100 MB snapshot (${big.bytes} bytes, ${big.events} events): opened and drawn in ${opened}; ` +
        `frame ms zoom in: ${fmt(zoomIn)}; pan: ${fmt(pan)}; zoom out: ${fmt(zoomOut)}; ` +
        `median ${quantile(all, 0.5).toFixed(1)}, 90th percentile ${quantile(all, 0.9).toFixed(1)}, most ${Math.max(...all).toFixed(1)}`,
    );
    assert.ok(openMs < OPEN_MS, `opened in ${opened}`);
    assert.ok(quantile(all, 0.9) < FRAME_MS, `90% of frames within ${FRAME_MS} ms: ${fmt(all)}`);
    assert.deepEqual(errors, [], 'no console errors');
  });

  for (const name of SNAPSHOTS) {
    test(`${name}: the views and the table with PyTorch's own row`, { timeout: 180_000 }, async () => {
      const shown = await drop(page, join(FIXTURES, `${name}.pickle`));
      assert.equal(shown.state, 'shown', shown.message);
      const expected = await wasmSnapshot(page, 'report');
      const s = expected.steps[0];
      const figures = JSON.parse(readFileSync(join(FIXTURES, `${name}.json`), 'utf8'));
      assert.equal(shown.data.format, 'pytorch-snapshot');
      assert.equal(Number(shown.data.events), s.events);
      assert.equal(Number(shown.data.allocations), s.allocations);
      // the peak marked is the report's live peak; the reserved bytes drawn peak at
      // PyTorch's max_memory_reserved, and the report's allocated at max_memory_allocated
      assert.equal(Number(shown.data.peak), s.peaks.live);
      assert.equal(Number(shown.data.reservedPeak), s.peaks.reserved);
      const near = (ours, theirs, what) => assert.ok(Math.abs(ours - theirs) <= theirs * 0.01, `${name}: ${what} ${ours} against PyTorch's ${theirs}`);
      near(s.peaks.reserved, figures.max_memory_reserved, 'reserved');
      near(s.peaks.allocated, figures.max_memory_allocated, 'allocated');
      assert.match(await page.locator(tid('snapshot-peak')).innerText(), new RegExp(`\\(${s.peaks.live} B\\)`));
      // what it found
      const summary = await page.locator(tid('snapshot-summary')).innerText();
      assert.match(summary, /the repeating step \(\d+ allocations and frees, \d+ whole repeats, \d+\.\d% matched\)/, summary);
      assert.equal(Number(shown.data.firstEvent), s.first_event);
      // the table: every row of the wasm's report, PyTorch's reserved figure among them
      const rows = await tableRows(page);
      assert.deepEqual(
        rows,
        s.replay.rows.map((r) => ({ allocator: r.allocator, peak: r.peak_bytes })),
      );
      const recorded = rows.find((r) => r.allocator === 'PyTorch caching allocator (recorded)');
      assert.ok(recorded, 'PyTorch as a row');
      assert.equal(recorded.peak, s.step_peaks.reserved);
      for (const row of ['lower bound', 'pow2', 'pow2/8 fit2', 'exact', 'object plan', 'offset plan']) {
        assert.ok(rows.some((r) => r.allocator === row), `${name}: row ${row}`);
      }
      // both canvases drew something
      const painted = await page.evaluate(() =>
        ['snapshot-live', 'snapshot-reserved'].map((id) => {
          const c = document.querySelector(`[data-testid="${id}"]`);
          const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
          let n = 0;
          for (let i = 3; i < d.length; i += 4) n += d[i] > 0;
          return n / (c.width * c.height);
        }),
      );
      assert.ok(painted.every((p) => p > 0.05), `${name}: painted shares ${painted}`);
    });
  }

  test('hover shows an allocation\'s size, stream and the top frames of its stack', { timeout: 120_000 }, async () => {
    await drop(page, join(FIXTURES, 'gpt_eager.pickle'));
    const canvas = page.locator(tid('snapshot-live'));
    await canvas.scrollIntoViewIfNeeded();
    const box = await canvas.boundingBox();
    const tip = page.locator(tid('snapshot-tooltip'));
    let text = null;
    // sweep the plot until the pointer is over an allocation made in the model's code
    for (let fy = 0.2; fy < 0.95 && !text; fy += 0.1) {
      for (let fx = 0.1; fx < 0.98 && !text; fx += 0.03) {
        await page.mouse.move(box.x + box.width * fx, box.y + box.height * fy);
        if ((await tip.isVisible()) && /torch_snapshot\.py/.test(await tip.innerText())) text = await tip.innerText();
      }
    }
    assert.ok(text, 'a band shows its stack');
    assert.match(text, /\d+(\.\d)? (B|KiB|MiB|GiB) \(\d+ B\) · stream 0/, text);
    assert.match(text, /allocated (at event \d+|before the recording began), (freed at event \d+|live at its end)/, text);
    const frames = await page.locator(tid('snapshot-tooltip-frames')).locator('li').count();
    assert.ok(frames >= 1 && frames <= 4, `the top frames (${frames})`);
    const shot = join(ROOT, 'target', 'snapshot.png');
    mkdirSync(join(ROOT, 'target'), { recursive: true });
    await page.locator(tid('timeline')).screenshot({ path: shot });
    if (process.env.UPDATE_DOCS_SCREENSHOT) copyFileSync(shot, join(ROOT, 'docs', 'snapshot.png'));
    await page.mouse.move(0, 0);
    assert.equal(await tip.isVisible(), false);
  });

  test('the events in view replay on their own', { timeout: 60_000 }, async () => {
    const view = page.locator(tid('snapshot'));
    await page.click(tid('snapshot-whole'));
    await frameAfter(page, () => page.click('[data-fv="zoomIn"]'));
    const from = Math.floor(Number(await view.getAttribute('data-from')));
    const to = Math.ceil(Number(await view.getAttribute('data-to'))) - 1;
    const expected = await wasmSnapshot(page, 'replay', 0, from, to);
    await page.click(tid('snapshot-replay-view'));
    await page.waitForFunction(() => /events in view/.test(document.querySelector('[data-testid="snapshot-replay-note"]').textContent), null, { timeout: 30_000 });
    assert.deepEqual(
      await tableRows(page),
      expected.replay.rows.map((r) => ({ allocator: r.allocator, peak: r.peak_bytes })),
    );
    assert.equal(expected.chosen, 'range');
  });

  test('hostile and wrong files show a message, and training goes on', { timeout: 240_000 }, async () => {
    await waitReady(page);
    const whole = readFileSync(join(FIXTURES, 'gpt_eager.pickle'));
    const cases = [
      ['truncated.pickle', whole.subarray(0, whole.length >> 1), /truncated/],
      ['imports.pickle', Buffer.from('\x80\x04cos\nsystem\n(S\'echo hi\'\ntR.', 'latin1'), /GLOBAL \(imports/],
      ['calls.pickle', Buffer.from('\x80\x04NNR.', 'latin1'), /REDUCE \(calls/],
      ['deep.pickle', Buffer.concat([Buffer.from([0x80, 4]), Buffer.alloc(100_000, '(')]), /Limits::max_depth/],
      ['notes.txt', Buffer.from('hello, not a snapshot'), /neither a PyTorch memory snapshot/],
      ['other.json', Buffer.from('{"format": 3}'), /not a tidepool trace/],
    ];
    for (const [name, buffer, why] of cases) {
      const shown = await drop(page, { name, mimeType: 'application/octet-stream', buffer });
      assert.equal(shown.state, 'failed', `${name}: ${shown.message}`);
      assert.equal(shown.kind, 'trace', name);
      assert.match(shown.message, /^This recording cannot be read: /, name);
      assert.ok(shown.message.includes(name), `${name}: the message names the file: ${shown.message}`);
      assert.match(shown.message, why, shown.message);
      assert.equal(await page.locator(tid('snapshot')).isVisible(), false, 'no view of a file not read');
    }
    // training goes on, and a good file still opens
    const step = Number(await page.locator(tid('step-count')).innerText());
    await page.click(tid('step-once'));
    await waitNumber(page, 'step-count', (n) => n === step + 1, { timeout: 120_000, what: 'a step after the hostile files' });
    assert.equal((await drop(page, join(FIXTURES, 'gpt2.pickle'))).state, 'shown');
    assert.deepEqual(errors, [], 'no console errors');
  });

  test('a tidepool trace opens the same way, its pool as the recorded row', { timeout: 240_000 }, async () => {
    await page.click(tid('trace'));
    await page.waitForFunction(() => document.querySelector('[data-testid="timeline"]').dataset.step, null, { timeout: 200_000, polling: 100 });
    const { trace } = await page.evaluate(() => document.querySelector('.tp').tidepool.lastTrace);
    const shown = await drop(page, { name: 'trace.json', mimeType: 'application/json', buffer: Buffer.from(JSON.stringify(trace)) });
    assert.equal(shown.state, 'shown', shown.message);
    assert.equal(shown.data.format, 'tidepool-trace');
    assert.equal(Number(shown.data.events), trace.steps[0].events.length);
    const rows = await tableRows(page);
    assert.equal(rows[0].allocator, 'lower bound');
    assert.match(rows[1].allocator, /^tidepool pow2\S* (fit\d+ )?\(recorded\)$/);
  });

});

// What a crafted file, a damaged record or a wrong argument does to the page: a
// checkpoint whose step counter says 9,999,999 loads without the history growing
// to match it (the charts hold what was recorded); one at the counter's largest
// value refuses the next step instead of wrapping to 0; a run in IndexedDB that is
// not one of ours is dropped with a message, never offered nor saved again; and a
// wrong argument to the element's methods is a refusal that names it, while the
// worker trains on.

import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { after, before, describe, test } from 'node:test';
import { FAST, nextFrame, num, open, setup, tid, waitNumber, waitReady } from './helpers.mjs';

const MAX_STEP = 2 ** 32 - 1;

/** `bytes` (a safetensors checkpoint) with its tidepool.step set to `step`: the rest is untouched. */
function withStep(bytes, step) {
  const length = Number(bytes.readBigUInt64LE(0));
  const header = JSON.parse(bytes.subarray(8, 8 + length).toString('utf8'));
  header.__metadata__['tidepool.step'] = String(step);
  const json = Buffer.from(JSON.stringify(header));
  const size = Buffer.alloc(8);
  size.writeBigUInt64LE(BigInt(json.length));
  return Buffer.concat([size, json, bytes.subarray(8 + length)]);
}

let env;
before(async () => {
  env = await setup();
});
after(() => env?.close());

describe('crafted checkpoints', { timeout: 600_000 }, () => {
  let page;
  let errors;
  let checkpoint;

  before(async () => {
    ({ page, errors } = await open(env, `${FAST}&autosave=0`));
    await waitReady(page);
    const [download] = await Promise.all([page.waitForEvent('download', { timeout: 60_000 }), page.click(tid('save'))]);
    checkpoint = await readFile(await download.path());
  });

  async function load(name, step) {
    await page.locator(tid('checkpoint-file')).setInputFiles({ name, mimeType: 'application/octet-stream', buffer: withStep(checkpoint, step) });
    await page.waitForFunction((name) => document.querySelector('[data-testid="checkpoint-status"]').textContent.startsWith(`Loaded ${name}`), name, {
      timeout: 120_000,
    });
    await nextFrame(page);
  }

  test('step 9,999,999: the history holds what was recorded, and the page stays light', { timeout: 300_000 }, async () => {
    await load('far.safetensors', 9_999_999);
    assert.equal(await num(page, 'step-count'), 9_999_999);
    const heap = await page.evaluate(() => performance.memory.usedJSHeapSize);
    assert.ok(heap < 100 * 2 ** 20, `JS heap ${(heap / 2 ** 20).toFixed(0)} MiB after the load`);
    const history = () => page.evaluate(() => {
      const h = document.querySelector('.tp').tidepool.history;
      return { n: h.n, x: h.x.slice(), lengths: [h.loss.length, h.ms.length, h.held.length] };
    });
    assert.deepEqual(await history(), { n: 0, x: [], lengths: [0, 0, 0] }, 'nothing recorded, nothing padded');
    await page.click(tid('step-once'));
    await waitNumber(page, 'step-count', (n) => n === 10_000_000, { timeout: 150_000, what: 'a step after the load' });
    await nextFrame(page);
    assert.deepEqual(await history(), { n: 1, x: [10_000_000], lengths: [1, 1, 1] });
    assert.equal(await page.locator(tid('chart-loss')).getAttribute('data-last-step'), '10000000', "the chart's x is the step");
    // a frame redraws the charts: it stays short
    const ms = await page.evaluate(async () => {
      const t0 = performance.now();
      for (let i = 0; i < 10; i++) await new Promise((r) => requestAnimationFrame(r));
      return (performance.now() - t0) / 10;
    });
    assert.ok(ms < 200, `a frame takes ${ms.toFixed(0)} ms`);
  });

  test("the step counter's largest value: the next step is refused, not wrapped to 0", { timeout: 300_000 }, async () => {
    await load('last.safetensors', MAX_STEP);
    assert.equal(await num(page, 'step-count'), MAX_STEP);
    await page.click(tid('step-once'));
    await page.locator(tid('error')).waitFor({ state: 'visible', timeout: 60_000 });
    const text = await page.locator(tid('error')).innerText();
    assert.match(text, /step counter is at 4294967295/, text);
    assert.equal(await num(page, 'step-count'), MAX_STEP, 'still at its step');
    assert.deepEqual(errors, []);
  });
});

describe('a damaged run in IndexedDB', { timeout: 600_000 }, () => {
  test('is dropped with a message, not offered, and not saved again', { timeout: 400_000 }, async () => {
    const context = await env.browser.newContext({ viewport: { width: 1280, height: 900 } });
    const page = await context.newPage();
    const errors = [];
    page.on('pageerror', (err) => errors.push(err.message));
    await page.goto(`${env.server.url}${FAST}&autosave=2`);
    await waitReady(page);
    // A record like the autosave's, its history damaged as a hand in DevTools could.
    await page.evaluate(async () => {
      const db = await new Promise((ok, fail) => {
        const req = indexedDB.open('tidepool', 1);
        req.onupgradeneeded = () => req.result.createObjectStore('runs');
        req.onsuccess = () => ok(req.result);
        req.onerror = () => fail(req.error);
      });
      const h = document.querySelector('.tp').tidepool.history;
      const history = { ...h, n: 1, x: 5, loss: [3], val: [null] };
      const tx = db.transaction('runs', 'readwrite');
      tx.objectStore('runs').put({ bytes: new Uint8Array(64), step: 1, preset: 'tiny', date: Date.now(), corpus: null, history }, 'last');
      await new Promise((ok) => (tx.oncomplete = ok));
      db.close();
    });
    await page.reload();
    await waitReady(page);
    const status = page.locator(tid('checkpoint-status'));
    await page.waitForFunction(() => /could not be read/.test(document.querySelector('[data-testid="checkpoint-status"]').textContent), null, { timeout: 30_000 });
    assert.match(await status.innerText(), /history\.x is not a list.*removed/, await status.innerText());
    assert.equal(await page.locator(tid('resume-last')).isVisible(), false, 'not offered');

    const stored = () =>
      page.evaluate(async () => {
        const db = await new Promise((ok) => (indexedDB.open('tidepool', 1).onsuccess = (e) => ok(e.target.result)));
        const record = await new Promise((ok) => (db.transaction('runs').objectStore('runs').get('last').onsuccess = (e) => ok(e.target.result)));
        db.close();
        return record && { step: record.step, x: record.history?.x };
      });
    assert.equal(await stored(), undefined, 'removed from the store');
    // training goes on, and its autosave stores its own history
    await page.click(tid('start'));
    await waitNumber(page, 'step-count', (n) => n >= 3, { timeout: 150_000, what: 'steps past an autosave' });
    await page.click(tid('pause'));
    await page.waitForFunction(() => /Saved in this browser/.test(document.querySelector('[data-testid="checkpoint-status"]').textContent), null, { timeout: 60_000 });
    const saved = await stored();
    assert.ok(Array.isArray(saved.x) && saved.x.every(Number.isInteger), `the saved history is this run's (${JSON.stringify(saved)})`);
    assert.deepEqual(errors, []);
    await context.close();
  });
});

test("the element's methods refuse wrong arguments by name, and the worker trains on", { timeout: 300_000 }, async () => {
  const { page, errors } = await open(env, 'www/blank.html');
  await page.evaluate(async () => {
    await import('/www/tidepool.mjs');
    document.body.innerHTML = '<tidepool-trainer batch="2" context="8"></tidepool-trainer>';
  });
  await waitReady(page, 'tidepool-trainer');
  const refusals = await page.evaluate(async () => {
    const t = document.querySelector('tidepool-trainer').tidepool;
    const calls = {
      useCorpusName: () => t.useCorpus('some text to learn from', 5),
      useCorpusObject: () => t.useCorpus({ length: 3e9 }),
      useCorpusNumber: () => t.useCorpus(5),
      setPool: () => t.setPool('yes'),
      loadCheckpoint: () => t.loadCheckpoint('run.safetensors'),
      restart: () => t.restart('now'),
      mountCorpus: () => import('/www/tidepool.mjs').then(({ mount }) => mount(document.createElement('div'), { corpus: 5 })),
      mountName: () => import('/www/tidepool.mjs').then(({ mount }) => mount(document.createElement('div'), { corpus: 'text', corpusName: {} })),
      mountNothing: () => import('/www/tidepool.mjs').then(({ mount }) => mount('#trainer')),
    };
    const out = {};
    for (const [name, call] of Object.entries(calls)) {
      out[name] = await call().then(
        () => 'accepted',
        (err) => `${err.kind}: ${err.message}`,
      );
    }
    return out;
  });
  assert.match(refusals.useCorpusName, /^config: useCorpus\(corpus, name\): name must be a string \(got number\)/);
  assert.match(refusals.useCorpusObject, /^config: useCorpus\(corpus, name\): corpus must be text/);
  assert.match(refusals.useCorpusNumber, /^config: useCorpus/);
  assert.match(refusals.setPool, /^config: setPool\(on\): on must be true or false \(got string\)/);
  assert.match(refusals.loadCheckpoint, /^config: loadCheckpoint\(file\): file must be a File or Blob/);
  assert.match(refusals.restart, /^config: restart\(run\)/);
  assert.match(refusals.mountCorpus, /^config: mount\(element, options\): options\.corpus must be text or UTF-8 bytes/);
  assert.match(refusals.mountName, /^config: mount\(element, options\): options\.corpusName must be a string \(got Object\)/);
  assert.match(refusals.mountNothing, /^config: mount\(element, options\): element must be an element of the page \(got string\)/);
  // the worker is alive and trains
  await page.evaluate(() => document.querySelector('tidepool-trainer').tidepool.stepOnce());
  await waitNumber(page, 'step-count', (n) => n === 1, { scope: 'tidepool-trainer', timeout: 150_000, what: 'a step after the refusals' });
  assert.equal(await page.locator('tidepool-trainer [data-testid="error"]').isVisible(), false, 'nothing went wrong');
  // (blank.html has no icon: the browser's own request for one is no error of the page's)
  assert.deepEqual(errors.filter((e) => !/favicon|Failed to load resource/.test(e)), []);
});

test('the worker refuses a corpus name that is not text (a page driving it directly)', { timeout: 300_000 }, async () => {
  const { page } = await open(env, 'www/blank.html');
  const result = await page.evaluate(async () => {
    const { TrainerClient } = await import('/www/client.mjs');
    const client = new TrainerClient();
    await client.start();
    const text = 'some text to learn from, '.repeat(20);
    const refused = await client.create({ batch: 2, context: 8 }, text, false, 5).then(
      () => 'accepted',
      (err) => `${err.kind}: ${err.message}`,
    );
    const built = await client.create({ batch: 2, context: 8 }, text, false, 'mine').then((m) => m.corpus.name);
    client.terminate();
    return { refused, built };
  });
  assert.match(result.refused, /^config: the corpus name must be a string \(got number\)/);
  assert.equal(result.built, 'mine', 'the same worker builds with a good name');
});

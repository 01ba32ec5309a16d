// Runs that outlive the page: Save downloads a safetensors file, an autosave to
// IndexedDB offers "Resume the last run" after a reload (the step counter and the loss
// chart go on from the saved step), a downloaded file loads through the picker, the
// prompt box samples, and every bad file (truncated, not safetensors, another
// vocabulary) is a clear message after which the run on screen still steps.
//
// One browser and one page (IndexedDB lives in its context) for the whole file; every
// load builds a new device, whose first step compiles every shader on SwiftShader, so
// the steps are few.

import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { after, before, describe, test } from 'node:test';
import { FAST, nextFrame, num, open, setup, tid, waitNumber, waitPaused, waitReady } from './helpers.mjs';

const AUTOSAVE = 3;
// A corpus with few characters: a vocabulary unlike Tiny Shakespeare's.
const OTHER = 'abc cab bca acb '.repeat(200);

/** The safetensors header of `bytes`: 8-byte little-endian length, then that much JSON. */
function header(bytes) {
  assert.ok(bytes.length > 9, `a file of ${bytes.length} bytes`);
  const length = Number(bytes.readBigUInt64LE(0));
  assert.equal(bytes[8], 0x7b, 'the header starts with {');
  assert.ok(8 + length <= bytes.length, `header of ${length} bytes in a ${bytes.length}-byte file`);
  return JSON.parse(bytes.subarray(8, 8 + length).toString('utf8'));
}

describe('checkpoints on the page', { timeout: 900_000 }, () => {
  let env;
  let page;
  let errors;
  let saved; // {name, bytes, step} of the downloaded file

  before(async () => {
    env = await setup();
    ({ page, errors } = await open(env, `${FAST}&autosave=${AUTOSAVE}`));
    await waitReady(page);
  });
  after(() => env?.close());

  const points = () => page.locator(tid('chart-loss')).getAttribute('data-points').then(Number);
  const lastStep = () => page.locator(tid('chart-loss')).getAttribute('data-last-step').then(Number);

  async function errorText() {
    await page.locator(tid('error')).waitFor({ state: 'visible', timeout: 120_000 });
    return page.locator(tid('error')).innerText();
  }

  async function dismiss() {
    await page.click('.tp-error button:text("Dismiss")');
  }

  // One more step lands on whatever trainer is there.
  async function stillWorks(what) {
    const at = await num(page, 'step-count');
    await page.click(tid('step-once'));
    await waitNumber(page, 'step-count', (n) => n === at + 1, { timeout: 150_000, what: `a step after ${what}` });
    return at + 1;
  }

  async function saveFile() {
    const [download] = await Promise.all([page.waitForEvent('download', { timeout: 60_000 }), page.click(tid('save'))]);
    return { name: download.suggestedFilename(), bytes: await readFile(await download.path()) };
  }

  async function loadFile(name, buffer) {
    await page.locator(tid('checkpoint-file')).setInputFiles({ name, mimeType: 'application/octet-stream', buffer });
  }

  test('Save downloads the run as safetensors', { timeout: 240_000 }, async () => {
    await page.click(tid('start'));
    await waitNumber(page, 'step-count', (n) => n >= AUTOSAVE + 1, { timeout: 150_000, what: 'steps past the first autosave' });
    await page.click(tid('pause'));
    // The steps in flight land first: on SwiftShader, beside another test file on 2
    // cores, that once took over waitPaused's default 30 s.
    const step = await waitPaused(page, '', 90_000);
    await page.waitForFunction(() => /Saved in this browser at step \d+/.test(document.querySelector('[data-testid="checkpoint-status"]').textContent), null, {
      timeout: 60_000,
    });
    const file = await saveFile();
    assert.equal(file.name, `tidepool-tiny-step${step}.safetensors`);
    const h = header(file.bytes);
    assert.equal(h.__metadata__['tidepool.format'], '1');
    assert.equal(h.__metadata__['tidepool.step'], String(step));
    assert.ok(h['transformer.wte.weight'], 'holds the embedding');
    saved = { ...file, step };
  });

  test('the prompt box samples from the current model; an unknown character is a message', { timeout: 180_000 }, async () => {
    await page.fill(tid('prompt'), 'ROMEO:');
    await page.fill(tid('sample-length'), '6');
    await page.fill(tid('temperature'), '0.8');
    await page.fill(tid('top-k'), '5');
    await page.click(tid('generate'));
    await page.waitForFunction(() => document.querySelector('[data-testid="prompt-output"]').textContent.length > 0, null, { timeout: 120_000 });
    const out = await page.locator(tid('prompt-output')).textContent();
    assert.ok(out.startsWith('ROMEO:'), out);
    assert.equal([...out].length, 'ROMEO:'.length + 6, `six characters after the prompt: ${JSON.stringify(out)}`);

    await page.fill(tid('prompt'), 'tide ☃');
    await page.click(tid('generate'));
    const text = await errorText();
    assert.match(text, /Could not sample from this prompt/, text);
    assert.match(text, /☃/, `names the character: ${text}`);
    assert.equal(await page.evaluate(() => document.querySelector('.tp').tidepool.running), false);
    await dismiss();
  });

  test('after a reload, "Resume the last run" continues the step counter and the loss chart', { timeout: 300_000 }, async () => {
    await page.reload();
    const resume = page.locator(tid('resume-last'));
    await resume.waitFor({ state: 'visible', timeout: 60_000 });
    const label = await resume.innerText();
    const m = /tiny, step (\d+), saved/.exec(label);
    assert.ok(m, label);
    const step = Number(m[1]);
    assert.ok(step >= AUTOSAVE && step % AUTOSAVE === 0 && step <= saved.step, `autosaved at step ${step}`);
    await waitReady(page);
    await resume.click();
    await waitNumber(page, 'step-count', (n) => n === step, { timeout: 120_000, what: 'the resumed step' });
    assert.equal(await points(), step, "the chart holds the saved run's points");
    const before = await page.evaluate(() => document.querySelector('.tp').tidepool.history.loss.slice());
    assert.ok(before.length === step && before.every(Number.isFinite), `saved losses: ${before}`);
    await stillWorks('the resume');
    await nextFrame(page);
    assert.equal(await points(), step + 1, 'the chart goes on from the saved step');
    const loss = await page.evaluate(() => document.querySelector('.tp').tidepool.history.loss.slice());
    assert.deepEqual(loss.slice(0, step), before);
    assert.ok(Number.isFinite(loss[step]), 'the new step has a loss');
  });

  test('a downloaded file loads through the picker and goes on from its step', { timeout: 240_000 }, async () => {
    await loadFile(saved.name, saved.bytes);
    await page.waitForFunction((name) => document.querySelector('[data-testid="checkpoint-status"]').textContent.startsWith(`Loaded ${name}`), saved.name, {
      timeout: 120_000,
    });
    assert.equal(await page.locator(tid('checkpoint-status')).innerText(), `Loaded ${saved.name}: step ${saved.step}.`);
    await nextFrame(page);
    assert.equal(await num(page, 'step-count'), saved.step);
    const n = await stillWorks('the load');
    assert.equal(n, saved.step + 1);
    await nextFrame(page);
    // the history holds what was recorded since the load, at the steps it was recorded
    assert.equal(await points(), 1, 'one step recorded since the load');
    assert.equal(await lastStep(), n, "the chart's x is the step");
    const file = await saveFile();
    assert.equal(file.name, `tidepool-tiny-step${n}.safetensors`);
  });

  test('a truncated file (dropped on the widget) is a clear message and the run goes on', { timeout: 240_000 }, async () => {
    const at = await num(page, 'step-count');
    const half = saved.bytes.subarray(0, Math.floor(saved.bytes.length / 2));
    // a drop, as a person would: a File in a DataTransfer
    await page.evaluate(
      ({ b64, name }) => {
        const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
        const data = new DataTransfer();
        data.items.add(new File([bytes], name));
        document.querySelector('.tp').dispatchEvent(new DragEvent('drop', { dataTransfer: data, bubbles: true, cancelable: true }));
      },
      { b64: Buffer.from(half).toString('base64'), name: 'cut.bin' },
    );
    const text = await errorText();
    assert.match(text, /This checkpoint cannot be loaded/, text);
    assert.match(text, /cut\.bin/, text);
    assert.match(text, /truncated/, text);
    assert.equal(await num(page, 'step-count'), at);
    await dismiss();
    await stillWorks('a truncated file');
  });

  test('a file that is not safetensors is a clear message and the run goes on', { timeout: 240_000 }, async () => {
    await loadFile('notes.safetensors', Buffer.from('these are my notes, not a model\n'.repeat(4)));
    const text = await errorText();
    assert.match(text, /notes\.safetensors/, text);
    assert.match(text, /not a complete safetensors file/, text);
    await dismiss();
    await stillWorks('a file that is not safetensors');
  });

  test('a checkpoint of another vocabulary is a clear message and the run goes on', { timeout: 400_000 }, async () => {
    await page.locator(tid('corpus-file')).setInputFiles({ name: 'abc.txt', mimeType: 'text/plain', buffer: Buffer.from(OTHER) });
    await page.waitForFunction(() => document.querySelector('.tp-corpus-info').textContent.includes('abc.txt'), null, { timeout: 120_000 });
    const other = await saveFile();
    assert.match(other.name, /^tidepool-tiny-step0\.safetensors$/);
    await page.click('button:text("Use the default corpus")');
    await page.waitForFunction(() => document.querySelector('.tp-corpus-info').textContent.includes('(default)'), null, { timeout: 120_000 });
    await loadFile('abc-run.safetensors', other.bytes);
    const text = await errorText();
    assert.match(text, /abc-run\.safetensors/, text);
    assert.match(text, /vocab/i, text);
    assert.match(text, /corpus it was trained on/, text);
    await dismiss();
    await stillWorks('a checkpoint of another vocabulary');
    assert.deepEqual(errors, []);
  });
});

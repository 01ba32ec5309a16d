// Corpora: a chosen text file trains; an empty, a binary and a too-short file each
// show the trainer's message and leave the page working (the trainer that was there
// stays); a file or text over the size cap is refused before it is read or sent.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { FAST, num, open, setup, tid, waitNumber, waitPaused, waitReady } from './helpers.mjs';

// About 12 KB of varied English: long enough for any preset's context.
const LINES = [
  'The tide comes in over the flat grey stones,',
  'and every pool it leaves behind is a small world.',
  'Crabs sidle under weed; a limpet holds its ground.',
  'When the water turns, the same pools fill again,',
  'not new ones dug each time, but the old, kept, worn.',
  'So it is with buffers on a GPU: keep them, reuse them.',
];
const POEM = Array.from({ length: 40 }, (_, i) => `${i + 1}. ${LINES[i % LINES.length]} ${LINES[(i * 5 + 2) % LINES.length]}`).join('\n') + '\n';
// The first bytes of a PNG file: 0x89 is not UTF-8, and there are NULs.
const PNG = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d, 0x49, 0x48, 0x44, 0x52, 0, 0, 0, 1, 0, 0, 0, 1, 8, 6, 0, 0, 0, 0x1f, 0x15, 0xc4, 0x89]);

describe('corpora', { timeout: 600_000 }, () => {
  let env;
  let page;
  let errors;

  before(async () => {
    env = await setup();
    ({ page, errors } = await open(env, FAST));
    await waitReady(page);
  });
  after(() => env?.close());

  async function choose(name, buffer, mimeType = 'text/plain') {
    await page.locator(tid('corpus-file')).setInputFiles({ name, mimeType, buffer });
  }

  async function errorText() {
    await page.locator(tid('error')).waitFor({ state: 'visible', timeout: 60_000 });
    return page.locator(tid('error')).innerText();
  }

  // The controls still work after a message: one more step lands (the first on a new
  // trainer compiles every shader: half a minute on a loaded SwiftShader).
  async function stillWorks() {
    const at = await num(page, 'step-count');
    await page.click(tid('step-once'));
    await waitNumber(page, 'step-count', (n) => n === at + 1, { timeout: 90_000, what: 'a step after the message' });
  }

  test('a chosen text file trains', { timeout: 180_000 }, async () => {
    await choose('tidepool-poem.txt', Buffer.from(POEM));
    const info = page.locator('.tp-corpus-info');
    await page.waitForFunction(() => document.querySelector('.tp-corpus-info').textContent.includes('tidepool-poem.txt'), null, {
      timeout: 60_000,
    });
    const shown = await info.innerText();
    assert.match(shown, /vocab \d+/, `vocab shown: ${shown}`);
    assert.match(shown, /[\d,]+ tokens/, `tokens shown: ${shown}`);
    assert.match(shown, /KiB|B /, `size shown: ${shown}`);
    await page.click(tid('start'));
    await waitNumber(page, 'step-count', (n) => n >= 3, { timeout: 90_000, what: '3 steps on the file' });
    await page.click(tid('pause'));
    await waitPaused(page);
    assert.equal(await page.locator(tid('error')).isVisible(), false);
  });

  test('an empty file shows a clear message and loses nothing', { timeout: 150_000 }, async () => {
    await choose('empty.txt', Buffer.alloc(0));
    const text = await errorText();
    assert.match(text, /empty/i, text);
    assert.match(text, /empty\.txt/, 'names the file');
    assert.match(await page.locator('.tp-corpus-info').innerText(), /tidepool-poem\.txt/, 'the corpus in use stays');
    await stillWorks();
  });

  test('a binary file shows a clear message and loses nothing', { timeout: 150_000 }, async () => {
    await page.click('.tp-error button:text("Dismiss")');
    assert.equal(await page.locator(tid('error')).isVisible(), false);
    await choose('picture.png', PNG, 'image/png');
    const text = await errorText();
    assert.equal(await page.locator('.tp-error-title').innerText(), 'This corpus cannot be used');
    assert.match(text, /picture\.png/, 'names the file');
    assert.match(text, /UTF-8|binary/i, text);
    await stillWorks();
  });

  test('a file shorter than the context is refused by the trainer, and loses nothing', { timeout: 150_000 }, async () => {
    await choose('short.txt', Buffer.from('hi\n'));
    const text = await errorText();
    assert.match(text, /corpus/i, text);
    assert.match(text, /short/i, text);
    await stillWorks();
  });

  test('a file dropped on the page trains, and the default corpus comes back', { timeout: 180_000 }, async () => {
    await page.evaluate((poem) => {
      const data = new DataTransfer();
      data.items.add(new File([poem.toUpperCase()], 'dropped.txt', { type: 'text/plain' }));
      const target = document.querySelector('.tp-corpus');
      target.dispatchEvent(new DragEvent('dragover', { dataTransfer: data, bubbles: true, cancelable: true }));
      target.dispatchEvent(new DragEvent('drop', { dataTransfer: data, bubbles: true, cancelable: true }));
    }, POEM);
    await page.waitForFunction(() => document.querySelector('.tp-corpus-info').textContent.includes('dropped.txt'), null, {
      timeout: 60_000,
    });
    assert.equal(await page.locator(tid('error')).isVisible(), false);
    await stillWorks();
    await page.click('button:text("Use the default corpus")');
    await page.waitForFunction(() => /tinyshakespeare\.txt \(default\)/.test(document.querySelector('.tp-corpus-info').textContent), null, {
      timeout: 60_000,
    });
    assert.deepEqual(errors, [], 'no console errors');
  });

  test('a file or a text over 64 MiB is refused before it is read, and loses nothing', { timeout: 150_000 }, async () => {
    const cap = 64 * 1024 * 1024;
    for (const make of ['file', 'text']) {
      await page.evaluate(() => document.querySelector('.tp-error button[data-ref="dismiss"]').click());
      await page.evaluate(
        ([cap, make]) => {
          const t = document.querySelector('.tp').tidepool;
          // a file is refused by its size, unread; a text by its UTF-8 size
          if (make === 'file') t.useCorpus(new File([new Uint8Array(cap + 1)], 'huge.txt'));
          else t.useCorpus('é'.repeat(cap / 2 + 1), 'huge text');
        },
        [cap, make],
      );
      const text = await errorText();
      assert.equal(await page.locator('.tp-error-title').innerText(), 'This corpus cannot be used', make);
      assert.match(text, /huge/, `${make}: names it`);
      assert.match(text, /at most 64 MiB \(67108864 bytes\)/, `${make}: names the cap: ${text}`);
      assert.match(text, /671088(65|66) bytes\)/, `${make}: names its size: ${text}`);
    }
    assert.match(await page.locator('.tp-corpus-info').innerText(), /tinyshakespeare\.txt/, 'the corpus in use stays');
    await stillWorks();
  });
});

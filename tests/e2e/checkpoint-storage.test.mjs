// Storage that will not keep a run: with IndexedDB unavailable, and with the site's
// quota full (Chromium's DevTools protocol shrinks it), the autosave becomes a message
// on the page and training goes on past it.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { FAST, setup, tid, waitNumber, waitReady } from './helpers.mjs';

const AUTOSAVE = 2;

describe('autosave when the browser keeps nothing', { timeout: 600_000 }, () => {
  let env;
  before(async () => {
    env = await setup();
  });
  after(() => env?.close());

  // A fresh context (its own storage); `prepare` runs before the page loads.
  async function openWith(prepare) {
    const context = await env.browser.newContext({ viewport: { width: 1280, height: 900 } });
    const page = await context.newPage();
    const errors = [];
    page.on('pageerror', (err) => errors.push(err.message));
    await prepare(page);
    await page.goto(`${env.server.url}${FAST}&autosave=${AUTOSAVE}`);
    await waitReady(page);
    return { context, page, errors };
  }

  // Trains past two autosaves; the message shows, and the steps go on after it.
  async function trainsOn(page) {
    await page.click(tid('start'));
    await waitNumber(page, 'step-count', (n) => n >= 2 * AUTOSAVE + 1, { timeout: 150_000, what: 'steps past the autosaves' });
    assert.equal(await page.evaluate(() => document.querySelector('.tp').tidepool.running), true, 'still training');
    await page.click(tid('pause'));
  }

  test('IndexedDB unavailable: a message, no resume button, training goes on', { timeout: 240_000 }, async () => {
    const { context, page, errors } = await openWith((p) =>
      p.addInitScript(() => {
        IDBFactory.prototype.open = () => {
          throw new DOMException('The user denied permission to access the database.', 'SecurityError');
        };
      }),
    );
    const status = await page.locator(tid('checkpoint-status')).innerText();
    assert.match(status, /IndexedDB is unavailable/, status);
    assert.match(status, /Training goes on; Save downloads the run instead/, status);
    assert.equal(await page.locator(tid('resume-last')).isVisible(), false);
    await trainsOn(page);
    assert.equal(await page.locator(tid('error')).isVisible(), false, 'told once, in the panel, not as an alert');
    assert.deepEqual(errors, []);
    await context.close();
  });

  test('the quota full: the autosave is a message and training goes on', { timeout: 240_000 }, async () => {
    const { context, page, errors } = await openWith(async (p) => {
      const cdp = await p.context().newCDPSession(p);
      await cdp.send('Storage.overrideQuotaForOrigin', { origin: env.server.url.replace(/\/$/, ''), quotaSize: 1024 });
    });
    await trainsOn(page);
    await page.locator(tid('error')).waitFor({ state: 'visible', timeout: 60_000 });
    const text = await page.locator(tid('error')).innerText();
    assert.match(text, /The run was not saved in this browser/, text);
    assert.match(text, /quota/, text);
    assert.match(text, /Training goes on/, text);
    assert.equal(await page.locator('.tp-error [data-ref="restart"]').isVisible(), false, 'no Restart: nothing broke');
    assert.deepEqual(errors, []);
    await context.close();
  });
});


// Where the package's files are can be given (mount()'s workerUrl, pkgUrl, wasmUrl,
// corpusUrl: a bundler or a server may move them), so a wrong one must say which URL
// failed and how: missing (404), or a server's HTML fallback page in its place.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { open, setup } from './helpers.mjs';

let env;
before(async () => {
  env = await setup();
});
after(() => env?.close());

// A single-page app's server: any path it does not have is its page, with 200.
const FALLBACK = '<!doctype html><html><head><title>my app</title></head><body><div id="app"></div></body></html>';

/** Mounts a trainer with `options` on a blank page; resolves with its first error event ({kind, message}) and what it shows. */
async function firstError(options, { fallback = [] } = {}) {
  const { page } = await open(env, 'www/blank.html');
  for (const path of fallback) {
    await page.route(`**${path}`, (route) => route.fulfill({ status: 200, contentType: 'text/html', body: FALLBACK }));
  }
  const detail = await page.evaluate(async (options) => {
    const { mount } = await import('/www/tidepool.mjs');
    const el = document.body.appendChild(document.createElement('div'));
    const error = new Promise((done) => el.addEventListener('tidepool:error', (e) => done(e.detail), { once: true }));
    mount(el, { batch: 2, context: 8, autosaveEvery: 0, ...options });
    return Promise.race([error, new Promise((done) => setTimeout(() => done({ kind: 'none', message: 'no error in 60 s' }), 60_000))]);
  }, options);
  const shown = await page.locator('[data-testid="error"]').innerText();
  await page.close();
  return { ...detail, shown };
}

test('a worker URL that is missing, or a fallback page, is named', { timeout: 120_000 }, async () => {
  const missing = await firstError({ workerUrl: '/www/no-such-worker.mjs' });
  assert.equal(missing.kind, 'load', missing.message);
  assert.match(missing.message, /no-such-worker\.mjs could not be loaded \(HTTP 404\)/);
  assert.match(missing.message, /workerUrl/);
  assert.doesNotMatch(missing.message, /module workers/);
  assert.match(missing.shown, /tidepool did not load/);

  const page = await firstError({ workerUrl: '/www/app-route.mjs' }, { fallback: ['/www/app-route.mjs'] });
  assert.equal(page.kind, 'load', page.message);
  assert.match(page.message, /app-route\.mjs is text\/html, not JavaScript/);
});

test('a wasm URL that is missing, or a fallback page, is named', { timeout: 120_000 }, async () => {
  const missing = await firstError({ wasmUrl: '/pkg/missing.wasm' });
  assert.equal(missing.kind, 'load', missing.message);
  assert.match(missing.message, /could not fetch the wasm http:\/\/[^ ]+\/pkg\/missing\.wasm: HTTP 404/);
  assert.match(missing.message, /wasmUrl/);

  const page = await firstError({ wasmUrl: '/app/tidepool_bg.wasm' }, { fallback: ['/app/tidepool_bg.wasm'] });
  assert.equal(page.kind, 'load', page.message);
  assert.match(page.message, /\/app\/tidepool_bg\.wasm is not a wasm module \(text\/html/);

  const pkg = await firstError({ pkgUrl: '/pkg/nothing-here.js' });
  assert.equal(pkg.kind, 'load', pkg.message);
  assert.match(pkg.message, /could not load the wasm package http:\/\/[^ ]+\/pkg\/nothing-here\.js/);
});

test('a corpus URL answered by a fallback page is named, not trained on', { timeout: 120_000 }, async () => {
  const error = await firstError({ corpusUrl: '/data/my-notes.txt' }, { fallback: ['/data/my-notes.txt'] });
  assert.equal(error.kind, 'corpus', error.message);
  assert.match(error.message, /the corpus http:\/\/[^ ]+\/data\/my-notes\.txt came back as an HTML page \(text\/html\)/);
  assert.match(error.message, /Training uses the default corpus/);
});

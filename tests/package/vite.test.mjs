// The packed package in a Vite app, as docs/embed.md's recipe writes one: `import {
// mount } from 'tidepool-gpu'` in the app's module and no Vite configuration. Built
// (vite build, served by vite preview) and in the dev server (vite), the trainer must
// load its worker (bundled with its imports), the wasm and the default corpus (emitted
// as assets), and its styles, and train, with nothing missing and nothing from another
// origin.
//
// make test-package (after make pkg). About a minute on SwiftShader.

import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { build, createServer, preview } from 'vite';
import { NAME, launch, pack, project, trainOn } from './packed.mjs';

// The recipe's files: a page with a mount point and the app's module.
const APP = {
  'index.html': `<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>A Vite app with a trainer</title></head>
<body>
  <div id="trainer"></div>
  <script type="module" src="/main.js"></script>
</body>
</html>
`,
  'main.js': `import { mount } from '${NAME}';

mount(document.getElementById('trainer'), { preset: 'tiny', batch: 2, context: 8 });
`,
};

let packed;
let app;
let browser;
const servers = [];

before(async () => {
  packed = pack();
  app = project(packed.work, packed.tarball, 'vite-app', APP);
  browser = await launch();
});
after(async () => {
  await browser?.close();
  for (const s of servers) await s.close();
  packed?.remove();
});

// Vite's own options for the test: this app's root, quiet, any free port on 127.0.0.1.
const quiet = () => ({ root: app, configFile: false, logLevel: 'warn', clearScreen: false });
const local = { host: '127.0.0.1', port: 0, strictPort: false };

function checkTrained({ failed, corpus, styles }) {
  assert.equal(corpus.name, 'tinyshakespeare.txt', 'the default corpus');
  assert.equal(corpus.vocab, 65, 'Tiny Shakespeare, not the app page served in its place');
  assert.deepEqual(styles, { font: '15px', chart: 'absolute' }, "tidepool's and uPlot's styles reached it");
  assert.deepEqual(failed, [], 'nothing the app loads is missing');
}

test('vite build bundles the worker and emits the wasm and the corpus; vite preview trains', { timeout: 300_000 }, async () => {
  await build({ ...quiet(), build: { outDir: 'dist', emptyOutDir: true } });
  const assets = readdirSync(join(app, 'dist', 'assets'));
  assert.ok(assets.some((f) => /^tidepool_bg-.*\.wasm$/.test(f)), `the wasm is emitted (${assets})`);
  assert.ok(assets.some((f) => /^tinyshakespeare-.*\.txt$/.test(f)), `the default corpus is emitted (${assets})`);
  assert.ok(!assets.some((f) => /^worker-.*\.mjs$/.test(f)), `the worker is not copied as a raw file (${assets})`);
  const server = await preview({ ...quiet(), preview: local });
  servers.push({ close: () => server.close() });
  const run = await trainOn(browser, server.resolvedUrls.local[0]);
  checkTrained(run);
  assert.equal(run.model.batch, 2, 'the options reached the trainer');
  assert.ok(run.workers.some((u) => /\/assets\/worker-[^/]+\.js$/.test(new URL(u).pathname)), `the bundled worker runs (${run.workers})`);
  assert.ok(run.seen.some((p) => /^\/assets\/tidepool_bg-.*\.wasm$/.test(p)), 'the emitted wasm is loaded');
});

test('the vite dev server serves the package and it trains', { timeout: 300_000 }, async () => {
  const server = await createServer({ ...quiet(), server: local });
  await server.listen();
  servers.push({ close: () => server.close() });
  const run = await trainOn(browser, server.resolvedUrls.local[0]);
  checkTrained(run);
  assert.ok(run.seen.includes(`/node_modules/${NAME}/pkg/tidepool_bg.wasm`), `the wasm from the package (${run.seen.join(', ')})`);
  assert.ok(run.seen.includes(`/node_modules/${NAME}/data/tinyshakespeare.txt`), 'the corpus from the package');
});

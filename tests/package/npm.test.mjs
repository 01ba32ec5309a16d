// The packed package in a plain static page: index.html (this directory's, the
// README's snippet verbatim) served from a project that installed the tarball, by a
// server that knows nothing of tidepool. The trainer it embeds must load its worker,
// wasm, CSS and uPlot from the installed package and train, with no request off the
// page's origin. A TypeScript page using the installed package type-checks too,
// under a default strict tsconfig (its exports lead tsc to the declarations shipped).
//
// make test-package (after make pkg). About half a minute on SwiftShader.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { copyFileSync, createReadStream, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { extname, join, resolve, sep } from 'node:path';
import { after, before, test } from 'node:test';
import { HERE, NAME, ROOT, launch, pack, project, trainOn } from './packed.mjs';

const MIME = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.txt': 'text/plain; charset=utf-8',
  '.json': 'application/json',
  '.wasm': 'application/wasm',
};

/** Serves `root` on 127.0.0.1 (any free port), as a plain static server does. */
function serve(root) {
  const server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    const file = resolve(root, `.${path.endsWith('/') ? `${path}index.html` : path}`);
    if (file.startsWith(root + sep) && statSync(file, { throwIfNoEntry: false })?.isFile()) {
      res.writeHead(200, { 'Content-Type': MIME[extname(file)] ?? 'application/octet-stream' });
      createReadStream(file).pipe(res);
    } else res.writeHead(404).end();
  });
  return new Promise((done) =>
    server.listen(0, '127.0.0.1', () => done({ url: `http://127.0.0.1:${server.address().port}/`, close: () => new Promise((c) => server.close(c)) })),
  );
}

let packed;
let site;
let server;
let browser;

before(() => {
  packed = pack();
  site = project(packed.work, packed.tarball, 'site');
  copyFileSync(join(HERE, 'index.html'), join(site, 'index.html'));
});
after(async () => {
  await browser?.close();
  await server?.close();
  packed?.remove();
});

test('the installed package types a TypeScript page under a default strict tsconfig', () => {
  copyFileSync(join(ROOT, 'tests', 'types', 'widget.ts'), join(site, 'widget.ts'));
  // what `tsc --init` and a Vite template give: ES2022 with the DOM, strict, and the
  // declarations of every package checked (no skipLibCheck, no ESNext.Disposable)
  const options = { strict: true, noEmit: true, target: 'ES2022', module: 'ESNext', moduleResolution: 'bundler', lib: ['ES2022', 'DOM'], skipLibCheck: false, types: [] };
  writeFileSync(join(site, 'tsconfig.json'), JSON.stringify({ compilerOptions: options, files: ['widget.ts'] }));
  const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
  let files;
  try {
    files = execFileSync(process.execPath, [tsc, '-p', site, '--listFiles'], { cwd: site, encoding: 'utf8' });
  } catch (err) {
    assert.fail(`tsc failed on the installed package:\n${err.stdout}${err.stderr}`);
  }
  for (const d of ['www/tidepool.d.ts', 'www/wasm.d.ts', 'pkg/tidepool.d.ts']) {
    assert.ok(files.includes(join(site, 'node_modules', NAME, d)), `tsc read ${d} from the installed package`);
  }
});

test('the installed package embeds a trainer in a plain page that trains, with no request off its origin', { timeout: 240_000 }, async () => {
  server = await serve(site);
  browser = await launch();
  const { seen, failed, model, corpus, styles } = await trainOn(browser, server.url);
  assert.equal(model.batch, 2, 'the batch attribute reached the trainer');
  assert.equal(model.context, 8, 'the context attribute reached the trainer');
  assert.equal(corpus.name, 'tinyshakespeare.txt', 'the default corpus');
  assert.equal(corpus.vocab, 65, 'Tiny Shakespeare, not a page in its place');
  assert.deepEqual(styles, { font: '15px', chart: 'absolute' }, "tidepool's and uPlot's styles reached it");
  // Everything came from the installed package, through this server.
  for (const path of [
    'www/tidepool.mjs',
    'www/worker.mjs',
    'www/tidepool.css',
    'pkg/tidepool.js',
    'pkg/tidepool_bg.wasm',
    'data/tinyshakespeare.txt',
    'node_modules/uplot/dist/uPlot.esm.js',
    'node_modules/uplot/dist/uPlot.min.css',
  ]) {
    assert.ok(seen.includes(`/node_modules/${NAME}/${path}`), `${path} loaded from the package (loaded: ${seen.join(', ')})`);
  }
  assert.deepEqual(failed, [], 'no request the package makes is missing');
});

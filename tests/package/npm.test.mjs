// The npm package as a user gets it: `npm pack` here, the tarball installed into a
// fresh project in a temporary directory outside the repository, and index.html
// (this directory's, the README's snippet verbatim) served from that project by a
// plain static server. The trainer it embeds must load its worker, wasm, CSS and
// uPlot from the installed package and train, and no request may leave the page's
// origin (every request is seen and any foreign one aborted by Playwright).
//
// A TypeScript project using the installed package type-checks too (its exports
// lead tsc to the declarations shipped in the tarball).
//
// make test-package (after make pkg). About half a minute on SwiftShader.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createReadStream, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync, copyFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, extname, join, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import { chromium } from 'playwright-core';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = resolve(HERE, '..', '..');
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
const MIME = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json',
  '.wasm': 'application/wasm',
};

/** Serves `root` on 127.0.0.1 (any free port) and logs every request it answers. */
function serve(root) {
  const log = [];
  const server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    const file = resolve(root, `.${path.endsWith('/') ? `${path}index.html` : path}`);
    let status = 404;
    if (file.startsWith(root + sep) && statSync(file, { throwIfNoEntry: false })?.isFile()) {
      status = 200;
      res.writeHead(200, { 'Content-Type': MIME[extname(file)] ?? 'application/octet-stream' });
      createReadStream(file).pipe(res);
    } else {
      res.writeHead(404).end();
    }
    log.push({ path, status });
  });
  return new Promise((done) =>
    server.listen(0, '127.0.0.1', () =>
      done({ url: `http://127.0.0.1:${server.address().port}`, log, close: () => new Promise((c) => server.close(c)) }),
    ),
  );
}

let work;
let site;
let server;
let browser;

before(() => {
  for (const f of ['pkg/tidepool.js', 'pkg/tidepool_bg.wasm']) {
    if (!statSync(join(ROOT, f), { throwIfNoEntry: false })) throw new Error(`${f} is missing: build it first with \`make pkg\``);
  }
  work = mkdtempSync(join(tmpdir(), 'tidepool-npm-'));
  assert.ok(!resolve(work).startsWith(ROOT + sep), 'the project is outside the repository');
  execFileSync('npm', ['pack', '--pack-destination', work], { cwd: ROOT, stdio: 'pipe' });
  const tarball = readdirSync(work).find((f) => f.endsWith('.tgz'));
  assert.ok(tarball, 'npm pack made a tarball');
  site = join(work, 'site');
  execFileSync('mkdir', [site]);
  writeFileSync(join(site, 'package.json'), JSON.stringify({ name: 'my-site', private: true }));
  // --offline: the tarball holds everything it needs (uPlot is bundled), no registry
  execFileSync('npm', ['install', '--offline', '--no-audit', '--no-fund', join(work, tarball)], { cwd: site, stdio: 'pipe' });
  copyFileSync(join(HERE, 'index.html'), join(site, 'index.html'));
});

test('the installed package types a TypeScript page', () => {
  copyFileSync(join(ROOT, 'tests', 'types', 'widget.ts'), join(site, 'widget.ts'));
  const options = { strict: true, noEmit: true, target: 'ES2022', module: 'ESNext', moduleResolution: 'bundler', types: [] };
  writeFileSync(join(site, 'tsconfig.json'), JSON.stringify({ compilerOptions: { ...options, lib: ['ES2022', 'DOM', 'DOM.Iterable', 'ESNext.Disposable'] }, files: ['widget.ts'] }));
  const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
  let files;
  try {
    files = execFileSync(process.execPath, [tsc, '-p', site, '--listFiles'], { cwd: site, encoding: 'utf8' });
  } catch (err) {
    assert.fail(`tsc failed on the installed package:\n${err.stdout}${err.stderr}`);
  }
  for (const d of ['node_modules/tidepool/www/tidepool.d.ts', 'node_modules/tidepool/www/wasm.d.ts', 'node_modules/tidepool/pkg/tidepool.d.ts']) {
    assert.ok(files.includes(join(site, d)), `tsc read ${d} from the installed package`);
  }
});

after(async () => {
  await browser?.close();
  await server?.close();
  if (work) rmSync(work, { recursive: true, force: true });
});

test('the installed package embeds a trainer that trains, with no request off its origin', { timeout: 240_000 }, async () => {
  server = await serve(site);
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--enable-unsafe-webgpu', '--no-sandbox', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-dev-shm-usage'],
  });
  const context = await browser.newContext();
  const seen = [];
  const foreign = [];
  // the whole context: the page, its worker, every subresource
  await context.route('**/*', (route) => {
    const url = route.request().url();
    seen.push(url);
    if (new URL(url).origin === server.url) return route.continue();
    foreign.push(url);
    return route.abort('blockedbyclient');
  });
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(`page: ${e.message}`));
  page.on('console', (m) => m.type() === 'error' && errors.push(`console: ${m.text()}`));
  page.on('worker', (w) => w.on('console', (m) => m.type() === 'error' && errors.push(`worker: ${m.text()}`)));
  // what the element reports, as a host page would listen for it
  await page.addInitScript(() => {
    window.reported = { steps: [], errors: [], created: null };
    document.addEventListener('tidepool:created', (e) => (window.reported.created = e.detail.model));
    document.addEventListener('tidepool:step', (e) => window.reported.steps.push(e.detail.loss));
    document.addEventListener('tidepool:error', (e) => window.reported.errors.push(e.detail.message));
  });
  await page.goto(`${server.url}/`);

  await page.waitForFunction(() => window.reported.created || window.reported.errors.length, null, { timeout: 120_000 });
  assert.deepEqual(await page.evaluate(() => window.reported.errors), [], 'no error while loading');
  const model = await page.evaluate(() => window.reported.created);
  assert.equal(model.batch, 2, 'the batch attribute reached the trainer');
  assert.equal(model.context, 8, 'the context attribute reached the trainer');

  await page.getByRole('button', { name: 'Start' }).click();
  await page.waitForFunction(() => window.reported.steps.length >= 3 || window.reported.errors.length, null, { timeout: 120_000 });
  const { steps, errors: reported } = await page.evaluate(() => window.reported);
  assert.deepEqual(reported, [], 'no error while training');
  assert.ok(steps.length >= 3 && steps.every(Number.isFinite), `three finite losses (${steps})`);
  await page.evaluate(() => document.querySelector('tidepool-trainer').tidepool.pause());

  // Everything came from the installed package, through this server.
  assert.deepEqual(foreign, [], 'no request left the page origin');
  const served = server.log.filter((r) => r.status === 200).map((r) => r.path);
  for (const path of [
    '/node_modules/tidepool/www/tidepool.mjs',
    '/node_modules/tidepool/www/worker.mjs',
    '/node_modules/tidepool/www/tidepool.css',
    '/node_modules/tidepool/pkg/tidepool.js',
    '/node_modules/tidepool/pkg/tidepool_bg.wasm',
    '/node_modules/tidepool/node_modules/uplot/dist/uPlot.esm.js',
    '/node_modules/tidepool/node_modules/uplot/dist/uPlot.min.css',
  ]) {
    assert.ok(served.includes(path), `${path} served (served: ${served.join(', ')})`);
    assert.ok(seen.some((u) => new URL(u).pathname === path), `${path} seen by the interception`);
  }
  assert.deepEqual(server.log.filter((r) => r.status !== 200), [], 'no request the package makes is missing');
  assert.deepEqual(errors, [], 'no console errors');
});

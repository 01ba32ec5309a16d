// serve.mjs --cors: the package's files carry Access-Control-Allow-Origin: * so a
// page on another origin can embed the trainer; pages, the server itself and every
// refused repository file do not, and nothing refused becomes served. Without the
// flag nothing carries it. Plain HTTP requests on the repository, no browser.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { request } from 'node:http';
import { after, before, test } from 'node:test';
import { startServer } from '../../www/serve.mjs';
import { ROOT, requirePackage } from './helpers.mjs';

function get(server, path, headers = {}) {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: server.port, path, headers: { Origin: 'http://127.0.0.1:1', ...headers } });
    req.on('error', reject);
    req.on('response', (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode, acao: res.headers['access-control-allow-origin'], etag: res.headers.etag }));
    });
    req.end();
  });
}

// Everything the widget loads from its package (the README's snippet on another origin).
const PACKAGE = [
  '/www/tidepool.mjs',
  '/www/worker.mjs',
  '/www/client.mjs',
  '/www/styles.mjs',
  '/www/csp.mjs',
  '/www/tidepool.css',
  '/www/tidepool.d.ts',
  '/pkg/tidepool.js',
  '/pkg/tidepool_bg.wasm',
  '/node_modules/uplot/dist/uPlot.esm.js',
  '/node_modules/uplot/dist/uPlot.min.css',
  '/data/tinyshakespeare.txt',
];
// Served to this machine, but pages and the server: not the package.
const NOT_PACKAGE = ['/', '/index.html', '/www/embed.html', '/www/page.css', '/www/serve.mjs', '/www/icon.svg'];
// Never served, with or without --cors.
const REFUSED = ['/Cargo.toml', '/src/lib.rs', '/.git/config', '/package.json', '/node_modules/uplot/package.json', '/tests/e2e/helpers.mjs'];

let plain;
let cors;
before(async () => {
  requirePackage();
  plain = await startServer({ port: 0, root: ROOT });
  cors = await startServer({ port: 0, root: ROOT, cors: true });
});
after(() => Promise.all([plain?.close(), cors?.close()]));

test('--cors: the package files carry Access-Control-Allow-Origin: *, nothing else does', async () => {
  for (const path of PACKAGE) {
    const res = await get(cors, path);
    assert.deepEqual([res.status, res.acao], [200, '*'], path);
    // a revalidation (304) carries it too, or the browser cannot use its cached copy
    assert.deepEqual([(await get(cors, path, { 'If-None-Match': res.etag })).status, res.acao], [304, '*'], `${path} (304)`);
  }
  for (const path of NOT_PACKAGE) assert.deepEqual([(await get(cors, path)).status, (await get(cors, path)).acao], [200, undefined], path);
  for (const path of REFUSED) {
    const res = await get(cors, path);
    assert.ok(res.status >= 400, `${path} stays refused (${res.status})`);
    assert.equal(res.acao, undefined, `${path}: no CORS on a refusal`);
  }
});

test('without --cors nothing carries Access-Control-Allow-Origin', async () => {
  for (const path of [...PACKAGE, ...NOT_PACKAGE]) assert.deepEqual([(await get(plain, path)).status, (await get(plain, path)).acao], [200, undefined], path);
});

test('--cors keeps the Host check', async () => {
  const res = await get(cors, '/www/tidepool.mjs', { Host: 'evil.example:80' });
  assert.deepEqual([res.status, res.acao], [403, undefined]);
});

test('the command line takes --cors (and refuses --cors=value)', async () => {
  const run = (args) =>
    new Promise((resolve) => {
      const child = spawn(process.execPath, ['www/serve.mjs', '--port', '0', ...args], { cwd: ROOT });
      let out = '';
      child.stdout.on('data', (d) => {
        out += d;
        if (out.includes('--cors')) child.kill();
        else if (out.includes('serving')) setTimeout(() => child.kill(), 200);
      });
      child.stderr.on('data', (d) => (out += d));
      child.on('exit', (code) => resolve({ code, out }));
    });
  const on = await run(['--cors']);
  assert.match(on.out, /--cors: other origins may load the package: <script type="module" src="http:\/\/127\.0\.0\.1:\d+\/www\/tidepool\.mjs"><\/script>/);
  const bad = await run(['--cors=yes']);
  assert.equal(bad.code, 2);
  assert.match(bad.out, /unknown argument --cors=yes/);
});

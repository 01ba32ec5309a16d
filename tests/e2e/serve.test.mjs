// The dev server (www/serve.mjs) serves the page and nothing else, to this machine
// only. Each refusal the hardening issue reproduced is probed here on a scratch
// root built for the test (a .git/, a Cargo.toml, symlinks out, a FIFO), plus the
// repository itself. No browser: plain HTTP requests with raw paths and Host headers.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { checkRoot, startServer } from '../../www/serve.mjs';
import { ROOT } from './helpers.mjs';

/** One raw request: `path` goes on the wire as written, Host as given. */
function get(server, path, { method = 'GET', host = `127.0.0.1:${server.port}`, headers = {}, timeout = 3000 } = {}) {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: server.port, method, path, headers: { Host: host, ...headers }, setHost: false });
    req.setTimeout(timeout, () => req.destroy(new Error(`no answer to ${method} ${path} within ${timeout} ms`)));
    req.on('error', reject);
    req.on('response', (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body }));
    });
    req.end();
  });
}

/** Starts a download of `path` and abandons it after its first chunk; resolves once the socket is closed. */
function abandon(server, path) {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: server.port, path, headers: { Host: `127.0.0.1:${server.port}` }, setHost: false });
    req.on('error', () => {}); // the abort's own
    req.on('close', resolve);
    req.on('response', (res) => res.once('data', () => req.destroy()));
    req.setTimeout(3000, () => reject(new Error(`no data from ${path}`)));
    req.end();
  });
}

/** This process's open file descriptors (Linux). */
const openFiles = () => readdirSync('/proc/self/fd').length;

describe('the dev server, on a scratch root', () => {
  let dir;
  let root;
  let server;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'tidepool-serve-'));
    root = join(dir, 'repo');
    const files = {
      'index.html': '<!doctype html><title>page</title>',
      'Cargo.toml': '[package]\nname = "secret"\n',
      '.git/config': '[remote "origin"]\n',
      'src/lib.rs': '// not the page\n',
      'www/app.mjs': 'export const x = 1;\n',
      'www/.env': 'TOKEN=1\n',
      'pkg/tidepool_bg.wasm': '\0asm',
      'data/corpus.txt': 'to be or not to be\n',
      'data/big.txt': 'to be or not to be\n'.repeat(500_000), // 9.5 MB: more than a socket takes at once
      'node_modules/uplot/dist/uPlot.esm.js': 'export default 1;\n',
      'node_modules/other/index.js': 'export default 2;\n',
    };
    for (const [path, text] of Object.entries(files)) {
      mkdirSync(join(root, path, '..'), { recursive: true });
      writeFileSync(join(root, path), text);
    }
    writeFileSync(join(dir, 'outside.txt'), 'outside the root\n');
    symlinkSync(join(dir, 'outside.txt'), join(root, 'www', 'out.txt')); // out of the root
    symlinkSync('../Cargo.toml', join(root, 'www', 'cargo.txt')); // out of www/, inside the root
    symlinkSync(dir, join(root, 'www', 'up')); // a folder out of the root
    symlinkSync('app.mjs', join(root, 'www', 'alias.mjs')); // stays inside www/: served
    execFileSync('mkfifo', [join(root, 'www', 'pipe.txt')]);
    server = await startServer({ port: 0, root });
  });
  after(async () => {
    await server?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test('serves the page, its modules, the wasm and the corpus with the right types', async () => {
    const page = await get(server, '/');
    assert.equal(page.status, 200);
    assert.match(page.headers['content-type'], /^text\/html/);
    assert.match(page.body, /<title>page/);
    const cases = [
      ['/index.html', /^text\/html/],
      ['/www/app.mjs', /^text\/javascript/],
      ['/www/alias.mjs', /^text\/javascript/],
      ['/pkg/tidepool_bg.wasm', /^application\/wasm$/],
      ['/data/corpus.txt', /^text\/plain/],
      ['/node_modules/uplot/dist/uPlot.esm.js', /^text\/javascript/],
      ['/www/app.mjs?v=2', /^text\/javascript/],
    ];
    for (const [path, type] of cases) {
      const res = await get(server, path);
      assert.equal(res.status, 200, path);
      assert.match(res.headers['content-type'], type, path);
      assert.equal(res.headers['x-content-type-options'], 'nosniff', path);
    }
    const head = await get(server, '/www/app.mjs', { method: 'HEAD' });
    assert.equal(head.status, 200);
    assert.equal(head.headers['content-length'], String('export const x = 1;\n'.length));
    assert.equal(head.body, '');
  });

  test('refuses the repository: .git, Cargo.toml, src/, other packages, dotfiles', async () => {
    for (const path of [
      '/.git/config',
      '/.git/',
      '/Cargo.toml',
      '/src/lib.rs',
      '/node_modules/other/index.js',
      '/www/.env',
      '/www/%2e%2e/Cargo.toml',
      '/www/..%2fCargo.toml',
      '/www/..%5cCargo.toml',
      '/www/../Cargo.toml',
      '/www/app.mjs%00.txt',
      '/www/',
      '/www',
      '//www/app.mjs',
    ]) {
      const res = await get(server, path);
      assert.ok(res.status === 404 || res.status === 403 || res.status === 400, `${path}: ${res.status}`);
      assert.doesNotMatch(res.body, /secret|remote|not the page|TOKEN|export default 2/, `${path} leaks`);
    }
  });

  test('refuses symlinks that lead out of their folder', async () => {
    for (const path of ['/www/out.txt', '/www/cargo.txt', '/www/up/outside.txt', '/www/up/repo/Cargo.toml']) {
      const res = await get(server, path);
      assert.equal(res.status, 403, `${path}: ${res.status} ${res.body}`);
      assert.doesNotMatch(res.body, /outside the root|secret/);
    }
  });

  test('a FIFO is refused at once, not waited on', async () => {
    const res = await get(server, '/www/pipe.txt', { timeout: 3000 });
    assert.equal(res.status, 403);
    assert.match(res.body, /not a regular file/);
  });

  test('refuses a foreign Host (DNS rebinding), accepts the local names with the port', async () => {
    const p = server.port;
    for (const host of [`127.0.0.1:${p}`, `localhost:${p}`, `LOCALHOST:${p}`, `[::1]:${p}`]) {
      assert.equal((await get(server, '/', { host })).status, 200, host);
    }
    for (const host of [`evil.example:${p}`, 'evil.example', `127.0.0.1:${p + 1}`, 'localhost', `127.0.0.1.evil.example:${p}`, `localhost:${p}@evil`, '']) {
      const res = await get(server, '/', { host });
      assert.ok(res.status === 403 || res.status === 400, `Host "${host}": ${res.status}`);
      assert.doesNotMatch(res.body, /<title>/);
    }
  });

  test('never redirects off the site: encoded slashes are not an open redirect', async () => {
    for (const path of ['/%2fevil.example%2f..%2fwww', '/%2F%2Fevil.example', '/%5cevil.example', '//evil.example/', '/\\evil.example/www']) {
      const res = await get(server, path);
      assert.ok(res.status < 300 || res.status >= 400, `${path}: ${res.status}`);
      assert.equal(res.headers.location, undefined, `${path} redirects to ${res.headers.location}`);
    }
  });

  test('ETag and 304: an unchanged file is not sent again, a changed one is', async () => {
    const first = await get(server, '/www/app.mjs');
    const etag = first.headers.etag;
    assert.ok(etag, 'an ETag is sent');
    assert.match(first.headers['cache-control'], /no-cache/);
    const again = await get(server, '/www/app.mjs', { headers: { 'If-None-Match': etag } });
    assert.equal(again.status, 304);
    assert.equal(again.body, '');
    assert.equal(again.headers.etag, etag);
    const list = await get(server, '/www/app.mjs', { headers: { 'If-None-Match': `"other", ${etag}` } });
    assert.equal(list.status, 304);
    const stale = await get(server, '/www/app.mjs', { headers: { 'If-None-Match': '"something-else"' } });
    assert.equal(stale.status, 200);

    writeFileSync(join(root, 'www', 'app.mjs'), 'export const x = 22;\n');
    const later = new Date(Date.now() + 5000);
    utimesSync(join(root, 'www', 'app.mjs'), later, later);
    const changed = await get(server, '/www/app.mjs', { headers: { 'If-None-Match': etag } });
    assert.equal(changed.status, 200);
    assert.notEqual(changed.headers.etag, etag);
    assert.match(changed.body, /x = 22/);
  });

  test('methods other than GET and HEAD get 405 with Allow', async () => {
    for (const method of ['POST', 'PUT', 'DELETE', 'OPTIONS', 'PATCH']) {
      const res = await get(server, '/www/app.mjs', { method });
      assert.equal(res.status, 405, method);
      assert.equal(res.headers.allow, 'GET, HEAD', method);
    }
  });

  test('start-up names what the page would miss: no index.html is an error, no wasm build or uPlot a warning', async () => {
    assert.deepEqual(await checkRoot(root), { warnings: [] });
    const bare = join(dir, 'bare');
    mkdirSync(bare);
    assert.match((await checkRoot(bare)).error, /has no index\.html/);
    writeFileSync(join(bare, 'index.html'), '<!doctype html>');
    const { error, warnings } = await checkRoot(bare);
    assert.equal(error, undefined);
    assert.equal(warnings.length, 2);
    assert.match(warnings[0], /make pkg/);
    assert.match(warnings[1], /make setup-web/);
    assert.match((await checkRoot(join(dir, 'no-such-folder'))).error, /has no index\.html/);
  });

  test('an abandoned download closes its file', async () => {
    await get(server, '/data/corpus.txt'); // whatever a first request opens for good
    const before = openFiles();
    for (let i = 0; i < 20; i++) await abandon(server, '/data/big.txt');
    // the server hears of each abort as its socket closes: a moment for the last ones
    const deadline = Date.now() + 3000;
    while (openFiles() > before + 2 && Date.now() < deadline) await new Promise((next) => setTimeout(next, 50));
    assert.ok(openFiles() <= before + 2, `20 abandoned downloads left ${openFiles() - before} more files open`);
  });

  test('bounds the length of paths', async () => {
    const long = await get(server, `/www/${'a'.repeat(5000)}.mjs`);
    assert.equal(long.status, 414);
    const deep = await get(server, `/www/${'a/'.repeat(40)}x.mjs`);
    assert.equal(deep.status, 414);
    const segment = await get(server, `/www/${'b'.repeat(300)}.mjs`);
    assert.equal(segment.status, 404);
  });
});

describe('the dev server, on this repository', () => {
  let server;
  before(async () => {
    server = await startServer({ port: 0, root: ROOT });
  });
  after(() => server?.close());

  test('serves the page and uPlot, refuses the rest', async () => {
    assert.equal((await get(server, '/')).status, 200);
    assert.equal((await get(server, '/www/tidepool.mjs')).status, 200);
    assert.equal((await get(server, '/node_modules/uplot/dist/uPlot.esm.js')).status, 200);
    for (const path of ['/.git/config', '/.git', '/Cargo.toml', '/Makefile', '/src/web.rs', '/package.json', '/target/']) {
      const res = await get(server, path);
      assert.equal(res.status, 404, `${path}: ${res.status}`);
    }
  });
});

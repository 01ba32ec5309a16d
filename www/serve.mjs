#!/usr/bin/env node
// The dev server behind `make demo`: serves the page and nothing else of the
// repository, to this machine only. No dependencies, no CDN.
//
//   node www/serve.mjs [--port 8000] [--root DIR] [--cors]
//
// --cors lets pages on other origins embed the trainer from here, as they would from
// a package CDN: the package's files (PACKAGE_PATHS) are sent with
// Access-Control-Allow-Origin: *. Nothing else gains it, and nothing else is served.
//
// What it refuses, and why:
// - anything outside SERVED (the repository's .git, Cargo.toml, src/, ... are not the page);
// - dotfiles and dot-directories anywhere, and encoded '/', '\' or NUL inside a segment;
// - a file whose real path leaves its served area (a symlink out of www/, say);
// - anything but a regular file (a FIFO would hold the request open forever);
// - a Host header other than 127.0.0.1, localhost or [::1] with this port: a site the
//   browser visits could otherwise rebind its own name to 127.0.0.1 and read the files;
// - over-long URLs, and methods other than GET and HEAD (405 with Allow).
// At start-up it refuses a --root without index.html, and names a missing wasm build
// (pkg/) or uPlot, which would otherwise show only as a broken page.
// It never redirects (no folder listings, no "/x" -> "/x/"), so it cannot be made to
// redirect elsewhere.
// The end-to-end tests import startServer() and run it on a free port.

import { createServer } from 'node:http';
import { constants } from 'node:fs';
import { access, open, realpath } from 'node:fs/promises';
import { extname, join, resolve, sep } from 'node:path';
import { pipeline } from 'node:stream';
import { fileURLToPath } from 'node:url';

const REPO_ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));

/** What the page loads: exact files, and folders served with everything (not dotfiles) under them. */
export const SERVED = {
  files: ['index.html'],
  folders: ['www', 'pkg', 'data', 'node_modules/uplot/dist'],
};
const INDEX = 'index.html';

/**
 * What --cors opens to other origins: the files the npm package ships (the widget's
 * modules but this server, its CSS and declarations, the wasm package, uPlot) and the
 * default corpus the widget fetches from beside them. Pages (index.html, www/*.html)
 * are not among them.
 */
export const PACKAGE_PATHS = [/^www\/(?!serve\.mjs$)[^/]+\.(mjs|d\.ts)$/, /^www\/tidepool\.css$/, /^pkg\/[^/]+$/, /^node_modules\/uplot\/dist\/[^/]+$/, /^data\/[^/]+\.txt$/];
const isPackagePath = (rel) => PACKAGE_PATHS.some((re) => re.test(rel));

export const LIMITS = { urlChars: 2048, segments: 16, segmentChars: 255 };
const LOCAL_NAMES = ['127.0.0.1', 'localhost', '[::1]'];
const ALLOW = 'GET, HEAD';

// Browsers refuse module scripts and streaming wasm compilation without the right
// Content-Type, so these must be exact. Anything else is sent as bytes.
const MIME = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.map': 'application/json; charset=utf-8',
  '.wasm': 'application/wasm',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.txt': 'text/plain; charset=utf-8',
  '.md': 'text/plain; charset=utf-8',
  '.ts': 'text/plain; charset=utf-8',
};

class Refusal extends Error {
  constructor(status, text, headers = {}) {
    super(text);
    this.status = status;
    this.headers = headers;
  }
}
const notServed = (path) =>
  new Refusal(404, `not served: ${path} (this server serves ${SERVED.files.join(', ')} and ${SERVED.folders.join('/, ')}/ only)`);

function send(res, status, text, { head = false, headers = {} } = {}) {
  res.writeHead(status, {
    'Content-Type': 'text/plain; charset=utf-8',
    'Cache-Control': 'no-store',
    'X-Content-Type-Options': 'nosniff',
    ...headers,
  });
  res.end(head ? undefined : `${text}\n`);
}

/** Refuses a Host header that does not name this machine with this port. */
function checkHost(hostHeader, port) {
  const host = (hostHeader ?? '').toLowerCase();
  const allowed = LOCAL_NAMES.flatMap((name) => (port === 80 ? [name, `${name}:80`] : [`${name}:${port}`]));
  if (!allowed.includes(host)) {
    throw new Refusal(403, `refused: Host "${hostHeader ?? ''}" is not this machine (use http://127.0.0.1:${port}/ or http://localhost:${port}/)`);
  }
}

/**
 * The request's path as checked segments: percent-decoded one segment at a time, so
 * an encoded '/' can never make a new segment, and any segment that is empty (a
 * doubled or trailing slash aside), '.', '..', a dotfile, or holds '/', '\' or NUL is
 * refused. Returns {segments, dir}: dir says the path ended with '/'.
 */
export function parsePath(url) {
  if (url.length > LIMITS.urlChars) throw new Refusal(414, `URL longer than ${LIMITS.urlChars} characters`);
  if (!url.startsWith('/')) throw new Refusal(400, 'bad request target');
  const raw = url.split(/[?#]/, 1)[0];
  const parts = raw.split('/').slice(1);
  const dir = parts.length > 0 && parts.at(-1) === '';
  if (dir) parts.pop();
  if (parts.length > LIMITS.segments) throw new Refusal(414, `more than ${LIMITS.segments} path segments`);
  const segments = parts.map((part) => {
    let s;
    try {
      s = decodeURIComponent(part);
    } catch {
      throw new Refusal(400, 'bad percent-encoding in the path');
    }
    if (s === '' || s.startsWith('.') || /[/\\\0]/.test(s) || s.length > LIMITS.segmentChars) throw notServed(raw);
    return s;
  });
  return { segments, dir };
}

/** The served area a path falls in (a file of SERVED.files or a folder of SERVED.folders), or null. */
function areaOf(rel) {
  if (SERVED.files.includes(rel)) return '';
  return SERVED.folders.find((f) => rel.startsWith(`${f}/`)) ?? null;
}

const inside = (path, dir) => path === dir || path.startsWith(dir.endsWith(sep) ? dir : dir + sep);

/**
 * Opens the file for `rel` (a '/'-joined relative path) under `root`, or throws a
 * Refusal: its real path must stay in the real path of its area, and it must be a
 * regular file. Opened non-blocking and checked on the open descriptor, so a FIFO
 * is refused instead of waited on, and nothing can be swapped in after the check.
 */
async function openServed(root, rel) {
  const area = areaOf(rel);
  if (area === null) throw notServed(`/${rel}`);
  let real;
  let areaReal;
  try {
    areaReal = await realpath(join(root, area));
    real = await realpath(join(root, rel));
  } catch {
    throw new Refusal(404, `not found: /${rel}`);
  }
  if (!inside(real, areaReal)) throw new Refusal(403, `refused: /${rel} leads outside ${area || 'the root'}/`);
  const handle = await open(real, constants.O_RDONLY | (constants.O_NONBLOCK ?? 0)).catch(() => {
    throw new Refusal(404, `not found: /${rel}`);
  });
  const info = await handle.stat().catch(() => null);
  if (info?.isFile()) return { handle, info };
  await handle.close();
  throw new Refusal(info?.isDirectory() ? 404 : 403, info?.isDirectory() ? `not found: /${rel} (no listings)` : `refused: /${rel} is not a regular file`);
}

// Changes whenever the file is rewritten or replaced (a rebuilt pkg/ gets a new inode or mtime).
const etagOf = (info) => `W/"${info.ino.toString(36)}-${info.size.toString(36)}-${info.mtimeMs.toString(36)}"`;

function matches(ifNoneMatch, etag) {
  if (!ifNoneMatch) return false;
  if (ifNoneMatch.trim() === '*') return true;
  const weak = (tag) => tag.trim().replace(/^W\//, '');
  return ifNoneMatch.split(',').some((tag) => weak(tag) === weak(etag));
}

async function handle(req, res, root, port, cors) {
  const head = req.method === 'HEAD';
  checkHost(req.headers.host, port);
  if (req.method !== 'GET' && !head) throw new Refusal(405, `method ${req.method} not allowed`, { Allow: ALLOW });
  const { segments, dir } = parsePath(req.url);
  // "/" is the page; any other path ending in "/" names a folder, and folders are not listed.
  if (dir && segments.length > 0) throw new Refusal(404, `not found: ${req.url.split(/[?#]/, 1)[0]} (no listings)`);
  const rel = segments.length ? segments.join('/') : INDEX;
  const { handle, info } = await openServed(root, rel);
  const etag = etagOf(info);
  const headers = {
    ETag: etag,
    // revalidated on every load (a rebuilt pkg/ shows on reload), answered by 304 when unchanged
    'Cache-Control': 'no-cache',
    'X-Content-Type-Options': 'nosniff',
    ...(cors && isPackagePath(rel) ? { 'Access-Control-Allow-Origin': '*' } : {}),
  };
  if (matches(req.headers['if-none-match'], etag)) {
    await handle.close();
    res.writeHead(304, headers);
    return res.end();
  }
  res.writeHead(200, {
    ...headers,
    'Content-Type': MIME[extname(rel).toLowerCase()] ?? 'application/octet-stream',
    'Content-Length': info.size,
  });
  if (head) {
    await handle.close();
    return res.end();
  }
  // pipeline, not pipe: a download aborted half way destroys the file's stream, and
  // with it closes the file (pipe would leave it open until garbage collection).
  pipeline(handle.createReadStream(), res, () => {});
}

/**
 * Serves the page from `root` over HTTP on 127.0.0.1.
 * @param {{port?: number, root?: string, host?: string, cors?: boolean}} [options] port 0 picks a
 *   free one; cors: PACKAGE_PATHS are sent with Access-Control-Allow-Origin: *
 * @returns {Promise<{url: string, port: number, close: () => Promise<void>}>}
 */
export async function startServer({ port = 8000, root = REPO_ROOT, host = '127.0.0.1', cors = false } = {}) {
  const base = resolve(root);
  let actual = port;
  const server = createServer({ maxHeaderSize: 16 * 1024 }, (req, res) => {
    handle(req, res, base, actual, cors).catch((err) => {
      if (res.headersSent) return res.destroy();
      if (err instanceof Refusal) return send(res, err.status, err.message, { head: req.method === 'HEAD', headers: err.headers });
      send(res, 500, 'internal error', { head: req.method === 'HEAD' });
    });
  });
  await new Promise((ok, fail) => {
    server.once('error', fail);
    server.listen(port, host, ok);
  });
  actual = server.address().port;
  return {
    url: `http://${host.includes(':') ? `[${host}]` : host}:${actual}/`,
    port: actual,
    close: () =>
      new Promise((ok) => {
        server.close(() => ok());
        server.closeAllConnections?.();
      }),
  };
}

function parseArgs(argv) {
  const opts = {};
  for (let i = 0; i < argv.length; i++) {
    const [key, inline] = argv[i].split('=', 2);
    const value = () => inline ?? argv[++i];
    if (key === '--port' || key === '-p') opts.port = Number(value());
    else if (key === '--root') opts.root = value();
    else if (key === '--cors' && inline === undefined) opts.cors = true;
    else if (key === '--help' || key === '-h') {
      console.log('usage: node www/serve.mjs [--port 8000] [--root DIR] [--cors]');
      console.log('  --cors  send Access-Control-Allow-Origin: * with the package files, so pages on other origins can embed the trainer');
      process.exit(0);
    } else {
      console.error(`serve.mjs: unknown argument ${argv[i]}`);
      process.exit(2);
    }
  }
  if (opts.port !== undefined && !(Number.isInteger(opts.port) && opts.port >= 0 && opts.port < 65536)) {
    console.error('serve.mjs: --port needs a number from 0 to 65535');
    process.exit(2);
  }
  return opts;
}

/**
 * What the page would miss under `root`: an error for a root without index.html, and
 * warnings for the builds the page loads (pkg/ from `make pkg`, uPlot from
 * `make setup-web`; `make demo` runs both), so a missing one is named at start-up
 * rather than as a broken page.
 */
export async function checkRoot(root) {
  const has = async (rel) => {
    try {
      await access(join(root, rel));
      return true;
    } catch {
      return false;
    }
  };
  if (!(await has(INDEX))) return { error: `${root} has no ${INDEX}: --root must be the repository's folder` };
  const warnings = [];
  if (!(await has('pkg/tidepool_bg.wasm'))) warnings.push('pkg/ has no wasm build yet: `make pkg` builds it (`make demo` builds and serves)');
  if (!(await has('node_modules/uplot/dist'))) warnings.push('node_modules/uplot is missing: `make setup-web` installs it (`make demo` does too)');
  return { warnings };
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const opts = parseArgs(process.argv.slice(2));
  const { error, warnings = [] } = await checkRoot(resolve(opts.root ?? REPO_ROOT));
  if (error) {
    console.error(`serve.mjs: ${error}`);
    process.exit(2);
  }
  for (const w of warnings) console.error(`serve.mjs: warning: ${w}`);
  try {
    const { url } = await startServer(opts);
    console.log(`tidepool: serving the page from ${opts.root ?? REPO_ROOT} at ${url}  (Ctrl+C stops)`);
    if (opts.cors) console.log(`tidepool: --cors: other origins may load the package: <script type="module" src="${url}www/tidepool.mjs"></script>`);
  } catch (err) {
    const hint = err.code === 'EADDRINUSE' ? ' (in use: pick another with --port or PORT=... make demo)' : '';
    console.error(`serve.mjs: cannot listen on port ${opts.port ?? 8000}${hint}: ${err.message}`);
    process.exit(1);
  }
}

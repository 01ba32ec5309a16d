#!/usr/bin/env node
// A small static server for the tidepool page: serves the repository root on
// 127.0.0.1 so that index.html, www/, pkg/ (the wasm package) and
// node_modules/uplot load from one origin. No dependencies, no CDN.
//
//   node www/serve.mjs [--port 8000] [--root DIR]
//
// The end-to-end tests import startServer() and run it on a free port.

import { createServer } from 'node:http';
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { extname, join, normalize, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const REPO_ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));

// Browsers refuse module scripts and streaming wasm compilation without the
// right Content-Type, so these must be exact.
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
  '.jpg': 'image/jpeg',
  '.jpeg': 'image/jpeg',
  '.gif': 'image/gif',
  '.ico': 'image/x-icon',
  '.webp': 'image/webp',
  '.txt': 'text/plain; charset=utf-8',
  '.md': 'text/plain; charset=utf-8',
  '.ts': 'text/plain; charset=utf-8',
  '.wgsl': 'text/plain; charset=utf-8',
};

function send(res, status, text, head) {
  res.writeHead(status, { 'Content-Type': 'text/plain; charset=utf-8', 'Cache-Control': 'no-store' });
  res.end(head ? undefined : text);
}

/**
 * Serves `root` over HTTP on 127.0.0.1.
 * @param {{port?: number, root?: string, host?: string}} [options] port 0 picks a free one
 * @returns {Promise<{url: string, port: number, close: () => Promise<void>}>}
 */
export async function startServer({ port = 8000, root = REPO_ROOT, host = '127.0.0.1' } = {}) {
  const base = resolve(root);
  const server = createServer(async (req, res) => {
    const head = req.method === 'HEAD';
    if (req.method !== 'GET' && !head) return send(res, 405, 'method not allowed\n', head);
    let path;
    try {
      path = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    } catch {
      return send(res, 400, 'bad request\n', head);
    }
    // normalize() folds any "..", and the prefix check keeps requests inside root.
    let file = join(base, normalize(path));
    if (file !== base && !file.startsWith(base + sep)) return send(res, 403, 'forbidden\n', head);
    try {
      let info = await stat(file);
      if (info.isDirectory()) {
        // "/www" -> "/www/" so that relative URLs in its index resolve correctly
        if (!path.endsWith('/')) {
          res.writeHead(301, { Location: path + '/' });
          return res.end();
        }
        file = join(file, 'index.html');
        info = await stat(file);
      }
      res.writeHead(200, {
        'Content-Type': MIME[extname(file).toLowerCase()] ?? 'application/octet-stream',
        'Content-Length': info.size,
        // a rebuilt pkg/ must be picked up on reload, so the browser revalidates every time
        'Cache-Control': 'no-cache',
        'X-Content-Type-Options': 'nosniff',
      });
      if (head) return res.end();
      createReadStream(file).on('error', () => res.destroy()).pipe(res);
    } catch {
      send(res, 404, `not found: ${path}\n`, head);
    }
  });
  await new Promise((ok, fail) => {
    server.once('error', fail);
    server.listen(port, host, ok);
  });
  const actual = server.address().port;
  return {
    url: `http://${host}:${actual}/`,
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
    else if (key === '--help' || key === '-h') {
      console.log('usage: node www/serve.mjs [--port 8000] [--root DIR]');
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

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const opts = parseArgs(process.argv.slice(2));
  try {
    const { url } = await startServer(opts);
    console.log(`tidepool: serving ${opts.root ?? REPO_ROOT} at ${url}  (Ctrl+C stops)`);
  } catch (err) {
    const hint = err.code === 'EADDRINUSE' ? ' (in use: pick another with --port or PORT=... make demo)' : '';
    console.error(`serve.mjs: cannot listen on port ${opts.port ?? 8000}${hint}: ${err.message}`);
    process.exit(1);
  }
}

// The browser soak: a trainer in headless Chromium (WebGPU; SwiftShader on a machine
// without a GPU) trains for a long run with evaluations and samples on, and every
// `--every` steps the bytes the pool holds, the buffers and bind groups created so
// far, the wasm memory and the JS heap are read: after warm-up they stay flat.
// Prints a Markdown table (BENCHMARKS.md's soak table), or JSON with --json; --out
// FILE also writes the JSON there. Exits 1 when a figure moved after the first row.
//   node scripts/soak-browser.mjs [--preset tiny] [--batch N] [--context N] [--steps 5000]
//                                 [--every 500] [--at-once 16] [--in-flight 2]
//                                 [--eval-every 100] [--eval-batches 8]
//                                 [--sample-every 500] [--sample-length 64] [--json] [--out FILE]
// Needs pkg/ (make pkg) and the npm packages (scripts/setup.sh web). $CHROMIUM: the
// browser (default /usr/bin/chromium); $CHROMIUM_ARGS: flags added to its own.
import { readFileSync } from 'node:fs';
import { chromium } from 'playwright-core';
import { startServer } from '../www/serve.mjs';
import { soak } from './soak-loop.mjs';
import { report, soakArgs } from './soak-options.mjs';

const args = soakArgs({
  preset: 'tiny',
  steps: '5000',
  every: '500',
  'at-once': '16',
  'in-flight': '2',
  'eval-every': '100',
  'eval-batches': '8',
  'sample-every': '500',
  'sample-length': '64',
});
const { opt } = args;

const root = new URL('..', import.meta.url).pathname;
const server = await startServer({ port: 0, root });
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  headless: true,
  args: [
    '--enable-unsafe-webgpu',
    '--no-sandbox',
    '--disable-dev-shm-usage',
    '--enable-precise-memory-info',
    '--js-flags=--expose-gc',
    ...(process.env.CHROMIUM_ARGS ?? '').split(' ').filter(Boolean),
  ],
});
const version = browser.version();
let result;
try {
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(`${server.url}www/blank.html`);
  const corpus = readFileSync(new URL('../data/tinyshakespeare.txt', import.meta.url), 'utf8');
  result = await page.evaluate(soak, { ...opt, pkg: '/pkg/tidepool.js', corpus });
  if (errors.length) throw new Error(`page errors: ${errors.join('; ')}`);
} finally {
  await browser.close();
  await server.close();
}
report(`Chromium ${version}`, result, args);

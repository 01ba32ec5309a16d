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
import { readFileSync, writeFileSync } from 'node:fs';
import { cpus, hostname } from 'node:os';
import { parseArgs } from 'node:util';
import { chromium } from 'playwright-core';
import { startServer } from '../www/serve.mjs';
import { flatAfterWarmUp, soak, table } from './soak-loop.mjs';
import { soakOptions } from './soak-options.mjs';

const { values } = parseArgs({
  options: {
    preset: { type: 'string', default: 'tiny' },
    batch: { type: 'string' },
    context: { type: 'string' },
    steps: { type: 'string', default: '5000' },
    every: { type: 'string', default: '500' },
    'at-once': { type: 'string', default: '16' },
    'in-flight': { type: 'string', default: '2' },
    'eval-every': { type: 'string', default: '100' },
    'eval-batches': { type: 'string', default: '8' },
    'sample-every': { type: 'string', default: '500' },
    'sample-length': { type: 'string', default: '64' },
    json: { type: 'boolean', default: false },
    out: { type: 'string' },
  },
});
const opt = soakOptions(values);

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
const failures = flatAfterWarmUp(result.rows);
const report = {
  bench: 'soak',
  runtime: `Chromium ${browser.version()}`,
  adapter: result.adapter,
  machine: `${hostname()}, ${cpus().length} cores`,
  date: new Date().toISOString().slice(0, 10),
  options: opt,
  rows: result.rows,
  flat: failures.length === 0,
  failures,
};
if (values.out) writeFileSync(values.out, `${JSON.stringify(report, null, 1)}\n`);
if (values.json) console.log(JSON.stringify(report));
else {
  console.log(`soak: ${opt.preset} (batch ${opt.batch ?? 'preset'}, context ${opt.context ?? 'preset'}), ${opt.steps} steps, ${report.runtime}, ${JSON.stringify(result.adapter)}`);
  console.log(table(result.rows));
  console.log(failures.length ? `NOT FLAT:\n${failures.join('\n')}` : 'flat after warm-up');
}
process.exit(failures.length ? 1 : 0);

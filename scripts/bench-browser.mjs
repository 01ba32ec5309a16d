// Runs the wasm build's benchmarks in headless Chromium (WebGPU; SwiftShader on a
// machine without a GPU) and prints a table, or JSON lines with --json.
//   node scripts/bench-browser.mjs [pool|step|kernels|policies] [--preset tiny] [--steps 10] [--warmup 3] [--json]
// Needs pkg/ (make pkg) and the npm packages (scripts/setup.sh web).
import { parseArgs } from 'node:util';
import { chromium } from 'playwright-core';
import { startServer } from '../www/serve.mjs';

const { values: opt, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    preset: { type: 'string', default: 'tiny' },
    steps: { type: 'string', default: '10' },
    warmup: { type: 'string', default: '3' },
    batches: { type: 'string', default: '50' },
    json: { type: 'boolean', default: false },
  },
});
const which = positionals[0] ?? 'step';
if (!['pool', 'step', 'kernels', 'policies'].includes(which)) {
  console.error(`unknown benchmark ${which}: pool, step, kernels or policies`);
  process.exit(2);
}

const server = await startServer({ port: 0 });
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  args: ['--enable-unsafe-webgpu', '--no-sandbox', '--disable-dev-shm-usage',
    '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
});
try {
  const page = await browser.newPage();
  await page.goto(`${server.url}www/blank.html`);
  const result = await page.evaluate(async ({ which, opt }) => {
    const m = await import('/pkg/tidepool.js');
    await m.default();
    // The wasm does not embed the default corpus: fetch it as the page does.
    const corpus = await (await fetch(`/${m.defaultCorpusPath()}`)).text();
    const probe = await m.Trainer.create({ preset: 'tiny' }, corpus);
    const info = probe.adapter();
    probe.free();
    if (which === 'pool') return { info, rows: await m.benchPool(Number(opt.batches)) };
    // GPU ms per kernel: needs timestamp-query, which Chromium rounds to 100 µs
    // unless started with --enable-dawn-features=allow_unsafe_apis.
    if (which === 'kernels') return { info, rows: await m.benchKernels(opt.preset, Number(opt.warmup), Number(opt.steps), corpus) };
    if (which === 'policies') return { info, rows: await m.benchPolicies(opt.preset, Number(opt.warmup), Number(opt.steps), corpus) };
    return { info, rows: await m.benchStep(opt.preset, Number(opt.warmup), Number(opt.steps), corpus) };
  }, { which, opt });
  const adapter = `${result.info.name} (${result.info.backend}, Chromium)`;
  if (opt.json) {
    console.log(JSON.stringify({ adapter, bench: which }));
    for (const row of result.rows) console.log(JSON.stringify(row));
  } else {
    console.log(`adapter: ${adapter}`);
    console.table(result.rows);
  }
} finally {
  await browser.close();
  await server.close();
}

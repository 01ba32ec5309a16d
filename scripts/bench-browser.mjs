// Runs the wasm build's benchmarks in headless Chromium (WebGPU; SwiftShader on a
// machine without a GPU) and prints a table, or JSON lines with --json.
//   node scripts/bench-browser.mjs [pool|step|kernels|policies|record|readback] [--preset tiny] [--steps 10] [--warmup 3]
//                                  [--at-once 16] [--json]
// Needs pkg/ (make pkg) and the npm packages (scripts/setup.sh web). $CHROMIUM: the
// browser (default /usr/bin/chromium); $CHROMIUM_ARGS: flags added to its own.
//
// `record`: a trainer's calls of `--at-once` steps (`steps` calls timed after `warmup`),
// and of each step the host's part, `record_ms`: the page's time to record and submit
// the step's work, a page's share of a step that is bound by its host. The page is
// served cross-origin isolated here (COOP and COEP headers), which makes
// `performance.now()` tick in microseconds, not 100 of them. Beside it
// `VK_ICD_FILENAMES=/usr/lib/chromium/vk_swiftshader_icd.json node
// scripts/bench-dawn.mjs --at-once 16` records the same build on the same SwiftShader
// through Dawn in Node.js, the yardstick the H200 can run, which validates every call
// on the caller's thread, behind Node's C++ bindings. A page only serializes its calls;
// Chromium's GPU process validates them beside it.
//
// `readback`: a readback's round trip on an idle GPU, `steps` of them after `warmup`
// (scripts/readback.mjs; `bench-dawn.mjs --readback` times the same in Node.js): what
// a call of several steps pays once, at its end.
import { parseArgs } from 'node:util';
import { chromium } from 'playwright-core';
import { startServer } from '../www/serve.mjs';
import { readbackRoundTrips } from './readback.mjs';

const { values: opt, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    preset: { type: 'string', default: 'tiny' },
    steps: { type: 'string', default: '10' },
    warmup: { type: 'string', default: '3' },
    batches: { type: 'string', default: '50' },
    'at-once': { type: 'string', default: '16' },
    json: { type: 'boolean', default: false },
  },
});
const which = positionals[0] ?? 'step';
if (!['pool', 'step', 'kernels', 'policies', 'record', 'readback'].includes(which)) {
  console.error(`unknown benchmark ${which}: pool, step, kernels, policies, record or readback`);
  process.exit(2);
}
for (const [name, lo, hi] of [['steps', 1, 100_000], ['warmup', 0, 100_000], ['batches', 1, 100_000], ['at-once', 1, 1024]]) {
  const n = Number(opt[name]);
  if (!Number.isInteger(n) || n < lo || n > hi) {
    console.error(`--${name} must be a whole number from ${lo} to ${hi}, got ${opt[name]}`);
    process.exit(2);
  }
}

const server = await startServer({ port: 0 });
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  args: ['--enable-unsafe-webgpu', '--no-sandbox', '--disable-dev-shm-usage',
    '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run',
    // More flags, space-separated (e.g. what puts WebGPU on a real GPU: gpu-run.sh browser18).
    ...(process.env.CHROMIUM_ARGS ?? '').split(' ').filter(Boolean)],
});
try {
  const page = await browser.newPage();
  const isolated = which === 'record' || which === 'readback';
  if (isolated) {
    // Cross-origin isolated: microsecond timers (the served files are all same-origin).
    await page.route('**/*', async (route) => {
      const response = await route.fetch();
      const isolation = { 'cross-origin-opener-policy': 'same-origin', 'cross-origin-embedder-policy': 'require-corp' };
      await route.fulfill({ response, headers: { ...response.headers(), ...isolation } });
    });
  }
  await page.goto(`${server.url}www/blank.html`);
  if (isolated && !(await page.evaluate(() => crossOriginIsolated))) {
    throw new Error('the page is not cross-origin isolated: its timers would tick in 100 µs');
  }
  const timed = { warmup: Number(opt.warmup), count: Number(opt.steps) };
  const result = which === 'readback'
    ? await page.evaluate(readbackRoundTrips, timed).then((row) => ({ info: { name: row.vendor, backend: 'webgpu' }, rows: [row] }))
    : await page.evaluate(async ({ which, opt }) => {
    const m = await import('/pkg/tidepool.js');
    await m.default();
    // The wasm does not embed the default corpus: fetch it as the page does.
    const corpus = await (await fetch(`/${m.defaultCorpusPath()}`)).text();
    // On the H200, headless Chromium's requestAdapter resolves to null now and then
    // (its console: "A valid external Instance reference no longer exists"): a
    // trainer whose device was refused so is built again, up to 10 times.
    let retries = 0;
    const create = async (config) => {
      for (;;) {
        try {
          return await m.Trainer.create(config, corpus);
        } catch (e) {
          if (e.kind !== 'no_webgpu' || retries >= 9) throw e;
          retries += 1;
          await new Promise((ok) => setTimeout(ok, 500));
        }
      }
    };
    const probe = await create({ preset: 'tiny' });
    const info = probe.adapter();
    probe.free();
    if (which === 'pool') return { info, rows: await m.benchPool(Number(opt.batches)) };
    // GPU ms per kernel: needs timestamp-query, which Chromium rounds to 100 µs
    // unless started with --enable-dawn-features=allow_unsafe_apis.
    if (which === 'kernels') return { info, rows: await m.benchKernels(opt.preset, Number(opt.warmup), Number(opt.steps), corpus) };
    if (which === 'policies') return { info, rows: await m.benchPolicies(opt.preset, Number(opt.warmup), Number(opt.steps), corpus) };
    if (which === 'record') return { info, rows: [{ ...(await recordCalls(opt)), adapter_retries: retries }] };
    return { info, rows: await m.benchStep(opt.preset, Number(opt.warmup), Number(opt.steps), corpus) };

    // Medians over the timed calls of one trainer, each call's last step, as
    // bench-dawn.mjs takes them (a step's ms is its call's over its steps).
    async function recordCalls(opt) {
      const atOnce = Number(opt['at-once']);
      const trainer = await create({ preset: opt.preset });
      const call = async () => {
        const start = performance.now();
        const stats = atOnce > 1 ? await trainer.steps(atOnce) : [await trainer.step()];
        return { ...stats[stats.length - 1], wall_ms: (performance.now() - start) / atOnce };
      };
      for (let i = 0; i < Number(opt.warmup); i++) await call();
      const calls = [];
      for (let i = 0; i < Number(opt.steps); i++) calls.push(await call());
      trainer.free();
      const median = (key) => calls.map((c) => c[key]).sort((a, b) => a - b)[Math.floor(calls.length / 2)];
      const dispatches = median('dispatches_step');
      return {
        preset: opt.preset, at_once: atOnce, steps: calls.length * atOnce,
        median_ms: median('ms'), median_wall_ms: median('wall_ms'), median_record_ms: median('record_ms'),
        dispatches_step: dispatches, record_us_a_dispatch: (1e3 * median('record_ms')) / dispatches,
      };
    }
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

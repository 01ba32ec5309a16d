// Runs the wasm build's benchmarks in headless Chromium (WebGPU; SwiftShader on a
// machine without a GPU) and prints a table, or JSON lines with --json.
//   node scripts/bench-browser.mjs [pool|step|kernels|policies|record|readback] [--preset tiny] [--steps 10] [--warmup 3]
//                                  [--at-once 16] [--in-flight 1] [--json]
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
// `--in-flight 2` (record): the next call starts before the last one resolves, as the
// page's worker trains; each call's `ms` then counts from the end of the one before.
//
// `page`: the page's own training loop (www/worker.mjs, mounted in a blank page with
// evaluation and samples off), `--at-once` steps a call at most, one call in flight
// or two (`--in-flight`, the worker's schedule.overlap): the median of the steps'
// `ms`, the wall time a step over the timed steps as the page received them, and
// quantiles of each call's wall time a step (by the arrival of its last step).
// `--hidden`: the widget in a `display: none` box, so nothing is drawn. `--batch-ms`:
// the worker's schedule.batchMs (the page's default, 16 ms, without it).
//
// `readback`: a readback's latency on an idle GPU, `steps` of them after `warmup`
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
    'in-flight': { type: 'string', default: '1' },
    hidden: { type: 'boolean', default: false },
    'batch-ms': { type: 'string' },
    json: { type: 'boolean', default: false },
  },
});
const which = positionals[0] ?? 'step';
if (!['pool', 'step', 'kernels', 'policies', 'record', 'readback', 'page'].includes(which)) {
  console.error(`unknown benchmark ${which}: pool, step, kernels, policies, record, readback or page`);
  process.exit(2);
}
for (const [name, lo, hi] of [['steps', 1, 100_000], ['warmup', 0, 100_000], ['batches', 1, 100_000], ['at-once', 1, 1024], ['in-flight', 1, 2]]) {
  const n = Number(opt[name]);
  if (!Number.isInteger(n) || n < lo || n > hi) {
    console.error(`--${name} must be a whole number from ${lo} to ${hi}, got ${opt[name]}`);
    process.exit(2);
  }
}

// `page`: the worker's training loop as the page runs it, timed by its step events.
async function pageLoop(page, opt) {
  const [warmup, timed] = [Number(opt.warmup), Number(opt.steps)].map((calls) => calls * Number(opt['at-once']));
  return page.evaluate(async ({ preset, atOnce, overlap, warmup, timed, hidden, batchMs }) => {
    const { mount } = await import('/www/tidepool.mjs');
    const el = document.body.appendChild(document.createElement('div'));
    if (hidden) el.style.display = 'none';
    const schedule = { maxAtOnce: atOnce, overlap, evalEvery: 0, sampleLength: 0, maxSteps: warmup + timed + 1 };
    if (batchMs) schedule.batchMs = batchMs;
    const seen = [];
    const finished = new Promise((done, fail) => {
      el.addEventListener('tidepool:step', (e) => {
        seen.push({ step: e.detail.step, ms: e.detail.ms, at: performance.now() });
        if (seen.length === warmup + timed) done();
      });
      el.addEventListener('tidepool:error', (e) => fail(new Error(`${e.detail.kind}: ${e.detail.message}`)));
    });
    const widget = mount(el, { preset, schedule, autostart: false });
    const ready = () => /\(/.test(el.querySelector('[data-testid="adapter"]')?.textContent ?? '');
    while (!ready()) await new Promise((ok) => setTimeout(ok, 100));
    (el.tidepool ?? widget).start();
    await finished;
    const steps = seen.slice(warmup);
    const sorted = (xs) => [...xs].sort((a, b) => a - b);
    const ms = sorted(steps.map((s) => s.ms));
    const wall = steps.at(-1).at - seen[warmup - 1].at;
    // a call's steps share one ms value (its time over its steps) and arrive together
    const ends = [warmup - 1];
    for (let i = warmup; i < seen.length; i++) if (i + 1 === seen.length || seen[i + 1].ms !== seen[i].ms) ends.push(i);
    const perCall = sorted(ends.slice(1).map((e, k) => (seen[e].at - seen[ends[k]].at) / (e - ends[k])));
    const q = (xs, f) => xs[Math.min(xs.length - 1, Math.floor(f * xs.length))];
    return {
      info: { name: el.querySelector('[data-testid="adapter"]').textContent, backend: 'webgpu' },
      rows: [{
        preset, at_once: atOnce, in_flight: overlap ? 2 : 1, hidden, batch_ms: batchMs ?? null, steps: steps.length, calls: perCall.length,
        median_ms: q(ms, 0.5), wall_ms: wall / steps.length,
        call_wall_ms: { p10: q(perCall, 0.1), p50: q(perCall, 0.5), p90: q(perCall, 0.9), max: perCall.at(-1) },
      }],
    };
  }, { preset: opt.preset, atOnce: Number(opt['at-once']), overlap: Number(opt['in-flight']) > 1, warmup, timed, hidden: opt.hidden, batchMs: opt['batch-ms'] === undefined ? undefined : Number(opt['batch-ms']) });
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
  const isolated = which === 'record' || which === 'readback' || which === 'page';
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
    : which === 'page'
    ? await pageLoop(page, opt)
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
    // GPU ms per kernel: needs timestamp-query, which Chromium quantizes to 100 µs
    // unless started with --enable-dawn-features=allow_unsafe_apis.
    if (which === 'kernels') return { info, rows: await m.benchKernels(opt.preset, Number(opt.warmup), Number(opt.steps), corpus) };
    if (which === 'policies') return { info, rows: await m.benchPolicies(opt.preset, Number(opt.warmup), Number(opt.steps), corpus) };
    if (which === 'record') return { info, rows: [{ ...(await recordCalls(opt)), adapter_retries: retries }] };
    return { info, rows: await m.benchStep(opt.preset, Number(opt.warmup), Number(opt.steps), corpus) };

    // Medians over the timed calls of one trainer, each call's last step, as
    // bench-dawn.mjs takes them (a step's ms is its call's over its steps).
    async function recordCalls(opt) {
      const [atOnce, inFlight] = [Number(opt['at-once']), Number(opt['in-flight'])];
      const trainer = await create({ preset: opt.preset });
      const call = async () => {
        const start = performance.now();
        const stats = atOnce > 1 || inFlight > 1 ? await trainer.steps(atOnce) : [await trainer.step()];
        return { ...stats[stats.length - 1], wall_ms: (performance.now() - start) / atOnce };
      };
      // `count` calls, each started while up to inFlight - 1 before it are unresolved
      const calls = async (count) => {
        const done = [];
        const pending = [];
        for (let i = 0; i < count; i++) {
          if (pending.length === inFlight) done.push(await pending.shift());
          pending.push(call());
        }
        for (const p of pending) done.push(await p);
        return done;
      };
      await calls(Number(opt.warmup));
      const timed = await calls(Number(opt.steps));
      trainer.free();
      const median = (key) => timed.map((c) => c[key]).sort((a, b) => a - b)[Math.floor(timed.length / 2)];
      const dispatches = median('dispatches_step');
      return {
        preset: opt.preset, at_once: atOnce, in_flight: inFlight, steps: timed.length * atOnce,
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

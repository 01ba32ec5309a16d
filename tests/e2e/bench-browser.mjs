// Step time in the browser, pool on against pool off, and the wasm package's size.
// Not a test (node --test skips this name): run it by hand after `make pkg`:
//   node tests/e2e/bench-browser.mjs [--preset tiny] [--steps 40] [--warmup 5]
// Headless Chromium here runs WebGPU on SwiftShader, a CPU rasteriser: its times say
// how the two compare on this machine, not what a GPU does.
// Prints a Markdown table, then one line of JSON.

import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { ROOT, open, setup, waitReady } from './helpers.mjs';

const args = Object.fromEntries(
  process.argv.slice(2).reduce((pairs, a, i, all) => (a.startsWith('--') ? [...pairs, [a.slice(2), all[i + 1]]] : pairs), []),
);
const preset = args.preset ?? 'tiny';
const steps = Number(args.steps ?? 40);
const warmup = Number(args.warmup ?? 5);

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

async function run(env, pool) {
  const { page } = await open(env, '');
  await waitReady(page);
  const stats = await page.evaluate(
    ({ preset, pool, total }) =>
      new Promise((done, fail) => {
        const root = document.querySelector('.tp');
        const seen = [];
        root.querySelector('select[data-ref="preset"]').value = preset;
        root.addEventListener('tidepool:error', (e) => fail(new Error(e.detail.message)));
        root.addEventListener('tidepool:step', (e) => {
          seen.push(e.detail);
          if (seen.length === total) {
            root.tidepool.pause();
            done(seen);
          }
        });
        root.addEventListener(
          'tidepool:created',
          () => root.tidepool.start(),
          { once: true },
        );
        root.tidepool.setPool(pool); // rebuilds the trainer with this preset and pool
      }),
    { preset, pool, total: warmup + steps },
  );
  await page.close();
  const measured = stats.slice(warmup);
  return {
    pool,
    steps: measured.length,
    median_ms: +median(measured.map((s) => s.ms)).toFixed(2),
    mean_ms: +(measured.reduce((a, s) => a + s.ms, 0) / measured.length).toFixed(2),
    tokens_per_s: Math.round(median(measured.map((s) => s.tokens_per_s))),
    buffers_created_per_step: +(measured.reduce((a, s) => a + s.buffers_created_step, 0) / measured.length).toFixed(2),
    hit_rate: +(measured.reduce((a, s) => a + s.step_hit_rate, 0) / measured.length).toFixed(4),
    final_loss: +measured.at(-1).loss.toFixed(4),
  };
}

function packageSize() {
  const out = {};
  for (const file of ['tidepool_bg.wasm', 'tidepool.js']) {
    const bytes = readFileSync(join(ROOT, 'pkg', file));
    out[file] = { raw: statSync(join(ROOT, 'pkg', file)).size, gzip: gzipSync(bytes, { level: 9 }).length };
  }
  return out;
}

const env = await setup();
let adapter = '';
try {
  const results = [];
  for (const pool of [true, false]) {
    results.push(await run(env, pool));
  }
  const { page } = await open(env, '');
  await waitReady(page);
  adapter = await page.locator('[data-testid="adapter"]').innerText();
  const size = packageSize();
  console.log(`Browser step time, preset ${preset}, ${steps} steps after ${warmup} warm-up, ${adapter}, headless Chromium`);
  console.log('');
  console.log('| pool | median ms/step | mean ms/step | tokens/s | buffers created/step | hit rate |');
  console.log('| --- | ---: | ---: | ---: | ---: | ---: |');
  for (const r of results) {
    console.log(`| ${r.pool ? 'on' : 'off'} | ${r.median_ms} | ${r.mean_ms} | ${r.tokens_per_s} | ${r.buffers_created_per_step} | ${r.hit_rate} |`);
  }
  console.log('');
  console.log('| file | raw bytes | gzip -9 bytes |');
  console.log('| --- | ---: | ---: |');
  for (const [file, s] of Object.entries(size)) console.log(`| pkg/${file} | ${s.raw} | ${s.gzip} |`);
  console.log('');
  console.log(JSON.stringify({ preset, steps, warmup, adapter, results, package: size }));
} finally {
  await env.close();
}

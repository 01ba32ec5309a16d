// The driver behind scripts/bench-cpu.sh (read its header for what it measures and how):
// a `tiny` training step of two builds side by side, natively on the default adapter
// and in headless Chromium, taking turns.
//   node scripts/bench-cpu.mjs --old-bin B --new-bin B --old-pkg D --new-pkg D
//     [--repeats 5] [--steps 8] [--warmup 3] [--only native|browser] [--json-out FILE]
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { chromium } from 'playwright-core';
import { startServer } from '../www/serve.mjs';

const REPO = resolve(fileURLToPath(new URL('..', import.meta.url)));
const { values: opt } = parseArgs({
  options: {
    'old-bin': { type: 'string' },
    'new-bin': { type: 'string' },
    'old-pkg': { type: 'string' },
    'new-pkg': { type: 'string' },
    repeats: { type: 'string', default: '5' },
    steps: { type: 'string', default: '8' },
    warmup: { type: 'string', default: '3' },
    only: { type: 'string', default: '' },
    'json-out': { type: 'string', default: '' },
  },
});
const count = (name, max) => {
  const n = Number(opt[name]);
  if (!Number.isInteger(n) || n < 1 || n > max) {
    console.error(`bench-cpu: --${name} must be a whole number from 1 to ${max}, not ${opt[name]}`);
    process.exit(2);
  }
  return n;
};
const repeats = count('repeats', 100);
const steps = count('steps', 1000);
const warmup = count('warmup', 100);
if (!['', 'native', 'browser'].includes(opt.only)) {
  console.error(`bench-cpu: --only is native or browser, not ${opt.only}`);
  process.exit(2);
}
const BUILDS = ['old', 'new'];

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

/** Repeat r runs the builds in this order: old first in even repeats, new first in odd. */
const order = (r) => (r % 2 ? ['new', 'old'] : ['old', 'new']);

/** Median ms of the default step (`pool + belt uploads`) from one `tidepool bench step`. */
function nativeRepeat(bin) {
  const args = ['bench', 'step', '--presets', 'tiny', '--steps', String(steps), '--warmup', String(warmup), '--json'];
  const run = spawnSync(bin, args, { encoding: 'utf8', maxBuffer: 1 << 24 });
  if (run.status !== 0) throw new Error(`${bin} ${args.join(' ')} failed (${run.status}): ${run.stderr}`);
  const lines = run.stdout.trim().split('\n').map((l) => JSON.parse(l));
  const row = lines.find((l) => l.variant === 'pool + belt uploads');
  if (!row) throw new Error(`${bin}: no 'pool + belt uploads' row in ${run.stdout}`);
  return { adapter: lines[0].adapter, ms: row.median_ms };
}

function native() {
  const perRepeat = { old: [], new: [] };
  let adapter = '';
  for (let r = 0; r < repeats; r++) {
    for (const b of order(r)) {
      const res = nativeRepeat(opt[`${b}-bin`]);
      adapter = res.adapter;
      perRepeat[b].push(res.ms);
    }
    console.error(`native repeat ${r + 1}/${repeats}: old ${perRepeat.old.at(-1).toFixed(1)} ms, new ${perRepeat.new.at(-1).toFixed(1)} ms`);
  }
  return { target: 'native', adapter, perRepeat };
}

/** A served root whose pkg/ is `pkg` (the page's www/ and data/ beside it). */
function servedRoot(pkg) {
  const root = mkdtempSync(join(tmpdir(), 'bench-cpu-'));
  symlinkSync(resolve(pkg), join(root, 'pkg'));
  symlinkSync(join(REPO, 'www'), join(root, 'www'));
  symlinkSync(join(REPO, 'data'), join(root, 'data'));
  return root;
}

async function browser() {
  const corpus = readFileSync(join(REPO, 'data', 'tinyshakespeare.txt'), 'utf8');
  const roots = {};
  const servers = {};
  for (const b of BUILDS) {
    roots[b] = servedRoot(opt[`${b}-pkg`]);
    servers[b] = await startServer({ port: 0, root: roots[b] });
  }
  const chrome = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    args: ['--enable-unsafe-webgpu', '--no-sandbox', '--disable-dev-shm-usage',
      '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
  try {
    // One page a build, each with its own trainer on its own WebGPU device; the
    // driver steps them in turns, so at most one runs at a time.
    const pages = {};
    let adapter = '';
    for (const b of BUILDS) {
      const page = await chrome.newPage();
      page.on('pageerror', (e) => console.error(`${b} page: ${e.message}`));
      // Errors only (a panic's message lands here), not the favicon's 404.
      page.on('console', (m) => m.type() === 'error' && !m.text().startsWith('Failed to load resource')
        && console.error(`${b} console: ${m.text()}`));
      await page.goto(`${servers[b].url}www/blank.html`);
      adapter = await page.evaluate(async (corpus) => {
        const m = await import('/pkg/tidepool.js');
        await m.default();
        globalThis.trainer = await m.Trainer.create({ preset: 'tiny' }, corpus);
        globalThis.timedStep = async () => {
          const t0 = performance.now();
          await globalThis.trainer.step();
          return performance.now() - t0;
        };
        const info = globalThis.trainer.adapter();
        return `${info.name} (${info.backend}, Chromium)`;
      }, corpus);
      pages[b] = page;
    }
    for (let i = 0; i < warmup; i++) {
      for (const b of BUILDS) await pages[b].evaluate(() => globalThis.timedStep());
    }
    const perRepeat = { old: [], new: [] };
    for (let r = 0; r < repeats; r++) {
      const ms = { old: [], new: [] };
      // Within a repeat the builds alternate step by step, the first of each pair
      // swapping from repeat to repeat.
      for (let s = 0; s < steps; s++) {
        for (const b of order(r + s)) ms[b].push(await pages[b].evaluate(() => globalThis.timedStep()));
      }
      for (const b of BUILDS) perRepeat[b].push(median(ms[b]));
      console.error(`browser repeat ${r + 1}/${repeats}: old ${perRepeat.old.at(-1).toFixed(1)} ms, new ${perRepeat.new.at(-1).toFixed(1)} ms`);
    }
    return { target: 'browser', adapter, perRepeat };
  } finally {
    await chrome.close();
    for (const b of BUILDS) {
      await servers[b].close();
      rmSync(roots[b], { recursive: true, force: true });
    }
  }
}

function summary({ target, adapter, perRepeat }) {
  const ratios = perRepeat.old.map((o, i) => o / perRepeat.new[i]);
  const med = { old: median(perRepeat.old), new: median(perRepeat.new) };
  return {
    target,
    adapter,
    repeats,
    steps_per_repeat: steps,
    old_ms: med.old,
    new_ms: med.new,
    ratio: med.old / med.new,
    old_ms_range: [Math.min(...perRepeat.old), Math.max(...perRepeat.old)],
    new_ms_range: [Math.min(...perRepeat.new), Math.max(...perRepeat.new)],
    ratio_range: [Math.min(...ratios), Math.max(...ratios)],
    old_ms_repeats: perRepeat.old,
    new_ms_repeats: perRepeat.new,
  };
}

const results = [];
if (opt.only !== 'browser') results.push(summary(native()));
if (opt.only !== 'native') results.push(summary(await browser()));

const f = (x) => x.toFixed(1);
console.log('target   adapter                                        old ms (range)        new ms (range)        old/new (range per repeat)');
for (const r of results) {
  console.log(
    `${r.target.padEnd(8)} ${r.adapter.slice(0, 46).padEnd(46)} ` +
      `${`${f(r.old_ms)} (${f(r.old_ms_range[0])}-${f(r.old_ms_range[1])})`.padEnd(21)} ` +
      `${`${f(r.new_ms)} (${f(r.new_ms_range[0])}-${f(r.new_ms_range[1])})`.padEnd(21)} ` +
      `${r.ratio.toFixed(2)}x (${r.ratio_range[0].toFixed(2)}-${r.ratio_range[1].toFixed(2)})`,
  );
}
const json = JSON.stringify({ bench: 'cpu-tiny-step', date: new Date().toISOString(), results });
console.log(json);
if (opt['json-out']) writeFileSync(opt['json-out'], `${json}\n`);

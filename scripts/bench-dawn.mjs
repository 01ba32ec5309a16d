// Runs the wasm build (pkg/, wasm-pack --target web) outside a browser through Dawn,
// Chrome's WebGPU engine, from the npm package `webgpu`: how the H200 measures the
// browser build on a real GPU. Prints one JSON line a result.
//   node scripts/bench-dawn.mjs [--pkg DIR] [--preset P] [--steps N] [--warmup N] [--corpus FILE]
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { create, globals } from 'webgpu';

const { values: opt } = parseArgs({
  options: {
    pkg: { type: 'string', default: './pkg' },
    preset: { type: 'string', default: 'tiny' },
    steps: { type: 'string', default: '10' },
    warmup: { type: 'string', default: '3' },
    corpus: { type: 'string' },
    pool: { type: 'boolean', default: false },
  },
});

Object.assign(globalThis, globals); // GPUBufferUsage and friends
globalThis.Window = function Window() {}; // wgpu looks for a window global
globalThis.navigator = { gpu: create([]) };
const pkg = opt.pkg.startsWith('/') ? opt.pkg : `${process.cwd()}/${opt.pkg}`;
const m = await import(`${pkg}/tidepool.js`);
m.initSync({ module: readFileSync(`${pkg}/tidepool_bg.wasm`) });

// The wasm does not embed the default corpus (data/tinyshakespeare.txt): read it.
const corpus = readFileSync(opt.corpus ?? 'data/tinyshakespeare.txt', 'utf8');
const config = { preset: opt.preset };
const trainer = await m.Trainer.create(config, corpus, opt.corpus ?? 'tinyshakespeare.txt');
const adapter = trainer.adapter();
console.log(JSON.stringify({ runner: 'dawn', adapter, model: trainer.model() }));
for (let i = 0; i < Number(opt.warmup); i++) await trainer.step();
const ms = [];
let last;
for (let i = 0; i < Number(opt.steps); i++) {
  last = await trainer.step();
  ms.push(last.ms);
}
ms.sort((a, b) => a - b);
const median = ms[Math.floor(ms.length / 2)];
const { batch, context } = trainer.model();
console.log(JSON.stringify({
  runner: 'dawn', preset: opt.preset, steps: ms.length, median_ms: median,
  tokens_per_s: (batch * context) / (median / 1e3), loss: last.loss,
  buffers_created_step: last.buffers_created_step, hit_rate: last.hit_rate,
}));
if (opt.pool) {
  for (const row of await m.benchPool(50)) console.log(JSON.stringify({ runner: 'dawn', bench: 'pool', ...row }));
}
trainer.free();

// The soak through Dawn in Node.js (the npm package `webgpu`, Chrome's WebGPU engine):
// the wasm build (pkg/) trains a long run as scripts/soak-browser.mjs does in
// Chromium, the same loop (scripts/soak-loop.mjs), on whatever GPU Dawn finds: the
// H200's soak (scripts/gpu-run.sh soak). Run node with --expose-gc so that each row's
// JS heap is read after a collection.
//   node --expose-gc scripts/soak-dawn.mjs [--pkg pkg] [--preset small] [--steps 20000]
//                     [--every 500] [...the options of soak-browser.mjs] [--json] [--out FILE]
import { readFileSync, writeFileSync } from 'node:fs';
import { cpus, hostname } from 'node:os';
import { parseArgs } from 'node:util';
import { pathToFileURL } from 'node:url';
import { create, globals } from 'webgpu';
import { flatAfterWarmUp, soak, table } from './soak-loop.mjs';
import { soakOptions } from './soak-options.mjs';

const { values } = parseArgs({
  options: {
    pkg: { type: 'string', default: 'pkg' },
    preset: { type: 'string', default: 'small' },
    batch: { type: 'string' },
    context: { type: 'string' },
    steps: { type: 'string', default: '20000' },
    every: { type: 'string', default: '500' },
    'at-once': { type: 'string', default: '16' },
    'in-flight': { type: 'string', default: '2' },
    'eval-every': { type: 'string', default: '250' },
    'eval-batches': { type: 'string', default: '20' },
    'sample-every': { type: 'string', default: '1000' },
    'sample-length': { type: 'string', default: '200' },
    json: { type: 'boolean', default: false },
    out: { type: 'string' },
  },
});
const opt = soakOptions(values);

Object.assign(globalThis, globals); // GPUBufferUsage and friends
globalThis.Window = function Window() {}; // wgpu looks for a window global
globalThis.navigator = { gpu: create([]) };

const pkg = values.pkg.startsWith('/') ? values.pkg : `${process.cwd()}/${values.pkg}`;
const result = await soak({
  ...opt,
  pkg: pathToFileURL(`${pkg}/tidepool.js`).href,
  wasmBytes: readFileSync(`${pkg}/tidepool_bg.wasm`),
  corpus: readFileSync(new URL('../data/tinyshakespeare.txt', import.meta.url), 'utf8'),
});
const failures = flatAfterWarmUp(result.rows);
const report = {
  bench: 'soak',
  runtime: `Node.js ${process.version}, Dawn (npm webgpu)`,
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
  console.log(`soak: ${opt.preset}, ${opt.steps} steps, ${report.runtime}, ${JSON.stringify(result.adapter)}`);
  console.log(table(result.rows));
  console.log(failures.length ? `NOT FLAT:\n${failures.join('\n')}` : 'flat after warm-up');
}
process.exit(failures.length ? 1 : 0);

// The soak through Dawn in Node.js (the npm package `webgpu`, Chrome's WebGPU engine):
// the wasm build (pkg/) trains a long run as scripts/soak-browser.mjs does in
// Chromium, the same loop (scripts/soak-loop.mjs), on whatever GPU Dawn finds: the
// H200's soak (scripts/gpu-run.sh soak). Run node with --expose-gc so that each row's
// JS heap is read after a collection.
//   node --expose-gc scripts/soak-dawn.mjs [--pkg pkg] [--corpus FILE] [--preset small] [--steps 20000]
//                     [--every 500] [...the options of soak-browser.mjs] [--json] [--out FILE]
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { create, globals } from 'webgpu';
import { soak } from './soak-loop.mjs';
import { report, soakArgs } from './soak-options.mjs';

const args = soakArgs(
  {
    preset: 'small',
    steps: '20000',
    every: '500',
    'at-once': '16',
    'in-flight': '2',
    'eval-every': '250',
    'eval-batches': '20',
    'sample-every': '1000',
    'sample-length': '200',
  },
  { pkg: { type: 'string', default: 'pkg' }, corpus: { type: 'string', default: 'data/tinyshakespeare.txt' } },
);
const { values, opt } = args;

Object.assign(globalThis, globals); // GPUBufferUsage and friends
globalThis.Window = function Window() {}; // wgpu looks for a window global
globalThis.navigator = { gpu: create([]) };

const pkg = values.pkg.startsWith('/') ? values.pkg : `${process.cwd()}/${values.pkg}`;
const result = await soak({
  ...opt,
  pkg: pathToFileURL(`${pkg}/tidepool.js`).href,
  wasmBytes: readFileSync(`${pkg}/tidepool_bg.wasm`),
  corpus: readFileSync(values.corpus, 'utf8'),
});
report(`Node.js ${process.version}, Dawn (npm webgpu)`, result, args);

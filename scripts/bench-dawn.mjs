// Runs the wasm build (pkg/, wasm-pack --target web) outside a browser through Dawn,
// Chrome's WebGPU engine, from the npm package `webgpu`: how the H200 measures the
// browser build on a real GPU. Prints one JSON line a result.
//   node scripts/bench-dawn.mjs [--pkg DIR[,DIR2...]] [--preset P] [--steps N] [--warmup N] [--corpus FILE]
//                               [--submit-every 0,16,32] [--at-once N] [--in-flight 1|2] [--pool]
//                               [--dawn-toggles disable_robustness,...] [--dawn-disable T,...]
//                               [--dawn-backend null]
//                               [--time-calls] [--kernels] [--policies [--recompute]] [--windows N] [--readback]
//                               [--policy P] [--bindings declared|read-write]
// --dawn-toggles: Dawn toggles to turn on (`enable-dawn-features=`), to find out what
// costs the browser build time against native (Chrome itself keeps its defaults);
// --dawn-disable: toggles to turn off (`disable-dawn-features=`), e.g.
// timestamp_quantization for --kernels.
// --dawn-backend null: Dawn's null backend, which validates and records every call
// and runs nothing: the host's side of a step alone, on any machine. Its losses are
// whatever the readback held; a call whose loss is not finite (the trainer refuses
// it) is timed here instead, its whole time counted as recording.
// --pkg A,B: a trainer for each build, taking turns step by step, one line each.
// --in-flight 2: each call of steps(n) starts before the one before resolves (as the
// page's worker trains); the trainers then take turns by 8 calls, each turn starting
// with none in flight, so two trainers never share the GPU.
// --time-calls: times every WebGPU method the build calls during the timed steps and
// prints one {"bench":"calls"} line a method (µs a step, calls a step): where a step's
// host time goes on Dawn's side of the boundary; with --at-once 1 also one
// {"bench":"submits"} line: the median µs of each submit of a step, in order.
// --windows N: also one {"bench":"windows"} line: the median ms a step (and of its
// recording) of each N timed steps in turn, to show how long the process takes to
// reach its steady speed.
// Each result line has `median_ms` (the trainer's own time a step, which stops before
// its figures become JS objects) and `median_wall_ms` (the call's time a step as its
// caller sees it, those objects included).
// --kernels: instead of steps, GPU time per kernel (the wasm API's benchKernels, each
// dispatch timed in a pass of its own), one {"bench":"kernels"} line a kernel.
// --policies: instead of steps, the memory of the steps after warm-up under each size
// policy, planned included (the wasm API's benchPolicies), one {"bench":"policies"}
// line a policy: reserved, requested, their ratio and ms a step; with --recompute, each
// policy again with the layernorm outputs recomputed in the backward.
// --policy P: the size policy --kernels runs under (default: the preset's).
// --bindings read-write: --kernels and --policies bind every storage operand
// read_write, a repeated one on a stand-in, as the planned policy binds: that rule's
// cost apart from the planned policy's arenas (default: declared).
// --readback: instead of steps, a readback's latency on an idle GPU, `steps` of them
// after `warmup` (scripts/readback.mjs, which bench-browser.mjs readback runs in a page).
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { create, globals } from 'webgpu';
import { readbackRoundTrips } from './readback.mjs';

const { values: opt } = parseArgs({
  options: {
    pkg: { type: 'string', default: './pkg' },
    preset: { type: 'string', default: 'tiny' },
    steps: { type: 'string', default: '10' },
    warmup: { type: 'string', default: '3' },
    corpus: { type: 'string' },
    pool: { type: 'boolean', default: false },
    'submit-every': { type: 'string' },
    // Steps a call records before reading their losses (trainer.steps(n)); 1: step().
    'at-once': { type: 'string', default: '1' },
    'in-flight': { type: 'string', default: '1' },
    'dawn-toggles': { type: 'string' },
    'dawn-disable': { type: 'string' },
    'dawn-backend': { type: 'string' },
    'time-calls': { type: 'boolean', default: false },
    windows: { type: 'string' },
    kernels: { type: 'boolean', default: false },
    policies: { type: 'boolean', default: false },
    policy: { type: 'string' },
    bindings: { type: 'string' },
    recompute: { type: 'boolean', default: false },
    readback: { type: 'boolean', default: false },
  },
});

Object.assign(globalThis, globals); // GPUBufferUsage and friends
globalThis.Window = function Window() {}; // wgpu looks for a window global
const toggles = [
  ...(opt['dawn-toggles'] ? [`enable-dawn-features=${opt['dawn-toggles']}`] : []),
  ...(opt['dawn-disable'] ? [`disable-dawn-features=${opt['dawn-disable']}`] : []),
  ...(opt['dawn-backend'] ? [`backend=${opt['dawn-backend']}`] : []),
];
globalThis.navigator = { gpu: create(toggles) };
if (opt.readback) {
  const row = await readbackRoundTrips({ warmup: Number(opt.warmup), count: Number(opt.steps) });
  console.log(JSON.stringify({ runner: 'dawn', ...row }));
  process.exit(0);
}

// --time-calls: wraps the methods of the WebGPU classes a step uses; off until the
// timed steps start, so warm-up (pipeline compilation) stays out of the totals.
const callTimes = new Map();
let timingCalls = false;
// Each submit's time in order within a step (the step's parts), for a per-part line.
let stepSubmits = [];
const submitsByStep = [];
if (opt['time-calls']) {
  for (const cls of ['GPUDevice', 'GPUQueue', 'GPUCommandEncoder', 'GPUComputePassEncoder', 'GPUBuffer']) {
    const proto = globals[cls].prototype;
    for (const key of Object.getOwnPropertyNames(proto)) {
      const method = Object.getOwnPropertyDescriptor(proto, key).value;
      if (typeof method !== 'function' || key === 'constructor') continue;
      const name = `${cls}.${key}`;
      proto[key] = function timed(...args) {
        if (!timingCalls) return method.apply(this, args);
        const t0 = performance.now();
        const result = method.apply(this, args);
        const entry = callTimes.get(name) ?? { ms: 0, calls: 0 };
        entry.ms += performance.now() - t0;
        entry.calls += 1;
        callTimes.set(name, entry);
        if (name === 'GPUQueue.submit') stepSubmits.push(performance.now() - t0);
        return result;
      };
    }
  }
}
// --pkg A,B: one module a build, their trainers taking turns (side by side).
const pkgs = opt.pkg.split(',').map((p) => (p.startsWith('/') ? p : `${process.cwd()}/${p}`));
const modules = [];
for (const pkg of pkgs) {
  const m = await import(`${pkg}/tidepool.js`);
  m.initSync({ module: readFileSync(`${pkg}/tidepool_bg.wasm`) });
  modules.push(m);
}
const m = modules[0];

// The wasm does not embed the default corpus (data/tinyshakespeare.txt): read it.
const corpus = readFileSync(opt.corpus ?? 'data/tinyshakespeare.txt', 'utf8');
if (opt.kernels) {
  const rows = await m.benchKernels(opt.preset, Number(opt.warmup), Number(opt.steps), corpus, opt.policy, opt.bindings);
  for (const row of rows) console.log(JSON.stringify({ runner: 'dawn', bench: 'kernels', ...row }));
  process.exit(0);
}
if (opt.policies) {
  for (const recompute of opt.recompute ? [false, true] : [false]) {
    const rows = await m.benchPolicies(opt.preset, Number(opt.warmup), Number(opt.steps), corpus, opt.bindings, recompute);
    for (const row of rows) console.log(JSON.stringify({ runner: 'dawn', bench: 'policies', ...row }));
  }
  process.exit(0);
}
// --submit-every 0,16,32: one trainer a value, their steps taken in turns so that a
// busy machine slows them alike; without it, one trainer with the default.
const everies = opt['submit-every'] ? opt['submit-every'].split(',').map(Number) : [undefined];
const trainers = [];
const values = []; // each trainer's submit_every
const trainerPkgs = []; // and build
for (const [k, mod] of modules.entries()) {
  for (const submit_every of everies) {
    const config = submit_every === undefined ? { preset: opt.preset } : { preset: opt.preset, submit_every };
    trainers.push(await mod.Trainer.create(config, corpus, opt.corpus ?? 'tinyshakespeare.txt'));
    values.push(submit_every);
    trainerPkgs.push(pkgs.length > 1 ? pkgs[k] : undefined);
  }
}
console.log(JSON.stringify({ runner: 'dawn', adapter: trainers[0].adapter(), model: trainers[0].model() }));
const atOnce = Number(opt['at-once']);
const inFlight = Number(opt['in-flight']);
if (![1, 2].includes(inFlight)) {
  console.error(`--in-flight must be 1 or 2, got ${opt['in-flight']}`);
  process.exit(2);
}
// One call's stats: step() one at a time, or steps(n) n at a time.
const runsNothing = opt['dawn-backend'] === 'null';
// One call's stats and wall time a step (median_wall_ms).
const advance = async (trainer) => {
  const start = performance.now();
  try {
    const stats = atOnce > 1 || inFlight > 1 ? await trainer.steps(atOnce) : [await trainer.step()];
    return { stats, wall: (performance.now() - start) / atOnce };
  } catch (e) {
    if (!runsNothing || !String(e?.message ?? e).includes('the loss became')) throw e;
    const ms = (performance.now() - start) / atOnce;
    return { stats: [{ ...trainer.stats(), ms, record_ms: ms }], wall: ms };
  }
};
// `count` calls of a trainer, each started while up to inFlight - 1 before it are unresolved.
const calls = async (trainer, count) => {
  const done = [];
  const pending = [];
  for (let i = 0; i < count; i++) {
    if (pending.length === inFlight) done.push(await pending.shift());
    pending.push(advance(trainer));
  }
  for (const p of pending) done.push(await p);
  return done;
};
for (const trainer of trainers) await calls(trainer, Number(opt.warmup));
const ms = trainers.map(() => []);
const recordMs = trainers.map(() => []);
const wall = trainers.map(() => []);
const last = [];
const turn = inFlight > 1 ? 8 : 1;
timingCalls = true;
for (let i = 0; i < Number(opt.steps); i += turn) {
  for (const [t, trainer] of trainers.entries()) {
    stepSubmits = [];
    for (const { stats, wall: w } of await calls(trainer, Math.min(turn, Number(opt.steps) - i))) {
      last[t] = stats[stats.length - 1];
      ms[t].push(last[t].ms);
      recordMs[t].push(last[t].record_ms);
      wall[t].push(w);
    }
    if (atOnce === 1 && t === 0) submitsByStep.push(stepSubmits);
  }
}
timingCalls = false;
const medianOf = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
if (opt.windows) {
  const n = Number(opt.windows);
  const windows = [];
  for (let i = 0; i + n <= ms[0].length; i += n) {
    windows.push([medianOf(ms[0].slice(i, i + n)), medianOf(recordMs[0].slice(i, i + n))].map((x) => Math.round(1e3 * x) / 1e3));
  }
  console.log(JSON.stringify({ runner: 'dawn', bench: 'windows', preset: opt.preset, at_once: atOnce, window: n, median_and_record_ms: windows }));
}
const { batch, context } = trainers[0].model();
for (const [t, times] of ms.entries()) {
  times.sort((a, b) => a - b);
  const median = times[Math.floor(times.length / 2)];
  const rec = recordMs[t].sort((a, b) => a - b)[Math.floor(times.length / 2)];
  console.log(JSON.stringify({
    runner: 'dawn', preset: opt.preset, ...(trainerPkgs[t] ? { pkg: trainerPkgs[t] } : {}),
    submit_every: values[t] ?? null, at_once: atOnce, in_flight: inFlight, steps: times.length * atOnce,
    dawn_toggles: opt['dawn-toggles'] ?? null, dawn_disable: opt['dawn-disable'] ?? null,
    median_ms: median, median_record_ms: rec, median_wall_ms: medianOf(wall[t]), tokens_per_s: (batch * context) / (median / 1e3), loss: last[t].loss,
    buffers_created_step: last[t].buffers_created_step, hit_rate: last[t].hit_rate,
    dispatches_step: last[t].dispatches_step,
  }));
}
// Per step of every trainer taken together (one trainer unless --submit-every lists more).
const stepsTimed = Number(opt.steps) * atOnce * trainers.length;
for (const [method, { ms: total, calls }] of [...callTimes].sort((a, b) => b[1].ms - a[1].ms)) {
  console.log(JSON.stringify({
    runner: 'dawn', bench: 'calls', preset: opt.preset, method,
    us_per_step: (1e3 * total) / stepsTimed, calls_per_step: calls / stepsTimed, us_per_call: (1e3 * total) / calls,
  }));
}
// --time-calls, one step at a time: the median µs of each submit of the first
// trainer's steps, in order (a step's parts start small and double).
if (submitsByStep.length > 0 && submitsByStep[0].length > 0) {
  const parts = Math.max(...submitsByStep.map((s) => s.length));
  const us = [];
  for (let i = 0; i < parts; i++) {
    const xs = submitsByStep.filter((s) => s.length > i).map((s) => s[i]).sort((a, b) => a - b);
    us.push(Math.round(1e4 * xs[Math.floor(xs.length / 2)]) / 10);
  }
  console.log(JSON.stringify({ runner: 'dawn', bench: 'submits', preset: opt.preset, median_us_by_part: us }));
}
if (opt.pool) {
  for (const row of await m.benchPool(50)) console.log(JSON.stringify({ runner: 'dawn', bench: 'pool', ...row }));
}
for (const trainer of trainers) trainer.free();

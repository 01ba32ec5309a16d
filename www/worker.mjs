// The training loop, in a dedicated Web Worker so the page never freezes: WebGPU
// works in workers, and a step that waits on the GPU here costs the page nothing.
//
// Protocol (page -> worker). Every message with an `id` gets exactly one reply with
// that id: the result below, or {type:'error'}.
//   {type:'init', pkgUrl, schedule}              load the wasm, look for a GPU -> 'ready' | 'error' (op 'load')
//   {type:'create', id, config, corpus, corpusName, run}  a new Trainer     -> 'created'
//   {type:'step', id}         one step when paused                          -> 'step' {stats} | 'skipped' (running)
//   {type:'sample', id, length?, temperature?, topK?, prompt?}              -> 'sample' | 'generated' (prompt) {step, text}
//   {type:'save', id}         the run as a checkpoint (www/checkpoints.mjs)  -> 'saved' {step, bytes}
//   {type:'restore', id, bytes, corpus, corpusName, run}  a Trainer from a checkpoint, in place of
//                             this one, which stays when the file is refused -> 'created' {loaded, stats}
//   {type:'autosave', every}  save every this many steps while running (0: never)
//   {type:'evaluate', id}                                                   -> 'eval' {step, loss}
//   {type:'trace', id}        one training step with the allocation trace on (its 'step' is
//                             posted too)                      -> 'trace' {trace, replay} (docs/trace.md)
//   {type:'run'} / {type:'pause'}   train continuously / stop after the steps in flight (see
//                             schedule.batchMs: at most that much training); each
//                             is confirmed by a 'state', at once or after the request in flight
//                             (`asked_at`: the last step posted when it arrived)
//   {type:'free'}             release GPU memory now
//   {type:'ping', seq}        answered at once, whatever runs     -> 'pong' {seq, op, ms}: the request
//                             in flight and for how long (the page's watchdog)
// Worker -> page, unasked: 'step' {stats} (stats.ahead: its call started before the one
//   before it came back), 'eval' {step, loss}, 'sample' {step, text},
//   'state' {running, step, reason, asked_at}, 'autosave' {step, bytes}, 'error' {op, kind, message, fatal}. After a
//   fatal one (the wasm trapped, or anything escaped) this worker answers every
//   request with that error: the page starts a new one.
//
// A wasm Trainer is one Rust object: two of its async methods must never overlap
// (wasm-bindgen would throw on the second borrow), so every call goes through one
// pump that runs queued requests between steps, one at a time.

import { cspError, violationOf } from './csp.mjs';
import { kindError, kindOf, messageOf } from './errors.mjs';

// A Content-Security-Policy that blocks the wasm package here (its import: script-src,
// its .wasm: connect-src, its compile: 'wasm-unsafe-eval') says which only in this event.
let violation = null;
self.addEventListener('securitypolicyviolation', (e) => (violation ??= violationOf(e)));

let wasm = null;
let trainer = null;
let wantRun = false; // what the page asked for
let reported = false; // what the page was last told
let confirm = false; // a run or pause to confirm, changed or not
let lastPosted = 0; // the step of the last 'step' posted to the page
let askedAt = null; // lastPosted when the run or pause to confirm arrived
let busy = false;
let current = null; // {op, since, id, msg}: what the pump is waiting on, and for which request
let crash = null; // the fatal error, once there is one
const queue = [];

// When to evaluate and sample. Both cost GPU time (on SwiftShader a 200-character
// sample is a minute), so each is held to a share of the wall clock, a sample's
// length follows the measured time per character, and neither runs once a pause
// is asked for: Pause takes effect right after the steps in flight.
//
// While running, the worker trains several steps a call (trainer.steps(n)): the GPU
// then goes from one step to the next while the host records, instead of waiting for
// each loss to be read. As many as fit in batchMs by the last call's time a step, at
// most maxAtOnce, and never past a step that evaluates, saves or ends the run. A step
// slower than batchMs / 2 (a CPU adapter) goes one at a time, as before.
//
// A call of several steps starts the next call before awaiting its own losses (two
// in flight, `ahead`), where nothing is due at its end and no request waits: the GPU
// then never waits for the losses to come back and the next call to be recorded (in
// Chromium a millisecond or more a call; BENCHMARKS.md, round twenty). Anything
// else waits for the call ahead to come back first, and a Pause confirms after it.
const schedule = {
  batchMs: 16, // training a call, at most: what a Pause may wait for
  maxAtOnce: 16, // steps a call, at most
  overlap: true, // start the next call before the last one's losses are back (below)
  evalEvery: 20, // steps between held-out evaluations...
  evalShare: 0.15, // ...unless that would spend more than this share of the time
  firstSample: 10, // step of the first sample
  sampleSeconds: 15, // then at most one every this many seconds...
  sampleShare: 0.15, // ...and at most this share of the time
  sampleBudgetMs: 2500, // a sample's length is what fits in this
  sampleLength: 200, // characters, at most
  sampleMinLength: 24,
  firstSampleLength: 32, // before anything is measured
  temperature: 0.8,
  topK: 0, // 0: all
  maxSteps: 0, // pause here (0: the length of the lr schedule)
  autosaveEvery: 0, // steps between checkpoints sent to the page to keep (0: none)
};
let lastSample = { at: 0, ms: 0, step: 0 };
let lastEval = { at: 0, ms: 0 };
let msPerChar = 0; // measured by each sample
let msPerStep = 0; // measured by each training call (0: none yet)
let ahead = null; // {promise, n, end, quiet}: a call started before the one before it came back
let maxSteps = 0;

// console_error_panic_hook prints a Rust panic with console.error, then the wasm
// traps with a bare "unreachable": keep the panic's words to tell the page.
let lastPanic = null;
const consoleError = console.error.bind(console);
console.error = (...args) => {
  const text = args.map(String).join(' ');
  if (text.includes('panicked at')) lastPanic = text;
  consoleError(...args);
};

const post = (msg, transfer = []) => {
  if (msg.type === 'step') lastPosted = msg.stats?.step ?? lastPosted;
  self.postMessage(msg, transfer);
};

// The wasm hands back plain objects by contract; a class instance would lose its
// getters in postMessage, so anything that is not one goes through JSON.
function plain(value) {
  if (value === null || typeof value !== 'object') return value;
  const proto = Object.getPrototypeOf(value);
  if (proto === Object.prototype || proto === null || Array.isArray(value)) return value;
  if (value instanceof Map) return Object.fromEntries(value);
  return JSON.parse(JSON.stringify(value));
}

function report(reason) {
  const running = wantRun && trainer !== null;
  if (running !== reported || reason || confirm) {
    reported = running;
    confirm = false;
    post({ type: 'state', running, step: currentStep(), reason: reason ?? null, asked_at: askedAt });
  }
}

function currentStep() {
  try {
    return trainer ? plain(trainer.stats())?.step ?? 0 : 0;
  } catch {
    return 0;
  }
}

async function checkGpu() {
  // Detected here up front, so the page can say so before anything is built.
  if (!self.navigator.gpu) {
    return {
      ok: false,
      message: self.isSecureContext
        ? 'no WebGPU: this browser does not offer it.'
        : 'no WebGPU: the page is not in a secure context (WebGPU needs https:// or http://localhost).',
    };
  }
  let adapter = null;
  try {
    adapter = await self.navigator.gpu.requestAdapter();
  } catch (err) {
    return { ok: false, message: `no GPU adapter: the request was refused (${messageOf(err)}).` };
  }
  if (!adapter) {
    return { ok: false, message: 'no GPU adapter: WebGPU is there but offered no adapter (disabled, blocklisted, or no GPU).' };
  }
  const info = adapter.info ?? {};
  return { ok: true, info: { vendor: info.vendor ?? '', architecture: info.architecture ?? '', description: info.description ?? '' } };
}

/** What the wasm tells the page: presets and size policies (the menus), the corpus cap and the default corpus's path. */
function wasmInfo() {
  const ask = (name, otherwise) => {
    try {
      return typeof wasm[name] === 'function' ? plain(wasm[name]()) : otherwise;
    } catch {
      return otherwise;
    }
  };
  return {
    presets: ask('presets', []),
    policies: ask('policies', []),
    maxCorpusBytes: ask('maxCorpusBytes', undefined),
    defaultCorpusPath: ask('defaultCorpusPath', undefined),
  };
}

function alive(t) {
  try {
    t.model();
    return true;
  } catch {
    return false;
  }
}

const needTrainer = (op) => {
  if (!trainer) throw kindError('config', `nothing to ${op}: no trainer has been built yet (press Start or Reset).`);
};

// Runs one request; returns the reply (without id) or throws.
async function handle(m) {
  switch (m.type) {
    case 'init': {
      Object.assign(schedule, m.schedule ?? {});
      try {
        wasm = await import(m.pkgUrl);
        await wasm.default();
      } catch (err) {
        wasm = null;
        await new Promise((next) => setTimeout(next, 20)); // the violation's event is a task of its own
        if (violation) throw cspError(violation, new URL(m.pkgUrl).origin, self.origin);
        throw kindError('load', `could not load the wasm package ${m.pkgUrl}: ${messageOf(err)}. Build it with "make demo".`);
      }
      return { type: 'ready', ...wasmInfo(), gpu: await checkGpu() };
    }
    case 'create': {
      if (!wasm) throw kindError('load', 'the wasm package is not loaded.');
      const args = [m.config ?? {}, m.corpus ?? undefined, m.corpusName ?? undefined];
      m.corpus = null; // the worker keeps no copy (the wasm has its own)
      if (trainer) {
        // Checked against the device first (a bad corpus or setting loses nothing), then
        // the old trainer's buffers are freed before the new one is built: never two at once.
        try {
          await trainer.replace(...args);
        } catch (err) {
          if (!alive(trainer)) {
            trainer = null; // it was freed, and building the new one failed
            throw Object.assign(err, { gone: true });
          }
          throw err;
        }
      } else {
        trainer = await wasm.Trainer.create(...args);
      }
      return started(m.run);
    }
    case 'restore': {
      if (!wasm) throw kindError('load', 'the wasm package is not loaded.');
      const args = [m.bytes, m.corpus ?? undefined, m.corpusName ?? undefined];
      m.bytes = m.corpus = null;
      // built beside the current trainer, which a refused file leaves untouched
      const loaded = await wasm.Trainer.load(...args);
      if (trainer) {
        try {
          trainer.free();
        } catch {}
      }
      trainer = loaded;
      return { ...started(m.run), loaded: true, stats: plain(trainer.stats()) };
    }
    case 'save': {
      needTrainer('save');
      const bytes = await trainer.save();
      return { type: 'saved', step: currentStep(), bytes, transfer: [bytes.buffer] };
    }
    case 'step':
      needTrainer('step');
      if (wantRun) return { type: 'skipped' }; // the loop steps anyway
      await trainStep(m.id); // its 'step' message is the reply
      return null;
    case 'sample': {
      needTrainer('sample');
      const text = await timedSample(m.length ?? sampleLength(), m.temperature ?? schedule.temperature, m.topK ?? schedule.topK, m.prompt);
      // a prompt's text is the asker's alone; the page's running sample is an event
      return { type: m.prompt === undefined ? 'sample' : 'generated', step: currentStep(), text };
    }
    case 'evaluate':
      needTrainer('evaluate');
      return { type: 'eval', step: currentStep(), loss: await trainer.evaluate() };
    case 'trace': {
      needTrainer('trace');
      const trace = plain(await trainer.trace());
      post({ type: 'step', stats: plain(trainer.stats()) });
      return { type: 'trace', trace, replay: plain(wasm.replayTrace(JSON.stringify(trace))) };
    }
    case 'free':
      wantRun = false;
      if (trainer) {
        try {
          trainer.free();
        } catch {}
      }
      trainer = null;
      return null;
    default:
      throw kindError('internal', `unknown request ${m.type}`);
  }
}

// A new trainer's schedule starts afresh; resolves the 'created' reply.
function started(run) {
  lastSample = { at: performance.now(), ms: 0, step: 0 };
  lastEval = { at: performance.now(), ms: 0 };
  msPerChar = 0;
  msPerStep = 0;
  const model = plain(trainer.model());
  maxSteps = schedule.maxSteps || model.steps || 0;
  wantRun = Boolean(run);
  return { type: 'created', adapter: plain(trainer.adapter()), corpus: plain(trainer.corpus()), model };
}

/**
 * Reports a failure. A trap, or anything that escaped, leaves the wasm in an unknown
 * state (a RefCell borrowed for good, a future never polled again): the worker is
 * then dead, and every request queued or still to come is answered with the crash.
 * A lost device takes the trainer with it; other errors leave it as it was.
 */
function fail(op, err, id, { escaped = false } = {}) {
  let kind = kindOf(err);
  let text = messageOf(err);
  if (escaped || kind === 'crashed') {
    kind = 'crashed';
    const panic = lastPanic ? lastPanic.split('\n').slice(0, 2).join(' ').slice(0, 400) : text;
    text = `the wasm module crashed (a bug in tidepool; please report it): ${panic}`;
  }
  const fatal = kind === 'crashed';
  if (fatal) {
    crash ??= { op, kind, message: text };
    trainer = null; // not freed: its memory may be what broke
  } else if (kind === 'device_lost' && trainer) {
    try {
      trainer.free();
    } catch {}
    trainer = null;
  }
  const gone = fatal || kind === 'device_lost' || Boolean(err?.gone);
  // a refused checkpoint, prompt or save leaves the run as it was; anything else pauses
  const harmless = ['restore', 'save', 'sample'].includes(op) && ['config', 'corpus', 'too_large'].includes(kind);
  if (!harmless) wantRun = false;
  if (ahead) ahead.quiet = true; // it comes back before anything else; its failure is this one's
  post({ type: 'error', id, op, kind, message: text, fatal, gone });
  if (fatal) {
    for (const m of queue.splice(0)) if (m.id !== undefined) post({ type: 'error', ...crash, id: m.id, op: m.type, fatal });
  }
  report();
}

// What the pump now waits on, for the watchdog's pings.
const phase = (op) => (current = { ...current, op, since: performance.now() });

// How many steps the next training call takes from `step` (see schedule.batchMs).
function stepsAtOnce(step) {
  const whole = (v, min, max) => Math.min(max, Math.max(min, Math.floor(Number(v) || 0)));
  let n = msPerStep > 0 ? whole(schedule.batchMs / msPerStep, 1, whole(schedule.maxAtOnce, 1, 1024)) : 1;
  // steps to the next multiple of `every` (itself included)
  const toNext = (every) => (every > 0 ? every - (step % every) : Infinity);
  n = Math.min(n, toNext(whole(schedule.evalEvery, 0, 1e9)), toNext(whole(schedule.autosaveEvery, 0, 1e9)));
  if (maxSteps > step) n = Math.min(n, maxSteps - step);
  return Math.max(1, n);
}

// A training call of n steps from `from`: step() for one alone, steps(n) for a call
// that may have another in flight beside it.
function startCall(n, from, { single = false, early = false } = {}) {
  const promise = single ? trainer.step().then((s) => [s]) : trainer.steps(n);
  promise.catch(() => {}); // awaited later, or dropped with a failure before it (quiet)
  return { promise, n, end: from + n, single, early, quiet: false };
}

// Nothing is due after the call ending at `end`, so the next may start before it
// comes back. (A sample that comes due meanwhile waits for a call with none ahead.)
function plainEnd(end) {
  const at = (every) => every > 0 && end % every === 0;
  return !at(schedule.evalEvery) && !at(schedule.autosaveEvery) && !(maxSteps > 0 && end >= maxSteps) && !sampleDue(end);
}

// Steps fast enough to take several a call (see stepsAtOnce): then calls overlap
// (unless schedule.overlap is off).
const fast = () => Boolean(schedule.overlap) && msPerStep > 0 && schedule.batchMs / msPerStep >= 2;

async function trainStep(id) {
  phase('step');
  let call = ahead;
  ahead = null;
  // Step once (an id) takes exactly one step; the running loop takes as many as fit.
  const running = id === undefined && wantRun;
  const overlap = running && fast();
  if (!call) {
    const n = running ? stepsAtOnce(currentStep()) : 1;
    call = startCall(n, currentStep(), { single: n === 1 && !overlap });
  }
  if (overlap && !call.single && !queue.length && plainEnd(call.end)) ahead = startCall(stepsAtOnce(call.end), call.end, { early: true });
  const t0 = performance.now();
  let all;
  try {
    all = plain(await call.promise);
  } catch (err) {
    if (call.quiet) return; // the call before it failed, and said so
    throw err;
  }
  // each step's ms: its call's time over its steps, from the call before's end
  msPerStep = all[all.length - 1].ms > 0 ? all[all.length - 1].ms : (performance.now() - t0) / all.length;
  if (call.early) for (const s of all) s.ahead = true;
  for (const s of all.slice(0, -1)) post({ type: 'step', stats: s });
  const stats = all[all.length - 1];
  post({ type: 'step', id, stats });
  const step = stats.step;
  if (ahead) return; // nothing was due at this call's end (plainEnd)
  // evaluation and samples only while running on: a pause is not kept waiting
  if (wantRun && schedule.evalEvery > 0 && step % schedule.evalEvery === 0 && shareLeft(lastEval, schedule.evalShare)) {
    phase('evaluate');
    const t0 = performance.now();
    post({ type: 'eval', step, loss: await trainer.evaluate() });
    const t1 = performance.now();
    lastEval = { at: t1, ms: t1 - t0 };
  }
  if (wantRun && sampleDue(step)) {
    phase('sample');
    const text = await timedSample(sampleLength(), schedule.temperature, schedule.topK);
    post({ type: 'sample', step, text });
    lastSample.step = step;
  }
  if (wantRun && schedule.autosaveEvery > 0 && step % schedule.autosaveEvery === 0) {
    phase('save');
    const bytes = await trainer.save();
    post({ type: 'autosave', step, bytes }, [bytes.buffer]);
  }
  if (wantRun && maxSteps > 0 && step === maxSteps) {
    wantRun = false;
    report(`finished the ${maxSteps}-step schedule`);
  }
}

// A sample is due after `step` (by default the step trained so far).
function sampleDue(step = currentStep()) {
  if (schedule.sampleLength <= 0) return false;
  if (lastSample.step === 0) return step >= schedule.firstSample;
  return performance.now() - lastSample.at >= schedule.sampleSeconds * 1000 && shareLeft(lastSample, schedule.sampleShare);
}

// True when a job that last took `last.ms` may run again and stay within `share` of the time.
function shareLeft(last, share) {
  return performance.now() - last.at >= last.ms * (1 / share - 1);
}

function sampleLength() {
  if (!msPerChar) return Math.min(schedule.firstSampleLength, schedule.sampleLength);
  const fits = Math.floor(schedule.sampleBudgetMs / msPerChar);
  return Math.max(schedule.sampleMinLength, Math.min(schedule.sampleLength, fits));
}

async function timedSample(length, temperature, topK, prompt = '\n') {
  const t0 = performance.now();
  const text = await trainer.sample(prompt, length, temperature, topK);
  const t1 = performance.now();
  msPerChar = (t1 - t0) / Math.max(1, length);
  lastSample = { at: t1, ms: t1 - t0, step: lastSample.step };
  return text;
}

// One macrotask turn without setTimeout's clamp (4 ms once nested).
function yieldToMessages() {
  return new Promise((done) => {
    const channel = new MessageChannel();
    channel.port1.onmessage = () => {
      channel.port1.close();
      done();
    };
    channel.port2.postMessage(0);
  });
}

async function pump() {
  if (busy) return;
  busy = true;
  try {
    while (!crash) {
      if (ahead) {
        // the call started ahead comes back before any request or pause is served
        current = { op: 'step', since: performance.now() };
        try {
          await trainStep();
        } catch (err) {
          fail(current?.op ?? 'step', err);
        }
        current = null;
        if (!ahead) report();
        continue;
      }
      const m = queue.shift();
      if (m) {
        current = { op: m.type, since: performance.now(), id: m.id, msg: m };
        try {
          const { transfer, ...reply } = (await handle(m)) ?? {};
          if (reply.type) post(m.id !== undefined ? { ...reply, id: m.id } : reply, transfer);
        } catch (err) {
          fail(m.type === 'init' ? 'load' : m.type, err, m.id);
        }
      } else if (wantRun && trainer) {
        // Let the page's messages in before each step: a step's awaits may all be
        // microtasks, and a Pause waiting behind them would let several steps run.
        await yieldToMessages();
        if (!(wantRun && trainer) || queue.length) continue;
        current = { op: 'step', since: performance.now() };
        try {
          await trainStep();
        } catch (err) {
          fail(current?.op ?? 'step', err);
        }
      } else break;
      current = null;
      // a pause that arrived during the step is confirmed right after it (after the
      // call ahead, when there is one)
      if (!ahead) report();
    }
  } finally {
    current = null;
    busy = false;
  }
}

self.onmessage = (event) => {
  const m = event.data;
  if (m.type === 'ping') {
    // answered here, not queued: a pump stuck on a promise still answers, and says on what
    post({ type: 'pong', seq: m.seq, op: current?.op ?? null, ms: current ? performance.now() - current.since : 0, crashed: Boolean(crash) });
    return;
  }
  if (crash) {
    if (m.id !== undefined) post({ type: 'error', ...crash, id: m.id, op: m.type, fatal: true });
    return;
  }
  // run/pause only flip the flag, so a pause takes effect after the steps in flight;
  // a create still waiting (or in flight) then starts its trainer as last asked
  if (m.type === 'run' || m.type === 'pause') {
    wantRun = m.type === 'run';
    confirm = true;
    askedAt = lastPosted;
    for (const q of [current?.msg, ...queue]) if (q?.type === 'create' || q?.type === 'restore') q.run = wantRun;
  } else if (m.type === 'autosave') {
    schedule.autosaveEvery = Math.max(0, Math.floor(Number(m.every) || 0));
    return;
  } else queue.push(m);
  if (!busy) report();
  pump();
};

// Anything that escapes (a Rust panic traps inside a wasm-bindgen future, whose
// promise then never settles) kills this worker: say so, and answer what waits.
self.addEventListener('unhandledrejection', (event) => {
  event.preventDefault();
  fail(current?.op ?? 'worker', event.reason, current?.id, { escaped: true });
});
self.addEventListener('error', (event) => {
  event.preventDefault();
  fail(current?.op ?? 'worker', event.error ?? event.message, current?.id, { escaped: true });
});

// The training loop, in a dedicated Web Worker so the page never freezes: WebGPU
// works in workers, and a step that waits on the GPU here costs the page nothing.
//
// Protocol (page -> worker; replies carry the request's `id`):
//   {type:'init', pkgUrl, schedule}   load the wasm, look for a GPU  -> 'ready'
//   {type:'create', id, config, corpus, corpusName, run}  a new Trainer          -> 'created' | 'error'
//   {type:'run'} / {type:'pause'}     train continuously / stop after the step in flight
//   {type:'step', id}                 one step when paused            -> 'step'
//   {type:'sample', id, length, temperature, topK}                    -> 'sample'
//   {type:'evaluate', id}                                             -> 'eval'
//   {type:'free'}                     release GPU memory now
// Worker -> page, unasked: 'step' {stats}, 'eval' {step, loss}, 'sample' {step, text},
//   'state' {running, step, reason}, 'error' {op, message, lost, fatal}: after a
//   fatal one (a Rust panic) the page starts a new worker.
//
// A wasm Trainer is one Rust object: two of its async methods must never overlap
// (wasm-bindgen would throw on the second borrow), so every call goes through one
// pump that runs queued requests between steps, one at a time.

let wasm = null;
let trainer = null;
let wantRun = false; // what the page asked for
let reported = false; // what the page was last told
let busy = false;
const queue = [];

// When to evaluate and sample. Both cost GPU time (on SwiftShader a 200-character
// sample is a minute), so each is held to a share of the wall clock, a sample's
// length follows the measured time per character, and neither runs once a pause
// is asked for: Pause takes effect right after the step in flight.
const schedule = {
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
};
let lastSample = { at: 0, ms: 0, step: 0 };
let lastEval = { at: 0, ms: 0 };
let msPerChar = 0; // measured by each sample
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

const post = (msg) => self.postMessage(msg);
const message = (err) => (err && err.message) || String(err);

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
  if (running !== reported || reason) {
    reported = running;
    post({ type: 'state', running, step: currentStep(), reason: reason ?? null });
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
    return { ok: false, message: `no GPU adapter: the request was refused (${message(err)}).` };
  }
  if (!adapter) {
    return { ok: false, message: 'no GPU adapter: WebGPU is there but offered no adapter (disabled, blocklisted, or no GPU).' };
  }
  const info = adapter.info ?? {};
  return { ok: true, info: { vendor: info.vendor ?? '', architecture: info.architecture ?? '', description: info.description ?? '' } };
}

async function handle(m) {
  switch (m.type) {
    case 'init': {
      Object.assign(schedule, m.schedule ?? {});
      try {
        wasm = await import(m.pkgUrl);
        await wasm.default();
      } catch (err) {
        wasm = null;
        post({ type: 'error', op: 'load', message: `could not load the wasm package ${m.pkgUrl}: ${message(err)}. Build it with "make demo".` });
        return;
      }
      let presets = ['tiny', 'small'];
      try {
        presets = plain(wasm.presets());
      } catch {}
      post({ type: 'ready', presets, gpu: await checkGpu() });
      return;
    }
    case 'create': {
      if (!wasm) return post({ type: 'error', id: m.id, op: 'create', message: 'the wasm package is not loaded.' });
      let next;
      try {
        next = await wasm.Trainer.create(m.config ?? {}, m.corpus ?? undefined, m.corpusName ?? undefined);
      } catch (err) {
        // The trainer we had (if any) stays: a bad corpus or setting loses nothing.
        post({ type: 'error', id: m.id, op: 'create', message: message(err) });
        report();
        return;
      }
      if (trainer) {
        try {
          trainer.free();
        } catch {}
      }
      trainer = next;
      lastSample = { at: performance.now(), ms: 0, step: 0 };
      lastEval = { at: performance.now(), ms: 0 };
      msPerChar = 0;
      const model = plain(trainer.model());
      maxSteps = schedule.maxSteps || m.config?.steps || model.steps || 0;
      wantRun = Boolean(m.run);
      post({
        type: 'created',
        id: m.id,
        adapter: plain(trainer.adapter()),
        corpus: plain(trainer.corpus()),
        model,
      });
      report();
      return;
    }
    case 'step':
      if (trainer && !wantRun) await trainStep();
      return;
    case 'sample':
      if (!trainer) return;
      try {
        const text = await timedSample(m.length ?? sampleLength(), m.temperature ?? schedule.temperature, m.topK ?? schedule.topK);
        post({ type: 'sample', id: m.id, step: currentStep(), text });
      } catch (err) {
        fail('sample', err);
      }
      return;
    case 'evaluate':
      if (!trainer) return;
      try {
        post({ type: 'eval', id: m.id, step: currentStep(), loss: await trainer.evaluate() });
      } catch (err) {
        fail('evaluate', err);
      }
      return;
    case 'free':
      wantRun = false;
      if (trainer) {
        try {
          trainer.free();
        } catch {}
      }
      trainer = null;
      report();
      return;
  }
}

function fail(op, err) {
  let text = message(err);
  const lost = /device was lost|device lost/i.test(text);
  // After a trap the wasm instance is in an unknown state: only a new worker helps.
  const fatal = err instanceof WebAssembly.RuntimeError || text === 'unreachable';
  if (fatal) {
    const panic = lastPanic ? lastPanic.split('\n').slice(0, 2).join(' ').slice(0, 400) : text;
    text = `the wasm module panicked (a bug in tidepool; please report it): ${panic}`;
  }
  wantRun = false;
  if (fatal) {
    trainer = null; // not freed: its memory may be what broke
  } else if (lost && trainer) {
    // a lost device takes its buffers with it; the page offers Restart
    try {
      trainer.free();
    } catch {}
    trainer = null;
  }
  post({ type: 'error', op, message: text, lost, fatal });
  report();
}

async function trainStep() {
  let stats;
  try {
    stats = plain(await trainer.step());
  } catch (err) {
    return fail('step', err);
  }
  post({ type: 'step', stats });
  const step = stats.step;
  // evaluation and samples only while running on: a pause is not kept waiting
  if (wantRun && schedule.evalEvery > 0 && step % schedule.evalEvery === 0 && shareLeft(lastEval, schedule.evalShare)) {
    const t0 = performance.now();
    try {
      post({ type: 'eval', step, loss: await trainer.evaluate() });
    } catch (err) {
      return fail('evaluate', err);
    }
    const t1 = performance.now();
    lastEval = { at: t1, ms: t1 - t0 };
  }
  const due =
    lastSample.step === 0
      ? step >= schedule.firstSample
      : performance.now() - lastSample.at >= schedule.sampleSeconds * 1000 && shareLeft(lastSample, schedule.sampleShare);
  if (wantRun && schedule.sampleLength > 0 && due) {
    try {
      const text = await timedSample(sampleLength(), schedule.temperature, schedule.topK);
      post({ type: 'sample', step, text });
    } catch (err) {
      return fail('sample', err);
    }
    lastSample.step = step;
  }
  if (wantRun && maxSteps > 0 && step === maxSteps) {
    wantRun = false;
    report(`finished the ${maxSteps}-step schedule`);
  }
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

async function timedSample(length, temperature, topK) {
  const t0 = performance.now();
  const text = await trainer.sample("\n", length, temperature, topK);
  const t1 = performance.now();
  msPerChar = (t1 - t0) / Math.max(1, length);
  lastSample = { at: t1, ms: t1 - t0, step: lastSample.step };
  return text;
}

async function pump() {
  if (busy) return;
  busy = true;
  try {
    for (;;) {
      const m = queue.shift();
      if (m) await handle(m);
      else if (wantRun && trainer) await trainStep();
      else break;
      report(); // a pause that arrived during the step is confirmed right after it
    }
  } catch (err) {
    fail('worker', err);
  } finally {
    busy = false;
  }
}

self.onmessage = (event) => {
  const m = event.data;
  // run/pause only flip the flag, so a pause takes effect after the step in flight
  if (m.type === 'run') wantRun = true;
  else if (m.type === 'pause') wantRun = false;
  else queue.push(m);
  if (!busy) report();
  pump();
};

// Anything that escapes (a Rust panic shows up as a RuntimeError) goes to the page.
self.addEventListener('unhandledrejection', (event) => {
  event.preventDefault();
  fail('worker', event.reason);
});
self.addEventListener('error', (event) => {
  event.preventDefault();
  fail('worker', event.error ?? event.message);
});

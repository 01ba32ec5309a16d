// The worker's side of the page <-> worker protocol: requests in, replies and events
// out. client.mjs is the page's side.
//
// Page -> worker. Every message with an `id` gets exactly one reply with that id:
// the result below, or {type:'error'}.
//   {type:'init', schedule, pkgUrl?, wasmUrl?}  load the wasm, look for a GPU -> 'ready' | 'error' (op 'load')
//   {type:'create', id, config, corpus, corpusName, run}  a new Trainer     -> 'created'
//   {type:'step', id}         one step when paused                          -> 'step' {stats} | 'skipped' (running)
//   {type:'sample', id, length?, temperature?, topK?, prompt?}              -> 'sample' | 'generated' (prompt) {step, text}
//   {type:'save', id}         the run as a checkpoint (www/checkpoints.mjs)  -> 'saved' {step, bytes}
//   {type:'restore', id, bytes, corpus, corpusName, run}  a Trainer from a checkpoint, in place of
//                             this one, which stays when the file is refused -> 'created' {loaded, stats}
//   {type:'autosave', every}  save every this many steps while running (0: never)
//   {type:'evaluate', id}                                                   -> 'eval' {step, loss}
//   {type:'trace', id}        one training step with the allocation trace on (its 'step' is
//                             posted too)                      -> 'trace' {trace, replay, plan} (docs/trace.md;
//                             plan: the planned policy's memoryPlan(), or null)
//   {type:'snapshot', id, file} / {type:'replay', id, ...}   a recording opened for the memory
//                             timeline, in a worker that trains nothing (worker-snapshot.mjs)
//   {type:'run'} / {type:'pause'}   train continuously / stop after the steps in flight (at most
//                             schedule.batchMs of training); each is confirmed by a 'state', at
//                             once or after the request in flight (`asked_at`: the last step
//                             posted when it arrived)
//   {type:'free'}             release GPU memory now
//   {type:'ping', seq}        answered at once, whatever runs     -> 'pong' {seq, op, ms}: the request
//                             in flight and for how long (the page's watchdog)
// Worker -> page, unasked: 'step' {stats} (stats.ahead: its call started before the one
//   before it came back), 'eval' {step, loss}, 'sample' {step, text},
//   'state' {running, step, reason, asked_at}, 'autosave' {step, bytes}, 'error' {op, kind, message, fatal}.
//   After a fatal one (the wasm trapped, or anything escaped) this worker answers every
//   request with that error: the page starts a new one.
//
// A wasm Trainer is one Rust object: two of its async methods must never overlap
// (wasm-bindgen would throw on the second borrow), so every call goes through one
// pump that runs queued requests between steps, one at a time.

import { cspError } from './csp.mjs';
import { kindError, kindOf, messageOf } from './errors.mjs';
import { Schedule } from './worker-schedule.mjs';
import { SnapshotReader } from './worker-snapshot.mjs';
import { Training } from './worker-training.mjs';

// The wasm package, where bundlers see it: a literal import() and a literal
// new URL(..., import.meta.url) are what Vite, webpack and Rollup follow (they emit
// the .wasm and rewrite both). A page may give its own URLs instead (mount()'s pkgUrl
// and wasmUrl).
const loadPackage = () => import('../pkg/tidepool.js');
const WASM_URL = new URL('../pkg/tidepool_bg.wasm', import.meta.url);
// For messages only: through a variable, so that no bundler copies it as an asset.
const PKG_PATH = '../pkg/tidepool.js';
const PACKAGE_URL = new URL(PKG_PATH, import.meta.url);

/** What the corpus name and the other string arguments of create and restore must be. */
function checkName(name, what) {
  if (name === undefined || name === null || typeof name === 'string') return name ?? undefined;
  throw kindError('config', `${what} must be a string (got ${typeof name}).`);
}

// The wasm hands back plain objects by contract; a class instance would lose its
// getters in postMessage, so anything that is not one goes through JSON.
export function plain(value) {
  if (value === null || typeof value !== 'object') return value;
  const proto = Object.getPrototypeOf(value);
  if (proto === Object.prototype || proto === null || Array.isArray(value)) return value;
  if (value instanceof Map) return Object.fromEntries(value);
  return JSON.parse(JSON.stringify(value));
}

async function checkGpu(navigator) {
  // Detected here up front, so the page can say so before anything is built.
  if (!navigator.gpu) {
    return {
      ok: false,
      message: self.isSecureContext
        ? 'no WebGPU: this browser does not offer it.'
        : 'no WebGPU: the page is not in a secure context (WebGPU needs https:// or http://localhost).',
    };
  }
  let adapter = null;
  try {
    adapter = await navigator.gpu.requestAdapter();
  } catch (err) {
    return { ok: false, message: `no GPU adapter: the request was refused (${messageOf(err)}).` };
  }
  if (!adapter) {
    return { ok: false, message: 'no GPU adapter: WebGPU is there but offered no adapter (disabled, blocklisted, or no GPU).' };
  }
  const info = adapter.info ?? {};
  return { ok: true, info: { vendor: info.vendor ?? '', architecture: info.architecture ?? '', description: info.description ?? '' } };
}

/**
 * Fetches the .wasm and checks that it is one (a dev server's fallback page or a
 * 404 otherwise ends as a compile error that names no URL).
 */
async function fetchWasm(url) {
  let res;
  try {
    res = await fetch(url);
  } catch (err) {
    throw kindError('load', `could not fetch the wasm ${url}: ${messageOf(err)}. Give mount() its URL as wasmUrl if your bundler moved it.`);
  }
  if (!res.ok) throw kindError('load', `could not fetch the wasm ${url}: HTTP ${res.status}. Give mount() its URL as wasmUrl if your bundler moved it.`);
  const bytes = await res.arrayBuffer();
  const magic = new Uint8Array(bytes, 0, Math.min(4, bytes.byteLength));
  if (magic.join() !== '0,97,115,109') {
    const type = res.headers.get('Content-Type') || 'no Content-Type';
    throw kindError('load', `${url} is not a wasm module (${type}, ${bytes.byteLength} bytes): a server's fallback page? Give mount() the .wasm's URL as wasmUrl.`);
  }
  return bytes;
}

/** One worker's state: the wasm, its trainer, what the page asked for, and the request queue. */
export class Session {
  constructor(scope) {
    this.scope = scope; // the worker's global: postMessage, navigator
    this.wasm = null;
    this.trainer = null;
    this.wantRun = false; // what the page asked for
    this.reported = false; // what the page was last told
    this.confirm = false; // a run or pause to confirm, changed or not
    this.lastPosted = 0; // the step of the last 'step' posted to the page
    this.askedAt = null; // lastPosted when the run or pause to confirm arrived
    this.busy = false;
    this.current = null; // {op, since, id, msg}: what the pump is waiting on, and for which request
    this.crash = null; // the fatal error, once there is one
    this.queue = [];
    this.violation = null; // a Content-Security-Policy violation seen while loading
    this.lastPanic = null; // the Rust panic's words, printed just before its trap
    this.schedule = new Schedule();
    this.training = new Training(this, this.schedule);
    this.files = new SnapshotReader();
    this.plain = plain;
  }

  post(msg, transfer = []) {
    if (msg.type === 'step') this.lastPosted = msg.stats?.step ?? this.lastPosted;
    this.scope.postMessage(msg, transfer);
  }

  /** Tells the page whether it runs, when that changed, a run or pause waits to be confirmed, or with `reason`. */
  report(reason) {
    const running = this.wantRun && this.trainer !== null;
    if (running !== this.reported || reason || this.confirm) {
      this.reported = running;
      this.confirm = false;
      this.post({ type: 'state', running, step: this.currentStep(), reason: reason ?? null, asked_at: this.askedAt });
    }
  }

  currentStep() {
    try {
      return this.trainer ? plain(this.trainer.stats())?.step ?? 0 : 0;
    } catch {
      return 0;
    }
  }

  /** What the pump now waits on, for the watchdog's pings. */
  phase(op) {
    this.current = { ...this.current, op, since: performance.now() };
  }

  /** What the wasm tells the page: presets and size policies (the menus), the corpus cap. */
  wasmInfo() {
    const ask = (name, otherwise) => {
      try {
        return typeof this.wasm[name] === 'function' ? plain(this.wasm[name]()) : otherwise;
      } catch {
        return otherwise;
      }
    };
    return { presets: ask('presets', []), policies: ask('policies', []), maxCorpusBytes: ask('maxCorpusBytes', undefined) };
  }

  needTrainer(op) {
    if (!this.trainer) throw kindError('config', `nothing to ${op}: no trainer has been built yet (press Start or Reset).`);
  }

  async load({ pkgUrl, wasmUrl }) {
    const pkg = pkgUrl === undefined ? PACKAGE_URL : new URL(pkgUrl);
    try {
      this.wasm = pkgUrl === undefined ? await loadPackage() : await import(/* @vite-ignore */ /* webpackIgnore: true */ String(pkg));
    } catch (err) {
      this.wasm = null;
      throw await this.loadError(pkg, `could not load the wasm package ${pkg}: ${messageOf(err)}. Build it with "make pkg", or give mount() its URL as pkgUrl.`);
    }
    // the package's own default finds its .wasm beside it, so a page's own pkgUrl keeps it
    const wasm = wasmUrl !== undefined ? new URL(wasmUrl) : pkgUrl === undefined ? WASM_URL : null;
    try {
      await this.wasm.default(wasm ? { module_or_path: await fetchWasm(wasm) } : undefined);
    } catch (err) {
      this.wasm = null;
      throw await this.loadError(wasm ?? pkg, messageOf(err), err);
    }
    this.schedule.bind(this.wasm.Schedule);
  }

  // A policy violation's event is a task of its own: it is waited for, and named when it came.
  async loadError(url, message, err) {
    await new Promise((next) => setTimeout(next, 20));
    if (this.violation) return cspError(this.violation, url.origin, self.origin);
    return err?.kind === 'load' ? err : kindError('load', message);
  }

  // Runs one request; returns the reply (without id) or throws.
  async handle(m) {
    switch (m.type) {
      case 'init': {
        this.schedule.update(m.schedule);
        await this.load(m);
        return { type: 'ready', ...this.wasmInfo(), gpu: await checkGpu(this.scope.navigator) };
      }
      case 'create': {
        if (!this.wasm) throw kindError('load', 'the wasm package is not loaded.');
        const args = [m.config ?? {}, m.corpus ?? undefined, checkName(m.corpusName, 'the corpus name')];
        m.corpus = null; // the worker keeps no copy (the wasm has its own)
        if (this.trainer) {
          // Checked against the device first (a bad corpus or setting loses nothing), then
          // the old trainer's buffers are freed before the new one is built: never two at once.
          try {
            await this.trainer.replace(...args);
          } catch (err) {
            if (!alive(this.trainer)) {
              this.trainer = null; // it was freed, and building the new one failed
              throw Object.assign(err, { gone: true });
            }
            throw err;
          }
        } else {
          this.trainer = await this.wasm.Trainer.create(...args);
        }
        return this.started(m.run);
      }
      case 'restore': {
        if (!this.wasm) throw kindError('load', 'the wasm package is not loaded.');
        const args = [m.bytes, m.corpus ?? undefined, checkName(m.corpusName, 'the corpus name')];
        m.bytes = m.corpus = null;
        // built beside the current trainer, which a refused file leaves untouched
        const loaded = await this.wasm.Trainer.load(...args);
        this.freeTrainer();
        this.trainer = loaded;
        return { ...this.started(m.run), loaded: true, stats: plain(this.trainer.stats()) };
      }
      case 'save': {
        this.needTrainer('save');
        const bytes = await this.trainer.save();
        return { type: 'saved', step: this.currentStep(), bytes, transfer: [bytes.buffer] };
      }
      case 'step':
        this.needTrainer('step');
        if (this.wantRun) return { type: 'skipped' }; // the loop steps anyway
        await this.training.call(m.id); // its 'step' message is the reply
        return null;
      case 'sample': {
        this.needTrainer('sample');
        const s = this.schedule.settings;
        const text = await this.training.sample(m.length ?? this.schedule.sampleLength(), m.temperature ?? s.temperature, m.topK ?? s.topK, m.prompt);
        // a prompt's text is the asker's alone; the page's running sample is an event
        return { type: m.prompt === undefined ? 'sample' : 'generated', step: this.currentStep(), text };
      }
      case 'evaluate':
        this.needTrainer('evaluate');
        return { type: 'eval', step: this.currentStep(), loss: await this.trainer.evaluate() };
      case 'trace': {
        this.needTrainer('trace');
        const trace = plain(await this.trainer.trace());
        this.post({ type: 'step', stats: plain(this.trainer.stats()) });
        const plan = plain(this.trainer.memoryPlan());
        return { type: 'trace', trace, replay: plain(this.wasm.replayTrace(JSON.stringify(trace))), plan };
      }
      case 'snapshot': {
        if (!this.wasm) throw kindError('load', 'the wasm package is not loaded.');
        const { file } = m;
        m.file = null; // the worker keeps no copy (the wasm has its own)
        return this.files.read(this.wasm, file);
      }
      case 'replay':
        return this.files.replay(m);
      case 'free':
        this.wantRun = false;
        this.freeTrainer();
        return null;
      default:
        throw kindError('internal', `unknown request ${m.type}`);
    }
  }

  freeTrainer() {
    try {
      this.trainer?.free();
    } catch {}
    this.trainer = null;
  }

  // A new trainer's schedule starts afresh; resolves the 'created' reply.
  started(run) {
    const model = plain(this.trainer.model());
    this.training.restart(model.steps);
    this.wantRun = Boolean(run);
    return { type: 'created', adapter: plain(this.trainer.adapter()), corpus: plain(this.trainer.corpus()), model };
  }

  /**
   * Reports a failure. A trap, or anything that escaped, leaves the wasm in an unknown
   * state (a RefCell borrowed for good, a future never polled again): the worker is
   * then dead, and every request queued or still to come is answered with the crash.
   * A lost device takes the trainer with it; other errors leave it as it was.
   */
  fail(op, err, id, { escaped = false } = {}) {
    let kind = kindOf(err);
    let text = messageOf(err);
    if (escaped || kind === 'crashed') {
      kind = 'crashed';
      const panic = this.lastPanic ? this.lastPanic.split('\n').slice(0, 2).join(' ').slice(0, 400) : text;
      text = `the wasm module crashed (a bug in tidepool; please report it): ${panic}`;
    }
    const fatal = kind === 'crashed';
    if (fatal) {
      this.crash ??= { op, kind, message: text };
      this.trainer = null; // not freed: its memory may be what broke
    } else if (kind === 'device_lost') this.freeTrainer();
    const gone = fatal || kind === 'device_lost' || Boolean(err?.gone);
    // a refused checkpoint, prompt or save leaves the run as it was; anything else pauses
    const harmless = ['restore', 'save', 'sample'].includes(op) && ['config', 'corpus', 'too_large'].includes(kind);
    if (!harmless) this.wantRun = false;
    this.training.quiet(); // the call ahead comes back before anything else; its failure is this one's
    this.post({ type: 'error', id, op, kind, message: text, fatal, gone });
    if (fatal) {
      for (const m of this.queue.splice(0)) if (m.id !== undefined) this.post({ type: 'error', ...this.crash, id: m.id, op: m.type, fatal });
    }
    this.report();
  }

  // One training call of the running loop, its failure reported.
  async runCall() {
    this.current = { op: 'step', since: performance.now() };
    try {
      await this.training.call();
    } catch (err) {
      this.fail(this.current?.op ?? 'step', err);
    }
  }

  async pump() {
    if (this.busy) return;
    this.busy = true;
    try {
      while (!this.crash) {
        if (this.training.ahead) {
          // the call started ahead comes back before any request or pause is served
          await this.runCall();
          this.current = null;
          if (!this.training.ahead) this.report();
          continue;
        }
        const m = this.queue.shift();
        if (m) {
          this.current = { op: m.type, since: performance.now(), id: m.id, msg: m };
          try {
            const { transfer, ...reply } = (await this.handle(m)) ?? {};
            if (reply.type) this.post(m.id !== undefined ? { ...reply, id: m.id } : reply, transfer);
          } catch (err) {
            this.fail(m.type === 'init' ? 'load' : m.type, err, m.id);
          }
        } else if (this.wantRun && this.trainer) {
          // Let the page's messages in before each step: a step's awaits may all be
          // microtasks, and a Pause waiting behind them would let several steps run.
          await yieldToMessages();
          if (!(this.wantRun && this.trainer) || this.queue.length) continue;
          await this.runCall();
        } else break;
        this.current = null;
        // a pause that arrived during the step is confirmed right after it (after the
        // call ahead, when there is one)
        if (!this.training.ahead) this.report();
      }
    } finally {
      this.current = null;
      this.busy = false;
    }
  }

  /** A message from the page. */
  receive(m) {
    if (m === null || typeof m !== 'object') return;
    if (m.type === 'ping') {
      // answered here, not queued: a pump stuck on a promise still answers, and says on what
      const { current } = this;
      this.post({ type: 'pong', seq: m.seq, op: current?.op ?? null, ms: current ? performance.now() - current.since : 0, crashed: Boolean(this.crash) });
      return;
    }
    if (this.crash) {
      if (m.id !== undefined) this.post({ type: 'error', ...this.crash, id: m.id, op: m.type, fatal: true });
      return;
    }
    // run/pause only flip the flag, so a pause takes effect after the steps in flight;
    // a create still waiting (or in flight) then starts its trainer as last asked
    if (m.type === 'run' || m.type === 'pause') {
      this.wantRun = m.type === 'run';
      this.confirm = true;
      this.askedAt = this.lastPosted;
      for (const q of [this.current?.msg, ...this.queue]) if (q?.type === 'create' || q?.type === 'restore') q.run = this.wantRun;
    } else if (m.type === 'autosave') {
      this.schedule.update({ autosaveEvery: m.every });
      return;
    } else this.queue.push(m);
    if (!this.busy) this.report();
    this.pump();
  }
}

function alive(t) {
  try {
    t.model();
    return true;
  } catch {
    return false;
  }
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

// The page's side of the worker protocol (worker-protocol.mjs is the worker's): one
// TrainerClient owns one worker, hence one wasm instance, one GPU device and one
// Trainer. Requests return promises, and every one of them settles: with the reply,
// with the worker's error, or with the reason the worker is gone (it crashed, stopped
// answering, or was replaced by start()). Everything the worker reports unasked is an
// event.
//
// Browsers start workers only from the page's own origin. When tidepool is loaded
// from another (a package CDN), the worker starts from a same-origin blob: module
// that imports the real worker.mjs over CORS; the worker then imports the wasm
// package, and fetches its .wasm, with CORS too. Same-origin pages start worker.mjs
// directly. A Content-Security-Policy that blocks any of it is named (csp.mjs).

import { cspError, violationOf } from './csp.mjs';
import { kindError } from './errors.mjs';

// Where worker.mjs is, for the origin check and messages. Through a variable: a
// literal new URL(..., import.meta.url) outside new Worker() makes bundlers copy the
// worker as a raw file, without its imports.
const WORKER_PATH = './worker.mjs';
const WORKER_HERE = new URL(WORKER_PATH, import.meta.url);

/**
 * A module worker for `script` (null: the package's own worker.mjs). Same origin: the
 * script itself, through the literal form bundlers follow (they bundle the worker and
 * its imports). Another origin (a package CDN): a same-origin blob: module that
 * imports it. Returns {worker, url, foreign}; `url` is what the Worker was given.
 */
function newWorker(script) {
  const target = script ?? WORKER_HERE;
  const options = { type: 'module', name: 'tidepool-trainer' };
  if (target.origin !== location.origin) {
    const url = URL.createObjectURL(new Blob([`import ${JSON.stringify(target.href)};\n`], { type: 'text/javascript' }));
    try {
      return { worker: new Worker(url, options), url, foreign: true };
    } catch (err) {
      URL.revokeObjectURL(url);
      throw Object.assign(err, { url, foreign: true });
    }
  }
  try {
    const worker = script ? new Worker(script, options) : new Worker(new URL('./worker.mjs', import.meta.url), { type: 'module', name: 'tidepool-trainer' });
    return { worker, url: target, foreign: false };
  } catch (err) {
    throw Object.assign(err, { url: target, foreign: false });
  }
}

/**
 * Why a same-origin worker script did not start, found by fetching it: missing, a
 * server's HTML fallback in its place, or (when it is there) one of its imports.
 */
async function whyNoWorker(url) {
  const fix = 'give mount() its URL as workerUrl if a bundler moved it';
  let res;
  try {
    res = await fetch(url, { cache: 'no-store' });
  } catch (err) {
    return `the training worker ${url} could not be fetched (${err?.message ?? err}): ${fix}`;
  }
  const type = res.headers.get('Content-Type') ?? '';
  if (!res.ok) return `the training worker ${url} could not be loaded (HTTP ${res.status}): ${fix}`;
  if (!/javascript|ecmascript/i.test(type)) return `the training worker ${url} is ${type || 'of no Content-Type'}, not JavaScript (a server's fallback page?): ${fix}`;
  return `the training worker ${url} did not start: one of the modules it imports failed to load (the browser's console names it)`;
}

/**
 * The watchdog: the worker is pinged every `every` ms. It is declared stalled when a
 * ping goes unanswered for `answer` ms (its event loop is blocked, or it died without
 * a word), or when one request or step has been in flight for `busy` ms (a promise
 * that will never settle). Generous by default: SwiftShader's first step compiles
 * every shader, and tokenising a large corpus blocks the worker for seconds.
 */
export const WATCHDOG = { every: 5_000, answer: 30_000, busy: 300_000 };

// Worker messages that the page hears as events (a reply of one of these types is both).
const EVENTS = new Set(['created', 'step', 'eval', 'sample', 'state', 'autosave', 'error']);

export class TrainerClient extends EventTarget {
  /**
   * @param {{pkgUrl?: string|URL, wasmUrl?: string|URL, workerUrl?: string|URL, schedule?: object, watchdog?: object}} [options]
   *   the URLs: where a bundler or a server put the wasm package's JS, its .wasm and
   *   worker.mjs (default: beside this module, as the package ships them); schedule:
   *   evalEvery, firstSample, sampleSeconds, sampleShare, sampleLength, temperature,
   *   topK, maxSteps, batchMs, maxAtOnce (see worker-schedule.mjs); watchdog: every, answer, busy (ms)
   */
  constructor({ pkgUrl, wasmUrl, workerUrl, schedule = {}, watchdog = {} } = {}) {
    super();
    const absolute = (url) => (url === undefined || url === null ? undefined : new URL(url, document.baseURI));
    this.pkgUrl = absolute(pkgUrl);
    this.wasmUrl = absolute(wasmUrl);
    this.workerUrl = absolute(workerUrl);
    this.schedule = schedule;
    this.watchdog = { ...WATCHDOG, ...watchdog };
    this.nextId = 1;
    this.pending = new Map(); // id -> {resolve, reject, quiet}
    this.worker = null;
    this.timer = 0;
  }

  /** Starts a new worker (ending the one there was); resolves with {presets, policies, gpu}. */
  start() {
    this.stop(kindError('stopped', 'the worker was replaced by a new one'));
    const script = this.workerUrl ?? WORKER_HERE;
    const blocked = (violation) => cspError(violation, script.origin, location.origin);
    let worker;
    let url;
    let foreign;
    try {
      ({ worker, url, foreign } = newWorker(this.workerUrl));
    } catch (err) {
      // some browsers refuse a worker that the page's policy blocks at once
      const csp = err?.name === 'SecurityError' ? blocked({ directive: 'worker-src', blocked: err.foreign ? 'blob' : script.href }) : null;
      return Promise.reject(csp ?? kindError('load', `the training worker ${script.href} could not start: ${err?.message ?? err}`, { op: 'load' }));
    }
    this.worker = worker;
    // The page's policy blocking this worker (worker-src) shows only as this event.
    const onViolation = (e) => {
      const v = violationOf(e);
      if (this.worker === worker && this.loading && (v.blocked === 'blob' || v.blocked === String(url) || v.blocked === script.href)) {
        this.die(Object.assign(blocked(v), { op: 'load' }));
      }
    };
    document.addEventListener('securitypolicyviolation', onViolation);
    this.unlisten = () => {
      document.removeEventListener('securitypolicyviolation', onViolation);
      if (foreign) URL.revokeObjectURL(url);
    };
    worker.onmessage = (event) => this.receive(event.data);
    // A module worker that cannot load (old browser, missing file, no CORS) only says
    // so here; later, anything uncaught in the worker is caught there first, so this
    // means dead. A policy violation may be reported just after: it is waited for.
    worker.onerror = (event) => {
      event.preventDefault?.();
      const loading = this.loading;
      if (!loading) {
        const text = event.message || 'it stopped';
        return this.die(kindError('crashed', `the training worker failed: ${text}`, { op: 'worker' }));
      }
      const where = foreign
        ? Promise.resolve(
            `the training worker could not load from ${script.href}: that server must send Access-Control-Allow-Origin, and a Content-Security-Policy must allow blob: and ${script.origin} in worker-src`,
          )
        : whyNoWorker(script);
      // (a policy violation, reported just after, takes precedence: it is waited for)
      const wait = new Promise((next) => setTimeout(next, 50));
      Promise.all([where, wait]).then(([text]) => this.worker === worker && this.die(kindError('load', event.message || text, { op: 'load' })));
    };
    this.pong = { seq: 0, answered: 0, sent: 0 };
    this.timer = setInterval(() => this.check(), this.watchdog.every);
    this.loading = true;
    const urls = { pkgUrl: this.pkgUrl?.href, wasmUrl: this.wasmUrl?.href };
    return this.request({ type: 'init', ...urls, schedule: this.schedule }, { quiet: true }).then(
      (m) => {
        this.loading = false;
        this.unlisten?.();
        return { presets: m.presets, policies: m.policies, maxCorpusBytes: m.maxCorpusBytes, gpu: m.gpu };
      },
      (err) => {
        this.loading = false;
        this.unlisten?.();
        throw err;
      },
    );
  }

  /** Ends the worker; every request still waiting rejects with `reason`. */
  stop(reason = kindError('stopped', 'the worker was stopped')) {
    this.unlisten?.();
    this.unlisten = null;
    clearInterval(this.timer);
    this.timer = 0;
    if (this.worker) this.worker.terminate();
    this.worker = null;
    const waiting = [...this.pending.values()];
    this.pending.clear();
    for (const { reject } of waiting) reject(reason);
  }

  /** The worker is gone for good: end it, settle everything, and tell the page. */
  die(err) {
    if (!this.worker) return;
    this.stop(err);
    this.emit('error', { op: err.op ?? 'worker', kind: err.kind, message: err.message, fatal: true });
  }

  terminate() {
    this.stop();
  }

  get alive() {
    return this.worker !== null;
  }

  emit(type, detail) {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }

  check() {
    if (!this.worker) return;
    const { pong, watchdog } = this;
    const now = performance.now();
    // A page in the background gets its timers slowed: judge only while it is shown,
    // and give a ping that was out meanwhile a fresh wait.
    if (document.hidden) {
      this.wasHidden = true;
      return;
    }
    if (this.wasHidden && pong.answered < pong.seq) pong.sent = now;
    this.wasHidden = false;
    if (pong.sent && pong.answered < pong.seq && now - pong.sent > watchdog.answer) {
      return this.die(
        kindError('stalled', `the training worker stopped answering (no reply in ${Math.round((now - pong.sent) / 1000)} s).`, { op: 'worker' }),
      );
    }
    if (pong.busy && pong.busy.ms > watchdog.busy) {
      const { op, ms } = pong.busy;
      return this.die(kindError('stalled', `the training worker is stuck: "${op}" has not finished in ${Math.round(ms / 1000)} s.`, { op }));
    }
    if (pong.answered === pong.seq) {
      pong.seq++;
      pong.sent = now;
      this.worker.postMessage({ type: 'ping', seq: pong.seq });
    }
  }

  receive(m) {
    if (m.type === 'pong') {
      if (m.seq === this.pong.seq) this.pong.answered = m.seq;
      this.pong.busy = m.op ? { op: m.op, ms: m.ms } : null;
      return;
    }
    const waiter = m.id !== undefined ? this.pending.get(m.id) : undefined;
    if (waiter) this.pending.delete(m.id);
    if (m.type === 'error') {
      const err = kindError(m.kind, m.message, { op: m.op, fatal: m.fatal, gone: m.gone });
      waiter?.reject(err);
      // a crash ends this worker: everything else that waits on it fails with it
      if (m.fatal) return this.die(err);
      // a quiet request's caller shows its own error
      if (waiter?.quiet) return;
    } else if (waiter) waiter.resolve(m);
    if (EVENTS.has(m.type)) this.emit(m.type, m);
  }

  /**
   * Sends a request; the promise settles with the reply or rejects with an Error
   * with `kind` (see errors.mjs). Errors are also 'error' events unless `quiet`.
   */
  request(msg, { quiet = false } = {}) {
    if (!this.worker) return Promise.reject(kindError('stopped', 'the worker is not running: restart it'));
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject, quiet });
      this.worker.postMessage({ ...msg, id });
    });
  }

  /** A new Trainer; the previous one is freed only once this one exists. Errors are the caller's to show. */
  create(config, corpus, run = false, corpusName = undefined) {
    return this.request({ type: 'create', config, corpus, corpusName, run }, { quiet: true });
  }
  run() {
    this.worker?.postMessage({ type: 'run' });
  }
  pause() {
    this.worker?.postMessage({ type: 'pause' });
  }
  /** One step when paused: resolves with the 'step' reply ({stats}), or {type:'skipped'} while running. */
  step() {
    return this.request({ type: 'step' });
  }
  sample(length, temperature, topK) {
    return this.request({ type: 'sample', length, temperature, topK });
  }
  evaluate() {
    return this.request({ type: 'evaluate' });
  }
  /** One traced training step: resolves with {trace, replay} (docs/trace.md). */
  trace() {
    return this.request({ type: 'trace' });
  }
  free() {
    this.worker?.postMessage({ type: 'free' });
  }
}

// The page's side of the worker protocol (see worker.mjs): one TrainerClient owns
// one worker, hence one wasm instance, one GPU device and one Trainer. Requests
// return promises, and every one of them settles: with the reply, with the worker's
// error, or with the reason the worker is gone (it crashed, stopped answering, or
// was replaced by start()). Everything the worker reports unasked is an event.
//
// Browsers start workers only from the page's own origin. When tidepool is loaded
// from another (a package CDN), the worker starts from a same-origin blob: module
// that imports the real worker.mjs over CORS; the worker then imports the wasm
// package, and fetches its .wasm, with CORS too. Same-origin pages start worker.mjs
// directly. A Content-Security-Policy that blocks any of it is named (csp.mjs).

import { cspError, violationOf } from './csp.mjs';
import { kindError } from './errors.mjs';

const WORKER_URL = new URL('./worker.mjs', import.meta.url);
const PKG_URL = new URL('../pkg/tidepool.js', import.meta.url);

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
   * @param {{pkgUrl?: string|URL, workerUrl?: string|URL, schedule?: object, watchdog?: object}} [options]
   *   schedule: evalEvery, firstSample, sampleSeconds, sampleShare, sampleLength,
   *   temperature, topK, maxSteps, batchMs, maxAtOnce (see worker.mjs); watchdog: every, answer, busy (ms)
   */
  constructor({ pkgUrl = PKG_URL, workerUrl = WORKER_URL, schedule = {}, watchdog = {} } = {}) {
    super();
    this.pkgUrl = String(new URL(pkgUrl, document.baseURI));
    this.workerUrl = workerUrl;
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
    const script = new URL(this.workerUrl, document.baseURI);
    const foreign = script.origin !== location.origin;
    const url = foreign ? URL.createObjectURL(new Blob([`import ${JSON.stringify(script.href)};\n`], { type: 'text/javascript' })) : script;
    const blocked = (violation) => cspError(violation, script.origin, location.origin);
    let worker;
    try {
      worker = new Worker(url, { type: 'module', name: 'tidepool-trainer' });
    } catch (err) {
      // some browsers refuse a worker that the page's policy blocks at once
      if (foreign) URL.revokeObjectURL(url);
      const csp = err?.name === 'SecurityError' ? blocked({ directive: 'worker-src', blocked: foreign ? 'blob' : script.href }) : null;
      return Promise.reject(csp ?? kindError('load', `the training worker could not start: ${err?.message ?? err}`, { op: 'load' }));
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
      const where = foreign
        ? `the training worker could not load from ${script.href}: that server must send Access-Control-Allow-Origin, and a Content-Security-Policy must allow blob: and ${script.origin} in worker-src`
        : 'the training worker could not start (does this browser run module workers?)';
      const text = event.message || where;
      const err = kindError(loading ? 'load' : 'crashed', loading ? text : `the training worker failed: ${text}`, { op: loading ? 'load' : 'worker' });
      if (loading) setTimeout(() => this.worker === worker && this.die(err), 50);
      else this.die(err);
    };
    this.pong = { seq: 0, answered: 0, sent: 0 };
    this.timer = setInterval(() => this.check(), this.watchdog.every);
    this.loading = true;
    return this.request({ type: 'init', pkgUrl: this.pkgUrl, schedule: this.schedule }, { quiet: true }).then(
      (m) => {
        this.loading = false;
        this.unlisten?.();
        return { presets: m.presets, policies: m.policies, gpu: m.gpu };
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

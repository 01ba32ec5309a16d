// The page's side of the worker protocol (see worker.mjs): one TrainerClient owns
// one worker, hence one wasm instance, one GPU device and one Trainer. Requests
// that answer return promises; everything the worker reports unasked is an event.

const WORKER_URL = new URL('./worker.mjs', import.meta.url);
const PKG_URL = new URL('../pkg/tidepool.js', import.meta.url);

export class TrainerClient extends EventTarget {
  /**
   * @param {{pkgUrl?: string|URL, workerUrl?: string|URL, schedule?: object}} [options]
   *   schedule: evalEvery, firstSample, sampleSeconds, sampleShare, sampleLength,
   *   temperature, topK, maxSteps (see worker.mjs)
   */
  constructor({ pkgUrl = PKG_URL, workerUrl = WORKER_URL, schedule = {} } = {}) {
    super();
    this.pkgUrl = String(new URL(pkgUrl, document.baseURI));
    this.workerUrl = workerUrl;
    this.schedule = schedule;
    this.nextId = 1;
    this.pending = new Map();
    this.worker = null;
    this.ready = null;
  }

  /** Starts (or restarts) the worker; resolves with {presets, gpu}. */
  start() {
    this.terminate();
    const worker = new Worker(this.workerUrl, { type: 'module', name: 'tidepool-trainer' });
    this.worker = worker;
    this.ready = new Promise((resolve, reject) => {
      this.readyWaiters = { resolve, reject };
    });
    worker.onmessage = (event) => this.receive(event.data);
    // a module worker that cannot load (old browser, missing file) only says so here
    worker.onerror = (event) => {
      event.preventDefault?.();
      const text = event.message || 'the training worker could not start (does this browser run module workers?)';
      this.readyWaiters?.reject(new Error(text));
      this.emit('error', { op: 'load', message: text });
    };
    worker.postMessage({ type: 'init', pkgUrl: this.pkgUrl, schedule: this.schedule });
    return this.ready;
  }

  terminate() {
    if (this.worker) this.worker.terminate();
    this.worker = null;
    for (const { reject } of this.pending.values()) reject(new Error('the worker was stopped'));
    this.pending.clear();
  }

  emit(type, detail) {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }

  receive(m) {
    if (m.type === 'ready') this.readyWaiters?.resolve({ presets: m.presets, gpu: m.gpu });
    if (m.type === 'error' && m.op === 'load') this.readyWaiters?.reject(new Error(m.message));
    const waiter = m.id !== undefined ? this.pending.get(m.id) : undefined;
    if (waiter) {
      this.pending.delete(m.id);
      if (m.type === 'error') waiter.reject(Object.assign(new Error(m.message), { op: m.op }));
      else waiter.resolve(m);
      // a failed request is the caller's to show; success is also an event below
      if (m.type === 'error') return;
    }
    this.emit(m.type, m);
  }

  request(msg) {
    if (!this.worker) return Promise.reject(new Error('the worker is not running'));
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ ...msg, id });
    });
  }

  /** A new Trainer; the previous one is freed only once this one exists. */
  create(config, corpus, run = false, corpusName = undefined) {
    return this.request({ type: 'create', config, corpus, corpusName, run });
  }
  run() {
    this.worker?.postMessage({ type: 'run' });
  }
  pause() {
    this.worker?.postMessage({ type: 'pause' });
  }
  step() {
    this.worker?.postMessage({ type: 'step' });
  }
  sample(length, temperature, topK) {
    return this.request({ type: 'sample', length, temperature, topK });
  }
  evaluate() {
    return this.request({ type: 'evaluate' });
  }
  free() {
    this.worker?.postMessage({ type: 'free' });
  }
}

// tidepool's trainer widget: controls, live charts of the buffer pool, samples.
// Any page can import this module and either
//   mount(element, options)          -> a controller (start, pause, ...)
// or write
//   <tidepool-trainer preset="tiny" pool="off" autostart></tidepool-trainer>
// Each widget owns its own Web Worker (so its own wasm instance, GPU device and
// Trainer): several run on one page independently. index.html is one of them.
// The element renders into a shadow root (mount() does with `shadow: true`), so a
// host page's CSS cannot break it and its CSS never leaks out; it loads from any
// origin that sends CORS headers (a package CDN): see client.mjs for the worker.

import { TrainerClient } from './client.mjs';
import { Chart, fmtBytes, fmtBytesShort, fmtCount } from './charts.mjs';
import { MAX_CORPUS_BYTES, checkSize, defaultCorpusUrl, fetchCorpus, readFile, utf8Bytes } from './corpus.mjs';
import { kindError, kindOf, messageOf } from './errors.mjs';
import { TimelinePanel } from './timeline.mjs';
import { adoptStyles } from './styles.mjs';
import { Checkpoints, isCheckpoint, panel as checkpointPanel } from './checkpoints.mjs';
// Above this many points a series is thinned before drawing: the eye cannot
// tell, and a frame stays cheap however long the run.
const MAX_POINTS = 2000;

const BROWSERS =
  'WebGPU is in Chrome and Edge 113+ (on Linux start them with --enable-unsafe-webgpu --enable-features=Vulkan), ' +
  'Safari 26+, and Firefox 141+ on Windows (elsewhere set dom.webgpu.enabled in about:config). ' +
  'It needs https:// or http://localhost.';

// The widget's own options. Every other option (preset, pool, policy, lr, batch,
// context, seed, steps, dropout, ...) is a training setting: it goes to the wasm's
// Trainer.create as it is, and the wasm checks it and says what is wrong.
const DEFAULTS = {
  title: 'tidepool',
  corpus: undefined, // text or bytes; undefined: the default corpus (Tiny Shakespeare)
  corpusName: 'custom text',
  corpusUrl: undefined, // fetched at mount when given
  autostart: false,
  pkgUrl: undefined, // defaults to ../pkg/tidepool.js next to this module
  shadow: false, // render into a shadow root with its own styles (the element always does)
  schedule: {}, // evaluation and sampling cadence, see worker.mjs
  watchdog: {}, // how soon a silent worker is noticed, see client.mjs
  autosaveEvery: 200, // steps between saves to IndexedDB for "Resume the last run" (0: none)
  autosaveKey: 'last', // the saved run's key in IndexedDB (give each widget on a page its own)
};

/** Splits mount()'s options into the widget's own and the training settings (flat, or in `settings`). */
function splitOptions(options) {
  const widget = { ...DEFAULTS };
  const settings = {};
  for (const [key, value] of Object.entries(options)) {
    if (value === undefined) continue;
    if (key === 'settings') Object.assign(settings, value);
    else if (key in DEFAULTS) widget[key] = value;
    else settings[key] = value;
  }
  return { widget, settings };
}

let instances = 0;

/**
 * Where the widget renders: into `host` itself, its styles adopted by the document, or
 * (shadow) into a fresh .tp box in host's open shadow root, which alone adopts them.
 */
function renderRoot(host, shadow) {
  if (!shadow) {
    host.classList.add('tp');
    return { root: host, styled: adoptStyles(host.ownerDocument) };
  }
  const tree = host.shadowRoot ?? host.attachShadow({ mode: 'open' });
  const root = host.ownerDocument.createElement('div');
  root.className = 'tp';
  // the one way in for a host page: tidepool-trainer::part(trainer) { --tp-bg: ... }
  root.setAttribute('part', 'trainer');
  tree.replaceChildren(root);
  return { root, styled: adoptStyles(tree) };
}

const escapeHtml = (s) =>
  String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);

function template(id, o, settings) {
  const title = o.title ? `<h2 class="tp-title">${escapeHtml(o.title)}</h2>` : '';
  const num = (v) => (v === undefined || v === null ? '' : escapeHtml(v));
  // The menus are filled from the wasm once it is loaded (fillMenus); until then they
  // show what was asked for. An empty policy leaves it to the trainer's default.
  const option = (v, label = v) => `<option value="${escapeHtml(v)}" selected>${escapeHtml(label)}</option>`;
  const preset = settings.preset === undefined ? '' : option(settings.preset);
  const policy = settings.policy === undefined ? option('', 'default') : option(settings.policy);
  return `
  <div class="tp-head">
    ${title}
    <p class="tp-status" role="status" aria-live="polite" data-ref="status">Loading…</p>
  </div>
  <div class="tp-error" data-testid="error" data-ref="error" role="alert" hidden>
    <p class="tp-error-title" data-ref="errorTitle"></p>
    <p class="tp-error-text" data-ref="errorText"></p>
    <div class="tp-error-actions">
      <button type="button" class="tp-primary" data-ref="restart" hidden>Restart</button>
      <button type="button" data-ref="dismiss">Dismiss</button>
    </div>
  </div>
  <div class="tp-controls" role="group" aria-label="Training">
    <button type="button" class="tp-primary" data-testid="start" data-ref="start">Start</button>
    <button type="button" data-testid="pause" data-ref="pause" disabled>Pause</button>
    <button type="button" data-testid="step-once" data-ref="stepOnce">Step once</button>
    <button type="button" data-testid="reset" data-ref="reset">Reset</button>
    <label class="tp-switch">
      <input type="checkbox" role="switch" data-testid="pool-toggle" data-ref="pool" ${settings.pool === false ? '' : 'checked'}
        aria-describedby="${id}-pool-hint">
      <span>Pool</span>
    </label>
    <span class="tp-hint" id="${id}-pool-hint">switching restarts training</span>
  </div>
  <details class="tp-settings">
    <summary>Settings</summary>
    <div class="tp-fields">
      <label>Model <select data-ref="preset">${preset}</select></label>
      <label>Learning rate <input type="number" inputmode="decimal" step="any" min="0" data-ref="lr" value="${num(settings.lr)}" placeholder="preset"></label>
      <label>Batch <input type="number" inputmode="numeric" step="1" min="1" data-ref="batch" value="${num(settings.batch)}" placeholder="preset"></label>
      <label>Context <input type="number" inputmode="numeric" step="1" min="2" data-ref="context" value="${num(settings.context)}" placeholder="preset"></label>
      <label>Size classes <select data-ref="policy">${policy}</select></label>
      <label>Precision <select data-ref="precision" data-testid="precision">
        <option value="f32"${settings.precision === 'f16' ? '' : ' selected'}>f32</option>
        <option value="f16"${settings.precision === 'f16' ? ' selected' : ''}>f16 matmuls</option>
      </select></label>
    </div>
    <p class="tp-hint" data-ref="precisionHint" data-testid="precision-hint"></p>
    <p class="tp-hint" data-ref="settingsHint">Empty fields take the preset's value. Changes apply on Reset.</p>
  </details>
  ${checkpointPanel(id)}
  <div class="tp-corpus" data-ref="drop">
    <p class="tp-corpus-info"><span class="tp-label">Corpus</span>
      <span data-ref="corpusName">default</span> <span class="tp-muted" data-ref="corpusInfo"></span></p>
    <div class="tp-corpus-actions">
      <label class="tp-button">Choose a text file…<input type="file" class="tp-visually-hidden" data-testid="corpus-file"
        data-ref="file" accept=".txt,.md,.csv,.tsv,.json,.html,.xml,.tex,.js,.py,.rs,text/*"></label>
      <button type="button" data-ref="defaultCorpus" hidden>Use the default corpus</button>
      <span class="tp-hint">or drop one here</span>
    </div>
  </div>
  <dl class="tp-figures">
    <div class="tp-wide"><dt>Device</dt><dd data-testid="adapter" data-ref="adapter"></dd></div>
    <div><dt>Step</dt><dd><span data-testid="step-count" data-ref="step">0</span></dd></div>
    <div><dt>Loss</dt><dd><span data-testid="loss" data-ref="loss"></span></dd></div>
    <div><dt>Held-out loss</dt><dd><span data-ref="valLoss"></span></dd></div>
    <div><dt>Hit rate, this step</dt><dd><span data-testid="hit-rate" data-ref="hitRate"></span> %</dd></div>
    <div><dt>Buffers created, this step</dt><dd><span data-testid="buffers-created" data-ref="created"></span></dd></div>
    <div><dt>Bytes held by the pool</dt><dd><span data-testid="bytes-held" data-ref="held"></span>
      <span class="tp-muted" data-ref="heldHuman"></span></dd></div>
    <div><dt>Step time</dt><dd><span data-ref="ms"></span> ms</dd></div>
    <div><dt>Tokens per second</dt><dd><span data-ref="tps"></span></dd></div>
  </dl>
  <p class="tp-model tp-muted" data-ref="model"></p>
  <div class="tp-charts">
    <figure class="tp-chart" data-testid="chart-loss" data-ref="chartLoss" data-points="0">
      <figcaption>Loss <span class="tp-muted">training, held-out<span data-ref="prevLoss"></span></span></figcaption>
      <div class="tp-plot" role="img" aria-label="Loss per step"></div></figure>
    <figure class="tp-chart" data-testid="chart-hit-rate" data-ref="chartHit" data-points="0">
      <figcaption>Pool hit rate <span class="tp-muted">and GPU objects created (buffers, bind groups, pipelines), per step</span></figcaption>
      <div class="tp-plot" role="img" aria-label="Pool hit rate per step"></div></figure>
    <figure class="tp-chart" data-testid="chart-bytes" data-ref="chartBytes" data-points="0">
      <figcaption>Bytes <span class="tp-muted">held free by the pool, and in use</span></figcaption>
      <div class="tp-plot" role="img" aria-label="Bytes held and in use per step"></div></figure>
    <figure class="tp-chart" data-testid="chart-buckets" data-ref="chartBuckets" data-points="0">
      <figcaption>Free buffers per size class <span class="tp-muted">now</span></figcaption>
      <p class="tp-empty tp-muted" data-ref="bucketsEmpty"></p>
      <div class="tp-plot" role="img" aria-label="Free buffers per size class"></div></figure>
    <figure class="tp-chart" data-testid="chart-step-time" data-ref="chartTime" data-points="0">
      <figcaption>Step time <span class="tp-muted">ms, and tokens per second<span data-ref="prevTime"></span></span></figcaption>
      <div class="tp-plot" role="img" aria-label="Step time per step"></div></figure>
    <section class="tp-sample" aria-labelledby="${id}-sample-h">
    <div class="tp-sample-head">
      <h3 id="${id}-sample-h">Sample</h3>
      <span class="tp-muted" data-ref="sampleStep">from the current model, refreshed as it trains</span>
      <button type="button" data-ref="sampleNow">Sample now</button>
    </div>
    <pre data-testid="sample" data-ref="sample" tabindex="0" aria-label="Sampled text"></pre>
    </section>
  </div>
  <details data-ref="timeline"></details>`;
}

function emptyRun(label) {
  return { label, n: 0, x: [], loss: [], val: [], hit: [], hitCum: [], created: [], bindGroups: [], pipelines: [], held: [], inUse: [], ms: [], tps: [], sizes: new Set(), latest: null };
}

// Thins `arr` (length n) to at most MAX_POINTS by taking the last value present
// in each window, padding to `total` with nulls.
function column(arr, total, stride) {
  const out = new Array(Math.ceil(total / stride));
  for (let j = 0; j < out.length; j++) {
    let v = null;
    const end = Math.min((j + 1) * stride, arr.length);
    for (let i = end - 1; i >= j * stride; i--) {
      if (arr[i] != null) {
        v = arr[i];
        break;
      }
    }
    out[j] = v;
  }
  return out;
}

const fixed = (v, digits) => (v == null || !Number.isFinite(v) ? '' : v.toFixed(digits));
const pct = (v) => `${Math.round(v * 100)}%`;

// What each kind of error is called, what it adds, and whether Restart is the way on.
const SAY = {
  config: ['Check the settings'],
  too_large: ['Too large for this GPU'],
  corpus: ['This corpus cannot be used'],
  no_webgpu: ['No WebGPU here'],
  device_lost: ['The GPU device was lost', 'Restart builds a new device and trains again.', true],
  crashed: ['tidepool crashed', 'Restart starts it afresh.', true],
  stalled: ['tidepool stopped answering', 'Restart starts it afresh.', true],
  storage: ['The run was not saved in this browser'],
  load: ['The wasm package did not load', '', true],
  csp: ["Blocked by this page's Content-Security-Policy"],
  busy: ['tidepool was asked twice at once', 'Wait for the first request to finish.'],
  internal: ['Something went wrong', '', true],
};

/** [title, text, restart] for an error a person can act on. */
function describe(err) {
  const kind = kindOf(err);
  const message = messageOf(err);
  const [title, more = '', restart = false] = SAY[kind] ?? SAY.internal;
  const extra = kind === 'no_webgpu' && !/chrome/i.test(message) ? BROWSERS : more;
  return [title, extra ? `${message} ${extra}` : message, restart];
}

// The kinds after which this worker is gone: a new one is needed.
const WORKER_GONE = ['crashed', 'stalled', 'load'];

class TidepoolWidget {
  constructor(host, options) {
    const { widget, settings } = splitOptions(options);
    this.opts = widget;
    this.settings = settings; // training settings not on the settings form, passed on as they are
    this.id = `tp${++instances}`;
    this.running = false;
    this.hasTrainer = false;
    this.creating = 0; // create requests in flight
    // null: the default corpus; else {name, data} with data a string or bytes
    this.corpus = this.opts.corpus === undefined ? null : { name: this.opts.corpusName, data: this.opts.corpus };
    this.defaultCorpus = null; // {name, bytes} once fetched
    this.wasmInfo = { maxCorpusBytes: MAX_CORPUS_BYTES, defaultCorpusPath: undefined }; // what the wasm says, once loaded
    this.cur = emptyRun('');
    this.prev = null;
    this.bucketSizes = [];
    this.raf = 0;
    this.destroyed = false;
    this.loaded = false; // the worker has the wasm package
    this.host = host; // the element given: events and the controller are on it
    const { root, styled } = renderRoot(host, this.opts.shadow);
    this.root = root; // the .tp box everything renders into
    root.innerHTML = template(this.id, this.opts, settings);
    this.el = {};
    for (const node of root.querySelectorAll('[data-ref]')) this.el[node.dataset.ref] = node;
    this.buildCharts();
    this.timeline = new TimelinePanel(this.el.timeline, { trace: () => this.client.trace() });
    // charts built before the styles arrived take their colours again
    styled.then(() => !this.destroyed && Object.values(this.charts).forEach((c) => c.restyle()));
    this.wire();
    const schedule = { ...this.opts.schedule, autosaveEvery: this.opts.autosaveEvery };
    this.client = new TrainerClient({ pkgUrl: this.opts.pkgUrl, schedule, watchdog: this.opts.watchdog });
    this.listen();
    this.checkpoints = new Checkpoints(this);
    this.boot(true);
  }

  // ---- lifecycle ---------------------------------------------------------

  async boot(first) {
    this.loaded = false;
    this.setStatus('Loading the wasm package…');
    let ready;
    try {
      ready = await this.client.start();
    } catch (err) {
      if (err.kind === 'stopped' || this.destroyed) return; // a newer start() took over
      this.showError(err);
      this.setStatus('Not loaded.');
      return;
    }
    if (this.destroyed) return;
    this.loaded = true;
    this.wasmInfo = {
      maxCorpusBytes: ready.maxCorpusBytes ?? MAX_CORPUS_BYTES,
      defaultCorpusPath: ready.defaultCorpusPath,
    };
    this.fillMenus(ready);
    if (!ready.gpu.ok) {
      this.setStatus('No WebGPU in this browser.');
      this.showError(kindError('no_webgpu', ready.gpu.message));
      return;
    }
    const info = ready.gpu.info;
    this.el.adapter.textContent = info.description || [info.vendor, info.architecture].filter(Boolean).join(' ') || 'WebGPU adapter';
    if (first && this.opts.corpusUrl && !this.corpus) {
      try {
        const { name, bytes } = await fetchCorpus(new URL(this.opts.corpusUrl, document.baseURI), this.wasmInfo.maxCorpusBytes);
        this.corpus = { name, data: bytes };
      } catch (err) {
        this.showError(kindError('corpus', `${messageOf(err)}. Training uses the default corpus.`));
      }
    }
    await this.create({ run: (first && this.opts.autostart) || this.wantRunAfterRestart === true });
    this.wantRunAfterRestart = false;
  }

  destroy() {
    this.destroyed = true;
    cancelAnimationFrame(this.raf);
    this.client.terminate();
    for (const c of Object.values(this.charts)) c.destroy();
    this.timeline.destroy();
    this.schemeQuery?.removeEventListener('change', this.onScheme);
    if (this.root === this.host) {
      this.root.innerHTML = '';
      this.root.classList.remove('tp');
    } else this.root.remove();
  }

  // ---- requests -----------------------------------------------------------

  /** The training settings: those given at mount, then the form's. Unchecked: the wasm checks them. */
  config() {
    const n = (input) => (input.value.trim() === '' ? undefined : Number(input.value));
    const config = {
      ...this.settings,
      preset: this.el.preset.value || undefined,
      lr: n(this.el.lr),
      batch: n(this.el.batch),
      context: n(this.el.context),
      policy: this.el.policy.value || undefined,
      precision: this.el.precision.value,
      pool: this.el.pool.checked,
    };
    for (const k of Object.keys(config)) if (config[k] === undefined) delete config[k];
    return config;
  }

  /**
   * The corpus to send: the chosen one (over the size cap: refused here, before it
   * is copied to the worker), or the default fetched once from data/. If that cannot
   * be fetched, nothing is sent, and the wasm's error says what it needs.
   */
  async corpusData(corpus) {
    if (corpus) {
      const { name, data } = corpus;
      checkSize(name, typeof data === 'string' ? utf8Bytes(data) : data.byteLength, this.wasmInfo.maxCorpusBytes);
      return corpus;
    }
    if (!this.defaultCorpus) {
      try {
        this.defaultCorpus = await fetchCorpus(defaultCorpusUrl(this.wasmInfo.defaultCorpusPath), this.wasmInfo.maxCorpusBytes);
      } catch (err) {
        // nothing is sent: the wasm's error says what it needs
        console.warn(`tidepool: ${messageOf(err)}`);
        return { name: undefined, data: undefined };
      }
    }
    return { name: this.defaultCorpus.name, data: this.defaultCorpus.bytes };
  }

  /** Builds a new Trainer; on failure the one running keeps running. Resolves true when built. */
  async create({ run = false, corpus = this.corpus, config = this.config() } = {}) {
    this.creating++;
    this.updateButtons();
    this.setStatus(`Building the ${config.preset ?? 'default'} model${config.pool === false ? ' (pool off)' : ''}…`);
    try {
      const send = await this.corpusData(corpus);
      const m = await this.client.create(config, send.data, run, send.name);
      this.corpus = corpus;
      const c = m.corpus;
      this.el.corpusName.textContent = corpus ? corpus.name : `${c.name} (default)`;
      this.el.corpusInfo.textContent = `${fmtBytes(c.bytes)} · vocab ${c.vocab} · ${c.tokens.toLocaleString('en')} tokens`;
      this.el.defaultCorpus.hidden = !corpus;
      this.el.settingsHint.classList.remove('tp-changed');
      this.el.settingsHint.textContent = "Empty fields take the preset's value. Changes apply on Reset.";
      return true;
    } catch (err) {
      // the old trainer was freed and the new one could not be built (a GPU error)
      if (err.gone && !WORKER_GONE.includes(err.kind)) {
        this.hasTrainer = false;
        this.running = false;
      }
      // a crash or a stall is shown by the error event; a replaced worker is no error
      if (!['stopped', 'crashed', 'stalled'].includes(err.kind)) this.showError(err);
      if (!this.destroyed && err.kind !== 'stopped') this.setStatus(this.hasTrainer ? this.stateText() : 'Not started.');
      return false;
    } finally {
      this.creating--;
      // Start pressed while the model was being built
      if (!this.creating) {
        if (this.startAfterCreate && this.hasTrainer) this.client.run();
        this.startAfterCreate = false;
      }
      this.updateButtons();
    }
  }

  start() {
    this.clearError();
    if (!this.client.alive) return this.restart(true); // it crashed or stalled: a new worker
    if (!this.hasTrainer) {
      // nothing built yet (or the device was lost): build, then run
      if (this.creating) this.startAfterCreate = true;
      else if (this.loaded) this.create({ run: true });
      else this.restart(true);
      return;
    }
    this.setRunning(true);
    this.client.run();
  }

  pause() {
    this.startAfterCreate = false;
    this.setRunning(false);
    this.client.pause();
  }

  // Start and Pause show at once, though the worker may be busy building a trainer
  // for seconds: it confirms every run and pause with a 'state', which corrects this.
  // A pause is "Pausing" until then: the steps in flight still land.
  setRunning(running) {
    this.pausing = !running && this.running;
    this.running = running;
    this.updateButtons();
    if (!this.creating) this.setStatus(this.stateText());
  }

  /** One step when paused; resolves once it is done (failures show as errors). */
  stepOnce() {
    if (!this.hasTrainer || this.running) return Promise.resolve();
    return this.client.step().catch(() => {});
  }

  reset() {
    this.clearError();
    if (!this.client.alive) return this.restart(false);
    return this.create({ run: false });
  }

  async setPool(on) {
    this.el.pool.checked = on;
    if (!this.client.alive) return this.restart(this.running);
    const ok = await this.create({ run: this.running });
    if (!ok && !this.destroyed) this.el.pool.checked = !on; // the old trainer stayed: so does its setting
  }

  /** A whole new worker: the way back from a lost device, a crash or a stall. */
  restart(run = this.running) {
    this.clearError();
    this.hasTrainer = false;
    this.running = false;
    this.pausing = false;
    this.wantRunAfterRestart = run;
    this.updateButtons();
    return this.boot(false);
  }

  /** A chosen or dropped file: only its size is checked here, its contents by the wasm. */
  async useFile(file) {
    this.clearError();
    if (await isCheckpoint(file)) return this.checkpoints.loadFile(file);
    let bytes;
    try {
      bytes = await readFile(file, this.wasmInfo.maxCorpusBytes);
    } catch (err) {
      return this.showError(kindOf(err) === 'corpus' ? err : kindError('corpus', `could not read ${file.name}: ${messageOf(err)}`));
    }
    return this.create({ run: this.running, corpus: { name: file.name, data: bytes } });
  }

  /** Text given by the host page (undefined: back to the default corpus). */
  useText(text, name) {
    this.clearError();
    return this.create({ run: this.running, corpus: text === undefined || text === null ? null : { name, data: String(text) } });
  }

  /** A sample now; resolves once it is shown (failures show as errors). */
  sampleNow() {
    if (!this.hasTrainer) return Promise.resolve();
    this.el.sampleNow.disabled = true;
    return this.client
      .sample()
      .catch(() => {}) // shown through the error event
      .finally(() => {
        this.el.sampleNow.disabled = !this.hasTrainer;
      });
  }

  // ---- worker events ------------------------------------------------------

  listen() {
    const on = (type, fn) => this.client.addEventListener(type, (e) => !this.destroyed && fn(e.detail));
    on('created', (m) => this.onCreated(m));
    on('step', (m) => this.onStep(m.stats));
    on('eval', (m) => this.onEval(m.step, m.loss));
    on('sample', (m) => {
      this.el.sample.textContent = m.text;
      this.el.sampleStep.textContent = `after step ${m.step}`;
      this.fire('sample', m);
    });
    on('state', (m) => {
      this.running = m.running;
      if (!m.running) this.pausing = false;
      this.updateButtons();
      this.setStatus(m.reason ? `Paused at step ${m.step}: ${m.reason}.` : this.stateText(m.step));
      this.fire('state', m);
    });
    on('error', (m) => {
      // Restart resumes training only if it was training (not after a failed Step once)
      const runAgain = this.running;
      // a lost device was freed by the worker; after a crash or a stall the worker is gone
      if (m.kind === 'device_lost' || WORKER_GONE.includes(m.kind)) {
        this.hasTrainer = false;
        this.running = false;
        this.pausing = false;
      }
      if (WORKER_GONE.includes(m.kind)) this.loaded = false;
      this.showError(m, { runAgain });
      this.updateButtons();
      if (!this.running && !this.creating) this.setStatus(this.hasTrainer ? this.stateText() : 'Stopped.');
    });
  }

  onCreated(m) {
    const cfg = m.model;
    this.hasTrainer = true;
    if (this.cur.n > 0) {
      this.prev = this.cur;
    }
    this.cur = emptyRun(`${cfg.pool ? 'pool on' : 'pool off'}, ${this.el.preset.value}, batch ${cfg.batch}`);
    const prevNote = this.prev ? `; dashed: previous run (${this.prev.label})` : '';
    this.el.prevLoss.textContent = prevNote;
    this.el.prevTime.textContent = prevNote;
    this.el.adapter.textContent = `${m.adapter.name || 'WebGPU adapter'} (${m.adapter.backend})`;
    const lr = +Number(cfg.lr).toPrecision(4); // an f32 0.003 arrives as 0.003000000026
    this.el.model.textContent =
      `${cfg.layers} layers · ${cfg.heads} heads · width ${cfg.width} · context ${cfg.context} · vocab ${cfg.vocab} · ` +
      `batch ${cfg.batch} · ${fmtCount(cfg.params)} parameters · lr ${lr} · ${cfg.pool ? `pool on (${cfg.policy})` : 'pool off'}` +
      (cfg.precision === 'f16' ? ' · f16 matmuls' : '');
    this.offerPrecision(m.adapter);
    // the placeholders show what an empty field means now
    this.el.lr.placeholder = lr;
    this.el.batch.placeholder = cfg.batch;
    this.el.context.placeholder = cfg.context;
    this.el.pool.checked = cfg.pool;
    if (this.el.policy.value === '') this.el.policy.options[0].textContent = `default (${cfg.policy})`;
    this.el.sample.textContent = '';
    this.el.sampleStep.textContent = 'from the current model, refreshed as it trains';
    this.latestVal = null;
    this.timeline.reset();
    this.setStatus(this.stateText(0));
    // Drawn now, not a frame later: the new run's figures (its step count first) show
    // with its corpus and model lines, which change at once.
    if (this.raf) cancelAnimationFrame(this.raf);
    this.draw();
    this.fire('created', m);
  }

  onStep(s) {
    const h = this.cur;
    const i = h.n++;
    h.x[i] = s.step;
    h.loss[i] = s.loss;
    h.hit[i] = s.step_hit_rate;
    h.hitCum[i] = s.hit_rate;
    h.created[i] = s.buffers_created_step;
    h.bindGroups[i] = s.bind_groups_created_step;
    h.pipelines[i] = s.pipelines_created_step;
    h.held[i] = s.bytes_held;
    h.inUse[i] = s.bytes_in_use;
    h.ms[i] = s.ms;
    h.tps[i] = s.tokens_per_s;
    h.val[i] = null;
    // the trainer may evaluate on its own schedule (eval_every): plot each new value once
    if (s.val_loss != null && s.val_loss !== h.lastVal) {
      h.val[i] = h.lastVal = s.val_loss;
      this.latestVal = s.val_loss;
    }
    for (const b of s.buckets ?? []) h.sizes.add(b.size);
    h.latest = s;
    this.scheduleDraw();
    this.timeline.onStep(s.step);
    this.fire('step', s);
  }

  onEval(step, loss) {
    const h = this.cur;
    const i = h.x.lastIndexOf(step);
    if (i >= 0) h.val[i] = loss;
    h.lastVal = loss;
    this.latestVal = loss;
    this.scheduleDraw();
  }

  fire(type, detail) {
    this.host.dispatchEvent(new CustomEvent(`tidepool:${type}`, { detail, bubbles: true }));
  }

  // ---- view ---------------------------------------------------------------

  wire() {
    const { el } = this;
    // Start and Pause disable each other: keyboard focus moves across with the press
    el.start.addEventListener('click', () => {
      this.focusNext = this.focused() === el.start ? el.pause : null;
      this.start();
    });
    el.pause.addEventListener('click', () => {
      this.focusNext = this.focused() === el.pause ? el.start : null;
      this.pause();
    });
    el.stepOnce.addEventListener('click', () => this.stepOnce());
    el.reset.addEventListener('click', () => this.reset());
    el.pool.addEventListener('change', () => this.setPool(el.pool.checked));
    el.restart.addEventListener('click', () => this.restart(this.errorRunAgain));
    el.dismiss.addEventListener('click', () => this.clearError());
    el.sampleNow.addEventListener('click', () => this.sampleNow());
    el.file.addEventListener('change', () => {
      const file = el.file.files?.[0];
      el.file.value = ''; // choosing the same file again must fire change again
      if (file) this.useFile(file);
    });
    el.defaultCorpus.addEventListener('click', () => this.create({ run: this.running, corpus: null }));
    for (const input of [el.preset, el.lr, el.batch, el.context, el.policy, el.precision]) {
      input.addEventListener('change', () => {
        el.settingsHint.textContent = 'Changed: press Reset to train with these settings.';
        el.settingsHint.classList.add('tp-changed');
      });
    }
    // Drag and drop anywhere on the widget.
    const drop = this.root;
    drop.addEventListener('dragover', (e) => {
      if (![...(e.dataTransfer?.types ?? [])].includes('Files')) return;
      e.preventDefault();
      e.dataTransfer.dropEffect = 'copy';
      el.drop.classList.add('tp-dragging');
    });
    drop.addEventListener('dragleave', (e) => {
      if (!drop.contains(e.relatedTarget)) el.drop.classList.remove('tp-dragging');
    });
    drop.addEventListener('drop', (e) => {
      const file = e.dataTransfer?.files?.[0];
      if (!file) return;
      e.preventDefault();
      el.drop.classList.remove('tp-dragging');
      this.useFile(file);
    });
    this.schemeQuery = matchMedia('(prefers-color-scheme: dark)');
    this.onScheme = () => Object.values(this.charts).forEach((c) => c.restyle());
    this.schemeQuery.addEventListener('change', this.onScheme);
  }

  /** The focused element in the widget's tree (the document's, or its shadow root's). */
  focused() {
    return this.root.getRootNode().activeElement;
  }

  /**
   * f16 matmuls need the adapter's shader-f16: offered only where it has it. A page
   * link may still ask for f16 elsewhere; the wasm then refuses and says why.
   */
  offerPrecision(adapter) {
    const f16 = [...this.el.precision.options].find((o) => o.value === 'f16');
    const has = adapter?.shader_f16 === true;
    f16.disabled = !has && this.el.precision.value !== 'f16';
    this.el.precisionHint.textContent = has
      ? 'f16 matmuls: operands rounded to f16, sums in f32 (tensor cores where the GPU has them).'
      : `f16 needs the adapter's shader-f16, which ${adapter?.name || 'this adapter'} does not offer.`;
  }

  /** The model and size-class menus, from what the wasm offers (and what was asked for). */
  fillMenus({ presets = [], policies = [] }) {
    const fill = (select, values, first = []) => {
      const want = select.value;
      const all = [...first, ...values];
      // a value asked for that the wasm does not offer stays, so that its error shows
      if (want && !all.some(([v]) => v === want)) all.push([want, want]);
      select.replaceChildren(
        ...all.map(([value, label]) => {
          const o = document.createElement('option');
          o.value = value;
          o.textContent = label;
          o.selected = value === want;
          return o;
        }),
      );
      if (!want && !first.length && all.length) select.value = all[0][0];
    };
    const pairs = (list) => list.map((v) => [String(v), String(v)]);
    fill(this.el.preset, pairs(presets));
    fill(this.el.policy, pairs(policies), [['', this.el.policy.options[0]?.value === '' ? this.el.policy.options[0].textContent : 'default']]);
  }

  updateButtons() {
    const { el } = this;
    el.start.disabled = this.running;
    el.pause.disabled = !this.running;
    // while pausing, the steps in flight are still to land: one more now would be extra
    el.stepOnce.disabled = this.running || this.pausing || !this.hasTrainer || this.creating;
    el.sampleNow.disabled = !this.hasTrainer;
    el.start.textContent = this.hasTrainer && this.cur.n > 0 ? 'Resume' : 'Start';
    this.checkpoints?.update();
    if (this.focusNext && !this.focusNext.disabled) {
      this.focusNext.focus();
      this.focusNext = null;
    }
  }

  stateText(step = this.cur.latest?.step ?? 0) {
    if (this.running) return 'Training…';
    if (this.pausing) return 'Pausing after the steps in flight…';
    return step > 0 ? `Paused at step ${step}.` : 'Ready: press Start.';
  }

  setStatus(text) {
    this.el.status.textContent = text;
  }

  /** Shows an error (anything with a kind and a message, or a string); Restart when it helps. */
  showError(err, { runAgain = false, title: heading } = {}) {
    this.focusNext = null;
    const [said, text, restart] = describe(err);
    const title = heading ?? said;
    this.el.errorTitle.textContent = title;
    this.el.errorText.textContent = text;
    this.el.restart.hidden = !restart;
    this.errorRunAgain = runAgain;
    this.el.error.hidden = false;
    this.fire('error', { kind: kindOf(err), message: messageOf(err) });
  }

  clearError() {
    this.el.error.hidden = true;
    this.el.errorTitle.textContent = '';
    this.el.errorText.textContent = '';
  }

  buildCharts() {
    const plot = (fig) => fig.querySelector('.tp-plot');
    const bytes = { fmt: fmtBytes, zero: true };
    this.charts = {
      loss: new Chart(plot(this.el.chartLoss), {
        y: { fmt: (v) => v.toFixed(2) },
        series: [
          { label: 'training', color: 0 },
          { label: 'held-out', color: 1, points: true, width: 2 },
          { label: 'previous run', color: 'ghost', dash: [4, 4], width: 1 },
        ],
      }),
      hit: new Chart(plot(this.el.chartHit), {
        y: { fmt: pct, range: [0, 1.02] },
        y2: { fmt: fmtCount, zero: true },
        series: [
          { label: 'hit rate, this step', color: 0, width: 2 },
          { label: 'since start', color: 3 },
          { label: 'buffers created', color: 2, y2: true },
          { label: 'bind groups created', color: 1, y2: true, dash: [4, 3] },
          { label: 'pipelines created', color: 3, y2: true, dash: [2, 3] },
        ],
      }),
      bytes: new Chart(plot(this.el.chartBytes), {
        y: bytes,
        series: [
          { label: 'held by the pool', color: 0, width: 2 },
          { label: 'in use', color: 1 },
        ],
      }),
      buckets: new Chart(plot(this.el.chartBuckets), {
        bars: true,
        xLabel: 'size class',
        // one tick per size class, labelled with its size
        // every size class is a bar; labels thin out when they would collide
        xSplits: (u) => {
          const n = this.bucketSizes.length;
          const fit = Math.max(1, Math.floor(u.bbox.width / devicePixelRatio / 38));
          const every = Math.ceil(n / fit);
          return this.bucketSizes.map((_, i) => i).filter((i) => i % every === 0);
        },
        xFmt: (i) => (Number.isInteger(i) && this.bucketSizes[i] !== undefined ? fmtBytesShort(this.bucketSizes[i]) : ''),
        y: { fmt: fmtCount, zero: true },
        series: [{ label: 'free buffers', color: 3 }],
      }),
      time: new Chart(plot(this.el.chartTime), {
        // the first step compiles every shader: left off the scale, or it flattens the rest
        y: { fmt: (v) => `${+v.toFixed(1)}`, zero: true, skipFirst: true },
        y2: { fmt: fmtCount, zero: true },
        series: [
          { label: 'ms per step', color: 0, width: 2 },
          { label: 'tokens/s', color: 1, y2: true },
          { label: 'previous run, ms', color: 'ghost', dash: [4, 4], width: 1 },
        ],
      }),
    };
  }

  scheduleDraw() {
    if (!this.raf && !this.destroyed) this.raf = requestAnimationFrame(() => this.draw());
  }

  // Everything on screen changes here, once a frame at most, however fast steps come.
  draw() {
    this.raf = 0;
    const { el, cur: h, prev } = this;
    const s = h.latest;
    el.step.textContent = s ? s.step : 0;
    el.loss.textContent = s ? fixed(s.loss, 4) : '';
    el.valLoss.textContent = this.latestVal == null ? '' : fixed(this.latestVal, 4);
    el.hitRate.textContent = s ? fixed(s.step_hit_rate * 100, 1) : '';
    el.created.textContent = s ? s.buffers_created_step : '';
    el.held.textContent = s ? s.bytes_held : '';
    el.heldHuman.textContent = s ? `B (${fmtBytes(s.bytes_held)})` : '';
    el.ms.textContent = s ? fixed(s.ms, 1) : '';
    el.tps.textContent = s ? Math.round(s.tokens_per_s).toLocaleString('en') : '';
    if (!this.running && s && !this.creating) this.setStatus(this.stateText(s.step));

    // Lines: x is the step; the previous run shares the axis, so pad to the longer.
    const total = Math.max(h.n, prev?.n ?? 0);
    const stride = Math.max(1, Math.ceil(total / MAX_POINTS));
    const xs = Array.from({ length: Math.ceil(total / stride) }, (_, j) => Math.min((j + 1) * stride, total));
    const col = (arr) => column(arr, total, stride);
    const ghost = (arr) => (prev ? col(arr) : new Array(xs.length).fill(null));
    this.charts.loss.setData([xs, col(h.loss), col(h.val), ghost(prev?.loss ?? [])]);
    this.charts.hit.setData([xs, col(h.hit), col(h.hitCum), col(h.created), col(h.bindGroups), col(h.pipelines)]);
    this.charts.time.setData([xs, col(h.ms), col(h.tps), ghost(prev?.ms ?? [])]);
    const own = Array.from({ length: Math.ceil(h.n / stride) }, (_, j) => Math.min((j + 1) * stride, h.n));
    this.charts.bytes.setData([own, column(h.held, h.n, stride), column(h.inUse, h.n, stride)]);

    // Bars: every size class seen in this run keeps its slot, so bars rise and fall in place.
    const sizes = [...h.sizes].sort((a, b) => a - b);
    const counts = sizes.map((size) => s?.buckets?.find((b) => b.size === size)?.count ?? 0);
    this.bucketSizes = sizes;
    this.charts.buckets.setData([sizes.map((_, i) => i), counts]);
    const pooling = this.el.pool.checked;
    el.bucketsEmpty.textContent = counts.some((c) => c > 0)
      ? ''
      : !pooling
        ? 'None: with the pool off, every buffer is destroyed after its step.'
        : s
          ? 'None free right now.'
          : 'Appears after the first step.';

    // Plain figures for tests and for anyone reading the DOM.
    const mark = (fig, points, latest) => {
      fig.dataset.points = points;
      fig.dataset.latest = latest ?? '';
    };
    mark(el.chartLoss, h.n, s?.loss);
    mark(el.chartHit, h.n, s?.step_hit_rate);
    mark(el.chartBytes, h.n, s?.bytes_held);
    mark(el.chartBuckets, counts.filter((c) => c > 0).length, s?.total_pooled);
    mark(el.chartTime, h.n, s?.ms);
  }

  /** What a host page can drive. */
  controller() {
    const w = this;
    return {
      start: () => w.start(),
      pause: () => w.pause(),
      /** resolves when the step is done */
      stepOnce: () => w.stepOnce(),
      reset: () => w.reset(),
      setPool: (on) => w.setPool(on),
      /** resolves when the sample is shown */
      sample: () => w.sampleNow(),
      /** downloads the run as tidepool-<preset>-step<N>.safetensors; resolves when done */
      save: () => w.checkpoints.save(),
      /** a .safetensors File or Blob in place of the current run; resolves true once loaded */
      loadCheckpoint: (file) => w.checkpoints.loadFile(file),
      /** text (string) or a File; undefined goes back to the default corpus. Resolves true once training on it. */
      useCorpus: (corpus, name = 'custom text') => (corpus instanceof Blob ? w.useFile(corpus) : w.useText(corpus, name)),
      /** a new worker, wasm instance and device (what the Restart button does) */
      restart: (run) => w.restart(run),
      /** the watchdog's settings (every, answer, busy in ms; see client.mjs), changeable at any time */
      get watchdog() {
        return w.client.watchdog;
      },
      destroy: () => w.destroy(),
      get running() {
        return w.running;
      },
      /** what the widget is doing, for a host page (and for a test that fails to say why) */
      get state() {
        return { running: w.running, trainer: w.hasTrainer, building: w.creating, loaded: w.loaded, worker: w.client.alive, waiting: w.client.pending.size };
      },
      get history() {
        return w.cur;
      },
      get previous() {
        return w.prev;
      },
      get latest() {
        return w.cur.latest;
      },
      /** traces one step and shows it in the memory timeline; resolves once shown */
      traceStep: () => w.timeline.trace(),
      /** the last trace shown ({trace, replay, top, held}, docs/trace.md), or null */
      get lastTrace() {
        const c = w.timeline.current;
        // top and held: the drawn stack's height and the free bytes, per column (0: the step's start)
        return c && { trace: c.trace, replay: c.replay, top: c.view.top, held: c.view.held };
      },
      element: w.host,
    };
  }
}

// A string from a query or an attribute as the value a setting takes: on/off and
// true/false as booleans, decimal numbers as numbers, anything else as it is (the
// wasm says when a setting does not take it).
function settingValue(text) {
  const t = text.trim();
  if (t === '' || /^(on|true)$/i.test(t)) return true;
  if (/^(off|false)$/i.test(t)) return false;
  if (/^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i.test(t)) return Number(t);
  return text;
}
const settingKey = (name) => name.replace(/-/g, '_');

/**
 * Options from a query string, so a link can open a configured trainer:
 * `?preset=small&batch=4&context=32&lr=0.002&pool=off&policy=exact&autostart`.
 * Every parameter is a training setting and goes to the wasm, which checks it, except
 * `autostart` and `autosave=N` (steps between saves to IndexedDB); a link cannot set the widget's own options (where code and data load from).
 */
export function optionsFromQuery(search = location.search) {
  const o = {};
  for (const [key, value] of new URLSearchParams(search)) {
    if (key === 'autostart') o.autostart = true;
    else if (key === 'autosave') o.autosaveEvery = Number(value);
    else if (!(key in DEFAULTS)) o[settingKey(key)] = settingValue(value);
  }
  return o;
}

/**
 * Mounts a trainer into `element` and returns its controller.
 * @param {HTMLElement} element
 * @param {object} [options] the widget's: title, corpus (text or bytes), corpusName,
 *   corpusUrl, autostart, pkgUrl, shadow, schedule, watchdog; every other key is a training
 *   setting for the wasm's Trainer.create (preset, pool, policy, lr, batch, context,
 *   seed, steps, dropout, ...)
 */
export function mount(element, options = {}) {
  if (element.tidepool) element.tidepool.destroy();
  const widget = new TidepoolWidget(element, options);
  element.tidepool = widget.controller();
  return element.tidepool;
}

// <tidepool-trainer preset="tiny" pool="off" lr="0.001" batch="8" context="64"
//   policy="pow2" steps="2000" corpus-url="text.txt" title="..." autostart>
// Attributes are read when the element joins the page. title, autostart, corpus-url
// and pkg-url are the widget's; every other attribute that is not one of HTML's own
// is a training setting (eval-every="50" is eval_every: 50) for the wasm to check, as
// is each entry of the element's `settings` property when set before it joins.
const HTML_ATTRIBUTES = /^(id|class|style|slot|part|is|lang|dir|hidden|inert|tabindex|title|role|nonce|translate|draggable|spellcheck|contenteditable|autofocus|accesskey|autocapitalize|enterkeyhint|inputmode|popover|(data|aria)-.*|on.*)$/i;
const ELEMENT_OPTIONS = { 'corpus-url': 'corpusUrl', 'pkg-url': 'pkgUrl', autostart: 'autostart' };

export class TidepoolTrainer extends HTMLElement {
  connectedCallback() {
    if (this.tidepool) return;
    const settings = {};
    const options = { title: this.hasAttribute('title') ? this.getAttribute('title') : DEFAULTS.title, settings };
    for (const { name, value } of this.attributes) {
      if (name in ELEMENT_OPTIONS) options[ELEMENT_OPTIONS[name]] = name === 'autostart' ? true : value;
      else if (!HTML_ATTRIBUTES.test(name)) settings[settingKey(name)] = settingValue(value);
    }
    for (const [key, value] of Object.entries(this.settings ?? {})) {
      settings[settingKey(key)] = typeof value === 'string' ? settingValue(value) : value;
    }
    mount(this, { ...options, shadow: true });
    // the title attribute would also show as a tooltip over the whole widget
    this.removeAttribute('title');
  }

  disconnectedCallback() {
    // moved within the page: keep running; removed: release the GPU
    queueMicrotask(() => {
      if (!this.isConnected && this.tidepool) {
        this.tidepool.destroy();
        this.tidepool = undefined;
      }
    });
  }
}

if (!customElements.get('tidepool-trainer')) customElements.define('tidepool-trainer', TidepoolTrainer);

// The trainer widget: controls, live charts of the buffer pool, samples. One widget
// owns one TrainerClient (client.mjs), so its own Web Worker, wasm instance, GPU
// device and Trainer: several run on one page independently. It renders into its
// host element, or into a shadow root (the element's way, and mount()'s with
// `shadow: true`), where a host page's CSS cannot break it and its CSS never leaks
// out.

import { RunCharts } from './charts.mjs';
import { Checkpoints, isCheckpoint } from './checkpoints.mjs';
import { TrainerClient } from './client.mjs';
import { controller, typeName } from './controller.mjs';
import { DEFAULT_CORPUS_NAME, DEFAULT_CORPUS_URL, MAX_CORPUS_BYTES, checkSize, fetchCorpus, readFile, utf8Bytes } from './corpus.mjs';
import { describe, kindError, kindOf, messageOf } from './errors.mjs';
import { fmtBytes, fmtCount } from './format.mjs';
import { emptyRun, recordEval, recordStep } from './history.mjs';
import { splitOptions } from './options.mjs';
import { adoptStyles } from './styles.mjs';
import { template } from './template.mjs';
import { SnapshotClient } from './snapshot-client.mjs';
import { TimelinePanel } from './timeline.mjs';

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

const fixed = (v, digits) => (v == null || !Number.isFinite(v) ? '' : v.toFixed(digits));

// The kinds after which this worker is gone: a new one is needed.
const WORKER_GONE = ['crashed', 'stalled', 'load'];

export class TidepoolWidget {
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
    this.maxCorpusBytes = MAX_CORPUS_BYTES; // what the wasm says, once loaded
    this.cur = emptyRun('');
    this.prev = null;
    this.raf = 0;
    this.destroyed = false;
    this.loaded = false; // the worker has the wasm package
    this.host = host; // the element given: events and the controller are on it
    const { root, styled } = renderRoot(host, this.opts.shadow);
    this.root = root; // the .tp box everything renders into
    root.innerHTML = template(this.id, this.opts, settings);
    this.el = {};
    for (const node of root.querySelectorAll('[data-ref]')) this.el[node.dataset.ref] = node;
    this.charts = new RunCharts(this.el);
    const { pkgUrl, wasmUrl, workerUrl } = this.opts;
    const files = new SnapshotClient({ pkgUrl, wasmUrl, workerUrl, watchdog: this.opts.watchdog });
    this.timeline = new TimelinePanel(this.el.timeline, { trace: () => this.client.trace(), files });
    // charts built before the styles arrived take their colours again
    styled.then(() => !this.destroyed && this.charts.restyle());
    this.wire();
    const schedule = { ...this.opts.schedule, autosaveEvery: this.opts.autosaveEvery };
    this.client = new TrainerClient({ pkgUrl, wasmUrl, workerUrl, schedule, watchdog: this.opts.watchdog });
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
    this.maxCorpusBytes = ready.maxCorpusBytes ?? MAX_CORPUS_BYTES;
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
        const { name, bytes } = await fetchCorpus(new URL(this.opts.corpusUrl, document.baseURI), this.maxCorpusBytes);
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
    this.charts.destroy();
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
      recompute: this.el.recompute.checked,
      pool: this.el.pool.checked,
    };
    for (const k of Object.keys(config)) if (config[k] === undefined) delete config[k];
    return config;
  }

  /**
   * The corpus to send: the chosen one (over the size cap: refused here, before it
   * is copied to the worker), or the default, fetched once from the package's data/
   * (a failed fetch is an error of kind corpus naming the URL).
   */
  async corpusData(corpus) {
    if (corpus) {
      const { name, data } = corpus;
      checkSize(name, typeof data === 'string' ? utf8Bytes(data) : data.byteLength, this.maxCorpusBytes);
      return corpus;
    }
    this.defaultCorpus ??= await fetchCorpus(DEFAULT_CORPUS_URL, this.maxCorpusBytes, DEFAULT_CORPUS_NAME);
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

  /** A chosen or dropped file (`name`: for a Blob without one): only its size is checked here, its contents by the wasm. */
  async useFile(file, name = file.name ?? 'file') {
    this.clearError();
    if (await isCheckpoint(file)) return this.checkpoints.loadFile(file);
    let bytes;
    try {
      bytes = await readFile(file, this.maxCorpusBytes);
    } catch (err) {
      return this.showError(kindOf(err) === 'corpus' ? err : kindError('corpus', `could not read ${name}: ${messageOf(err)}`));
    }
    return this.create({ run: this.running, corpus: { name, data: bytes } });
  }

  /** Text or bytes given by the host page (undefined: back to the default corpus). */
  useText(data, name) {
    this.clearError();
    return this.create({ run: this.running, corpus: data === undefined || data === null ? null : { name, data } });
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
      (cfg.precision === 'f16' ? ' · f16 matmuls' : '') +
      (cfg.recompute ? ' · layernorms recomputed' : '');
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
    const val = recordStep(this.cur, s);
    if (val !== null) this.latestVal = val;
    this.scheduleDraw();
    this.timeline.onStep(s.step);
    this.fire('step', s);
  }

  onEval(step, loss) {
    recordEval(this.cur, step, loss);
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
    for (const input of [el.preset, el.lr, el.batch, el.context, el.policy, el.precision, el.recompute]) {
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
    this.onScheme = () => this.charts.restyle();
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
    // The planned policy's arenas, and the requests its plan did not serve.
    const c = s?.context;
    el.planRow.hidden = !(c?.arena_bytes > 0);
    el.arenas.textContent = c ? fmtBytes(c.arena_bytes) : '';
    el.planFallbacks.textContent = c ? `${c.plan_misses} unforeseen, ${c.plan_outside} outside steps` : '';
    el.ms.textContent = s ? fixed(s.ms, 1) : '';
    el.tps.textContent = s ? Math.round(s.tokens_per_s).toLocaleString('en') : '';
    if (!this.running && s && !this.creating) this.setStatus(this.stateText(s.step));

    this.charts.draw(h, prev, this.el.pool.checked);
  }
}

/**
 * Mounts a trainer into `element` and returns its controller.
 * @param {HTMLElement} element
 * @param {object} [options] the widget's (options.mjs's DEFAULTS): title, corpus (text or
 *   bytes), corpusName, corpusUrl, autostart, pkgUrl, wasmUrl, workerUrl, shadow, schedule,
 *   watchdog, autosaveEvery, autosaveKey; every other key is a training
 *   setting for the wasm's Trainer.create (preset, pool, policy, lr, batch, context,
 *   seed, steps, dropout, ...)
 */
export function mount(element, options = {}) {
  const call = 'mount(element, options)';
  // nodeType, not instanceof Element: an element of another frame is one too
  if (element?.nodeType !== 1) throw kindError('config', `${call}: element must be an element of the page (got ${typeName(element)}).`);
  if (options === null || typeof options !== 'object') throw kindError('config', `${call}: options must be an object (got ${typeName(options)}).`);
  const { corpus, corpusName } = options;
  if (!(corpus === undefined || typeof corpus === 'string' || corpus instanceof Uint8Array)) {
    throw kindError('config', `${call}: options.corpus must be text or UTF-8 bytes (Uint8Array) (got ${typeName(corpus)}).`);
  }
  if (!(corpusName === undefined || typeof corpusName === 'string')) throw kindError('config', `${call}: options.corpusName must be a string (got ${typeName(corpusName)}).`);
  if (element.tidepool) element.tidepool.destroy();
  const widget = new TidepoolWidget(element, options);
  element.tidepool = controller(widget);
  return element.tidepool;
}


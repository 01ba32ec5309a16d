// Runs that outlive the page: Save (a .safetensors download), Load (a file picker or a
// drop on the widget), an automatic save to IndexedDB every N steps with "Resume the
// last run" after a reload, and a prompt box that samples from the current model.
//
// The checkpoint itself is the wasm's (docs/checkpoint.md): this module moves bytes,
// and the wasm checks every one of them. A failed load builds nothing, so the run on
// screen carries on. Storage trouble (no IndexedDB, a full quota) is a message, never
// a stop: training goes on, and Save still downloads.

import { kindError, kindOf, messageOf } from './errors.mjs';
import { checkRun, continued } from './history.mjs';
import { MAX_STEP } from './worker-schedule.mjs';

/** The wasm refuses larger files (checkpoint::MAX_CHECKPOINT_BYTES); refused here before reading. */
export const MAX_CHECKPOINT_BYTES = 2 ** 30;
const DB_NAME = 'tidepool';
const STORE = 'runs';

/**
 * True when a file is a checkpoint rather than a corpus: named .safetensors, or
 * starting like one (an 8-byte little-endian header length that fits the file, then `{`).
 */
export async function isCheckpoint(file) {
  if (/\.safetensors$/i.test(file.name)) return true;
  if (file.size < 10) return false;
  const head = new Uint8Array(await file.slice(0, 9).arrayBuffer());
  const length = new DataView(head.buffer).getBigUint64(0, true);
  return head[8] === 0x7b && length >= 2n && length <= BigInt(file.size - 8);
}

/** `tidepool-<preset>-step<N>.safetensors`, with anything odd in the preset's name left out. */
export function fileName(preset, step) {
  const name = String(preset || 'custom').replace(/[^A-Za-z0-9_-]/g, '') || 'custom';
  return `tidepool-${name}-step${step}.safetensors`;
}

/** Downloads `bytes` as `name` through a Blob URL. */
export function download(doc, bytes, name) {
  const url = URL.createObjectURL(new Blob([bytes], { type: 'application/octet-stream' }));
  const a = doc.createElement('a');
  a.href = url;
  a.download = name;
  a.hidden = true;
  doc.body.append(a);
  a.click();
  a.remove();
  // the download has its own reference by then
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

/** A storage failure as a page error: what happened, and that training goes on. */
export function storageError(err, doing) {
  const name = err?.name ?? '';
  const why =
    name === 'QuotaExceededError'
      ? 'the browser refused the space (its storage quota for this site is full)'
      : name === 'SecurityError' || name === 'InvalidStateError' || !globalThis.indexedDB
        ? 'this browser keeps no data for this page (IndexedDB is unavailable: a private window, or storage blocked)'
        : messageOf(err);
  return kindError('storage', `could not ${doing}: ${why}. Training goes on; Save downloads the run instead.`, { storage: name });
}

// One IndexedDB request as a promise.
const settle = (req) =>
  new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });

/** The saved runs of this origin: one record per key ({bytes, step, preset, date, corpus, history}). */
export class RunStore {
  constructor(key) {
    this.key = key;
    this.db = null;
  }

  async open() {
    if (this.db) return this.db;
    if (!globalThis.indexedDB) throw Object.assign(new Error('no indexedDB'), { name: 'InvalidStateError' });
    const req = indexedDB.open(DB_NAME, 1);
    req.onupgradeneeded = () => req.result.createObjectStore(STORE);
    this.db = await settle(req);
    return this.db;
  }

  async run(mode, fn) {
    const db = await this.open();
    const tx = db.transaction(STORE, mode);
    const result = await settle(fn(tx.objectStore(STORE)));
    // a put is stored (or refused for quota) only when its transaction completes
    await new Promise((resolve, reject) => {
      tx.oncomplete = resolve;
      tx.onerror = () => reject(tx.error);
      tx.onabort = () => reject(tx.error ?? new DOMException('the save was aborted', 'AbortError'));
    });
    return result;
  }

  get() {
    return this.run('readonly', (s) => s.get(this.key));
  }
  delete() {
    return this.run('readwrite', (s) => s.delete(this.key));
  }
  put(record) {
    return this.run('readwrite', (s) => s.put(record, this.key));
  }
}

/**
 * What is wrong with a record read back from IndexedDB, or null when it is one of
 * ours: another tab, an older version, or a hand at the browser's storage may have
 * put anything there. Its history is checked too (history.mjs's checkRun).
 */
export function checkRecord(record) {
  if (record === null || typeof record !== 'object') return 'it is not a saved run';
  const { bytes, step, preset, date, corpus } = record;
  if (!(bytes instanceof Uint8Array || bytes instanceof ArrayBuffer)) return 'it holds no checkpoint bytes';
  if (bytes.byteLength > MAX_CHECKPOINT_BYTES) return `its checkpoint is over ${MAX_CHECKPOINT_BYTES} bytes (MAX_CHECKPOINT_BYTES)`;
  if (!Number.isSafeInteger(step) || step < 0 || step > MAX_STEP) return `its step (${String(step).slice(0, 40)}) is not a whole number from 0 to ${MAX_STEP}`;
  if (preset !== undefined && preset !== null && typeof preset !== 'string') return 'its preset is not text';
  if (!Number.isFinite(date)) return 'its date is not a time';
  if (corpus !== null && corpus !== undefined) {
    if (typeof corpus !== 'object' || typeof corpus.name !== 'string') return 'its corpus has no name';
    if (!(typeof corpus.data === 'string' || corpus.data instanceof Uint8Array)) return "its corpus's text is neither text nor bytes";
  }
  if (record.history !== null && record.history !== undefined) {
    const why = checkRun(record.history);
    if (why) return `its chart history is damaged: ${why}`;
  }
  return null;
}

/** "tiny, step 200, saved 30 Nov, 19:40" */
export function describeRun(record) {
  const date = new Date(record.date);
  const when = date.toLocaleString('en-GB', { day: 'numeric', month: 'short', hour: '2-digit', minute: '2-digit' });
  return `${record.preset || 'custom'}, step ${record.step}, saved ${when}`;
}

export function panel(id) {
  return `
  <section class="tp-checkpoints" aria-labelledby="${id}-runs-h">
    <div class="tp-checkpoints-row">
      <h3 id="${id}-runs-h" class="tp-label">Run</h3>
      <button type="button" data-testid="save" data-ref="save" disabled>Save</button>
      <label class="tp-button">Load…<input type="file" class="tp-visually-hidden" data-testid="checkpoint-file"
        data-ref="checkpointFile" accept=".safetensors,application/octet-stream"></label>
      <button type="button" class="tp-primary" data-testid="resume-last" data-ref="resumeLast" hidden>Resume the last run</button>
      <span class="tp-hint" data-testid="checkpoint-status" data-ref="checkpointStatus" role="status">or drop a .safetensors here</span>
    </div>
    <form class="tp-prompt" data-ref="promptForm">
      <label>Prompt <input type="text" data-testid="prompt" data-ref="prompt" value="ROMEO:" maxlength="10000"></label>
      <label>Temperature <input type="number" data-testid="temperature" data-ref="temperature" value="0.8" min="0" step="0.1"></label>
      <label>Top-k <input type="number" data-testid="top-k" data-ref="topK" value="40" min="0" step="1"></label>
      <label>Characters <input type="number" data-testid="sample-length" data-ref="sampleLength" value="200" min="1" max="10000" step="1"></label>
      <button type="submit" data-testid="generate" data-ref="generate" disabled>Generate</button>
    </form>
    <pre class="tp-prompt-output" data-testid="prompt-output" data-ref="promptOutput" tabindex="0" aria-label="Text from your prompt" aria-live="polite"></pre>
  </section>`;
}

/**
 * The widget's save, load, autosave and prompt. `w` is the TidepoolWidget: this uses
 * its elements (w.el), its client, its corpus and its run history (w.cur).
 */
export class Checkpoints {
  constructor(w) {
    this.w = w;
    this.store = new RunStore(w.opts.autosaveKey);
    this.storeBroken = false; // told once; autosave is then off until a reload
    this.preset = null; // of a loaded run, for the file name
    const { el } = w;
    el.save.addEventListener('click', () => this.save());
    el.resumeLast.addEventListener('click', () => this.resumeLast());
    el.checkpointFile.addEventListener('change', () => {
      const file = el.checkpointFile.files?.[0];
      el.checkpointFile.value = '';
      if (file) this.loadFile(file);
    });
    el.promptForm.addEventListener('submit', (e) => {
      e.preventDefault();
      this.generate();
    });
    w.client.addEventListener('autosave', (e) => this.autosaved(e.detail));
    this.findLast();
  }

  status(text) {
    this.w.el.checkpointStatus.textContent = text;
  }

  /** After the widget's buttons change: what needs a trainer. */
  update() {
    const { el, hasTrainer, creating } = this.w;
    el.save.disabled = !hasTrainer || Boolean(creating);
    el.generate.disabled = !hasTrainer || Boolean(creating);
  }

  async findLast() {
    let record;
    try {
      record = await this.store.get();
    } catch (err) {
      return this.storageTrouble(err, 'look for a saved run', { quiet: true });
    }
    if (!record || this.w.destroyed) return;
    const why = checkRecord(record);
    if (why) {
      // dropped, so that it is neither offered nor, through the charts, saved again
      this.status(`The run saved in this browser could not be read (${why}) and was removed.`);
      this.store.delete().catch(() => {});
      return;
    }
    this.last = record;
    const { resumeLast } = this.w.el;
    resumeLast.hidden = false;
    resumeLast.textContent = `Resume the last run (${describeRun(record)})`;
  }

  /** Storage failed: a line in the panel, the error box for a refused save, and no more autosaves. */
  storageTrouble(err, doing, { quiet = false } = {}) {
    const e = storageError(err, doing);
    this.status(e.message);
    if (this.storeBroken) return;
    this.storeBroken = true;
    this.w.client.schedule.autosaveEvery = 0; // a restarted worker too
    this.w.client.worker?.postMessage({ type: 'autosave', every: 0 });
    if (!quiet) this.w.showError(e);
  }

  async autosaved({ step, bytes }) {
    if (this.storeBroken || this.w.destroyed) return;
    const w = this.w;
    // as it is now: steps go on arriving while the database opens
    const history = structuredClone(w.cur);
    const record = {
      bytes,
      step,
      preset: this.presetName(),
      date: Date.now(),
      corpus: w.corpus ? { name: w.corpus.name, data: w.corpus.data } : null,
      history,
    };
    try {
      await this.store.put(record);
    } catch (err) {
      return this.storageTrouble(err, `save step ${step} in this browser`);
    }
    this.status(`Saved in this browser at step ${step}.`);
  }

  presetName() {
    return this.preset ?? this.w.el.preset.value;
  }

  async save() {
    const w = this.w;
    w.el.save.disabled = true;
    try {
      const m = await w.client.request({ type: 'save' }, { quiet: true });
      const name = fileName(this.presetName(), m.step);
      download(w.root.ownerDocument, m.bytes, name);
      this.status(`Saved ${name}.`);
      w.fire('saved', { step: m.step, name, bytes: m.bytes.byteLength });
    } catch (err) {
      if (err.kind !== 'stopped') w.showError(err, { title: 'Could not save the run' });
    } finally {
      this.update();
    }
  }

  /** A chosen or dropped checkpoint file: its size checked here, everything else by the wasm. */
  async loadFile(file) {
    const w = this.w;
    w.clearError();
    if (file.size > MAX_CHECKPOINT_BYTES) {
      return w.showError(
        kindError('too_large', `${file.name} is ${file.size} bytes; a checkpoint is at most ${MAX_CHECKPOINT_BYTES} bytes (MAX_CHECKPOINT_BYTES).`),
        { title: 'This checkpoint cannot be loaded' },
      );
    }
    let bytes;
    try {
      bytes = await file.arrayBuffer();
    } catch (err) {
      return w.showError(kindError('config', `could not read ${file.name}: ${messageOf(err)}`), { title: 'This checkpoint cannot be loaded' });
    }
    return this.load(bytes, { label: file.name, corpus: w.corpus, preset: /^tidepool-([A-Za-z0-9_-]+)-step\d+/.exec(file.name)?.[1] });
  }

  async resumeLast() {
    const record = this.last;
    if (!record) return;
    this.w.clearError();
    return this.load(record.bytes, { label: `the last run (${describeRun(record)})`, corpus: record.corpus, preset: record.preset, history: record.history });
  }

  /**
   * Loads `bytes` with `corpus` (null: the default) in place of the current trainer,
   * which stays as it was when the load fails. Resolves true once loaded.
   */
  async load(bytes, { label, corpus, preset, history }) {
    const w = this.w;
    w.creating++;
    w.updateButtons();
    w.setStatus(`Loading ${label}…`);
    try {
      const send = await w.corpusData(corpus);
      const m = await w.client.request(
        { type: 'restore', bytes, corpus: send.data, corpusName: send.name, run: w.running },
        { quiet: true },
      );
      w.corpus = corpus;
      w.el.corpusName.textContent = corpus ? corpus.name : `${m.corpus.name} (default)`;
      this.preset = preset ?? null;
      if (preset && [...w.el.preset.options].some((o) => o.value === preset)) w.el.preset.value = preset;
      // the created event has started an empty history: it continues the saved one
      w.cur = continued(w.cur, history, m.stats);
      w.latestVal = w.cur.lastVal ?? null;
      w.scheduleDraw();
      this.status(`Loaded ${label}: step ${m.stats?.step ?? 0}.`);
      w.fire('loaded', { step: m.stats?.step ?? 0, label });
      return true;
    } catch (err) {
      if (!['stopped', 'crashed', 'stalled'].includes(err.kind)) {
        const hint =
          kindOf(err) === 'corpus' ? ' Choose the corpus it was trained on (Corpus, below), then load it again.' : '';
        w.showError(kindError(kindOf(err), `${label}: ${messageOf(err)}${hint}`), {
          title: 'This checkpoint cannot be loaded',
        });
      }
      if (!w.destroyed && err.kind !== 'stopped') w.setStatus(w.hasTrainer ? w.stateText() : 'Not started.');
      return false;
    } finally {
      w.creating--;
      w.updateButtons();
    }
  }

  async generate() {
    const w = this.w;
    const { el } = w;
    const prompt = el.prompt.value;
    const num = (input, otherwise) => (input.value.trim() === '' ? otherwise : Number(input.value));
    el.generate.disabled = true;
    try {
      const m = await w.client.request(
        {
          type: 'sample',
          prompt,
          length: num(el.sampleLength, 200),
          temperature: num(el.temperature, 0.8),
          topK: num(el.topK, 0),
        },
        { quiet: true },
      );
      const b = w.root.ownerDocument.createElement('b');
      b.textContent = prompt;
      el.promptOutput.replaceChildren(b, m.text);
      el.promptOutput.dataset.step = m.step;
      w.fire('generated', { prompt, text: m.text, step: m.step });
    } catch (err) {
      if (!['stopped', 'crashed', 'stalled'].includes(err.kind)) w.showError(err, { title: 'Could not sample from this prompt' });
    } finally {
      this.update();
    }
  }
}

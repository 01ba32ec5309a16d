// What a host page drives: the object mount() returns and <tidepool-trainer> holds as
// `.tidepool` (TidepoolController in tidepool.d.ts). Every argument is checked here:
// a wrong one is a rejected promise of kind `config` that names the argument, and
// never reaches the worker.

import { kindError } from './errors.mjs';

/** A corpus name, at most (the name labels the corpus in messages and the widget). */
export const MAX_NAME_CHARS = 1000;

/** What a value is, for a message about a wrong argument. */
export const typeName = (v) => (v === null ? 'null' : Array.isArray(v) ? 'an array' : typeof v === 'object' ? (v.constructor?.name ?? 'an object') : typeof v);

/** Rejects with what `method` was given instead of what it takes. */
const refuse = (call, what, got) => Promise.reject(kindError('config', `${call}: ${what} (got ${typeName(got)}).`));

const isBytes = (v) => v instanceof Uint8Array || v instanceof ArrayBuffer;

/** @param w the TidepoolWidget (widget.mjs) */
export function controller(w) {
  return {
    start: () => w.start(),
    pause: () => w.pause(),
    /** resolves when the step is done */
    stepOnce: () => w.stepOnce(),
    reset: () => w.reset(),
    setPool(on) {
      if (typeof on !== 'boolean') return refuse('setPool(on)', 'on must be true or false', on);
      return w.setPool(on);
    },
    /** resolves when the sample is shown */
    sample: () => w.sampleNow(),
    /** downloads the run as tidepool-<preset>-step<N>.safetensors; resolves when done */
    save: () => w.checkpoints.save(),
    /** a .safetensors File or Blob in place of the current run; resolves true once loaded */
    loadCheckpoint(file) {
      if (!(file instanceof Blob)) return refuse('loadCheckpoint(file)', 'file must be a File or Blob', file);
      return w.checkpoints.loadFile(file);
    },
    /**
     * Text, UTF-8 bytes or a File to train on; undefined (or null) goes back to the
     * default corpus. `name` labels it. Resolves true once training on it.
     */
    useCorpus(corpus, name = undefined) {
      const call = 'useCorpus(corpus, name)';
      if (name !== undefined && typeof name !== 'string') return refuse(call, 'name must be a string', name);
      if (name !== undefined && name.length > MAX_NAME_CHARS) {
        return Promise.reject(kindError('config', `${call}: name is ${name.length} characters; at most ${MAX_NAME_CHARS} (MAX_NAME_CHARS).`));
      }
      if (corpus instanceof Blob) return w.useFile(corpus, name ?? corpus.name ?? 'file');
      if (corpus === undefined || corpus === null || typeof corpus === 'string' || isBytes(corpus)) {
        return w.useText(corpus instanceof ArrayBuffer ? new Uint8Array(corpus) : corpus, name ?? 'custom text');
      }
      return refuse(call, 'corpus must be text, UTF-8 bytes (Uint8Array), a File or Blob, or undefined', corpus);
    },
    /** a new worker, wasm instance and device (what the Restart button does) */
    restart(run) {
      if (run !== undefined && typeof run !== 'boolean') return refuse('restart(run)', 'run must be true, false or left out', run);
      return w.restart(run);
    },
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
    /** the last trace shown ({trace, replay, plan, top, held, arenas}, docs/trace.md), or null */
    get lastTrace() {
      const c = w.timeline.current;
      // top and held: the drawn stack's height and the free bytes, per column (0: the step's start);
      // arenas: the arena view's bands and tensors, and each tensor's rectangle as drawn (CSS px)
      const arenas = c?.arenas && {
        arenas: c.arenas.arenas,
        tensors: c.arenas.tensors.map(({ arena, offset, size, start, end }) => ({ arena, offset, size, start, end })),
        rects: w.timeline.arenaRects,
      };
      return c && { trace: c.trace, replay: c.replay, plan: c.plan, top: c.view.top, held: c.view.held, arenas: arenas ?? null };
    },
    element: w.host,
  };
}

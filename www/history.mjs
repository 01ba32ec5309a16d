// A run's history as the charts draw it: one entry per step recorded, in step order,
// with the step itself in `x`. It holds what was recorded, never padding: a run
// loaded at step 9,999,999 starts with nothing, and its first point is 10,000,000.
// Histories kept in IndexedDB come back through checkRun, which refuses anything
// that is not one (a corrupt record must not reach the charts, nor be saved again).

/** The per-step series, index i of each the i-th step recorded. */
export const SERIES = ['x', 'loss', 'val', 'hit', 'hitCum', 'created', 'bindGroups', 'pipelines', 'held', 'inUse', 'ms', 'tps'];
/** A stored history longer than this is refused (a run of that many steps would take weeks in a page). */
export const MAX_HISTORY = 1_000_000;
/**
 * A history keeps at most this many steps: past it, every other one is let go, so a
 * run of any length holds a bounded history (the charts draw 2,000 columns at most).
 */
export const MAX_KEPT = 20_000;

export function emptyRun(label) {
  const run = { label, n: 0, sizes: new Set(), latest: null, lastVal: null };
  for (const key of SERIES) run[key] = [];
  return run;
}

/**
 * Records one step's figures. Returns the held-out loss it brought (the trainer may
 * evaluate on its own schedule, eval_every: each new value is plotted once), or null.
 * A step that does not come after the last one recorded (its counter wrapped, or it
 * is not a whole number) is shown as the latest but not recorded: `x` stays in order.
 */
export function recordStep(run, s) {
  run.latest = s;
  for (const b of s.buckets ?? []) run.sizes.add(b.size);
  const last = run.n > 0 ? run.x[run.n - 1] : -1;
  if (!Number.isSafeInteger(s.step) || s.step <= last) return null;
  if (run.n >= MAX_KEPT) halve(run);
  const i = run.n++;
  run.x[i] = s.step;
  run.loss[i] = s.loss;
  run.hit[i] = s.step_hit_rate;
  run.hitCum[i] = s.hit_rate;
  run.created[i] = s.buffers_created_step;
  run.bindGroups[i] = s.bind_groups_created_step;
  run.pipelines[i] = s.pipelines_created_step;
  run.held[i] = s.bytes_held;
  run.inUse[i] = s.bytes_in_use;
  run.ms[i] = s.ms;
  run.tps[i] = s.tokens_per_s;
  run.val[i] = null;
  if (s.val_loss != null && s.val_loss !== run.lastVal) {
    run.val[i] = run.lastVal = s.val_loss;
    return s.val_loss;
  }
  return null;
}

/**
 * Keeps every other step, counted back from the latest (which stays), and of the
 * held-out losses the later of each pair, so no evaluation leaves the chart unseen.
 */
function halve(run) {
  const first = (run.n - 1) % 2; // the index of the earliest step kept
  const n = Math.floor((run.n + 1 - first) / 2);
  const val = Array.from({ length: n }, (_, j) => run.val[first + 2 * j] ?? run.val[first + 2 * j - 1] ?? null);
  for (const key of SERIES) {
    const values = run[key];
    for (let j = 0; j < n; j++) values[j] = values[first + 2 * j];
    values.length = n;
  }
  run.val = val;
  run.n = n;
}

/** A held-out loss evaluated after `step`. */
export function recordEval(run, step, loss) {
  const i = run.x.lastIndexOf(step);
  if (i >= 0) run.val[i] = loss;
  run.lastVal = loss;
}

/**
 * The history a loaded run continues: the saved one when it ends at the loaded step
 * (a resume from this browser), else `fresh`, empty, showing the loaded step as the
 * latest (its loss is not in the file) until the next step arrives.
 */
export function continued(fresh, saved, stats) {
  const step = stats?.step ?? 0;
  const end = saved ? (saved.n > 0 ? saved.x[saved.n - 1] : 0) : -1;
  if (saved && end === step) return { ...fresh, ...saved, label: fresh.label };
  fresh.latest = stats ? { ...stats, loss: null } : null;
  return fresh;
}

const isNumberOrNull = (v) => v === null || typeof v === 'number';

/**
 * What is wrong with `run` as a stored history, or null when it is one: its count,
 * every series a list of that length (numbers or null; steps whole and rising), its
 * size classes and its latest figures.
 */
export function checkRun(run) {
  if (run === null || typeof run !== 'object') return 'it is not an object';
  if (typeof run.label !== 'string') return 'its label is not text';
  if (!Number.isSafeInteger(run.n) || run.n < 0 || run.n > MAX_HISTORY) return `its step count (${String(run.n).slice(0, 40)}) is not a whole number from 0 to ${MAX_HISTORY}`;
  for (const key of SERIES) {
    const values = run[key];
    if (!Array.isArray(values)) return `history.${key} is not a list`;
    if (values.length !== run.n) return `history.${key} holds ${values.length} values for ${run.n} steps`;
    // a for loop, not every(): holes in a sparse array are values too
    for (let i = 0; i < values.length; i++) {
      if (!isNumberOrNull(values[i])) return `history.${key}[${i}] is not a number`;
    }
  }
  for (let i = 0; i < run.n; i++) {
    const x = run.x[i];
    if (!Number.isSafeInteger(x) || x < 0 || (i > 0 && x <= run.x[i - 1])) return `history.x[${i}] is not a step after the one before`;
  }
  if (!(run.sizes instanceof Set) || [...run.sizes].some((v) => typeof v !== 'number')) return 'its size classes are not a set of numbers';
  if (run.latest !== null && (typeof run.latest !== 'object' || !Number.isSafeInteger(run.latest.step))) return 'its latest step has no step number';
  if (run.latest?.buckets !== undefined && !Array.isArray(run.latest.buckets)) return "its latest step's size classes are not a list";
  if (!isNumberOrNull(run.lastVal ?? null)) return 'its last held-out loss is not a number';
  return null;
}

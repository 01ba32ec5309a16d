// What kind of failure an error is, for the worker (what to do next) and the page
// (what to say). Errors from the wasm API carry `kind` (set in src/web.rs); the
// page adds its own for what happens outside the wasm.

/** Kinds the wasm API sets on its errors. */
// `busy`: a call made before the trainer's previous one resolved (the worker never
// overlaps them; code that drives the wasm API itself may). `trace`: a recording
// (a PyTorch memory snapshot, a tidepool trace) that cannot be read. `checkpoint`: a
// saved run that cannot be loaded (damaged, another format, values not finite).
export const WASM_KINDS = ['config', 'too_large', 'corpus', 'trace', 'checkpoint', 'no_webgpu', 'device_lost', 'busy', 'internal'];

/**
 * Kinds the page sets: `load` (the worker or the wasm package did not load),
 * `crashed` (the wasm trapped, or anything escaped the worker: only a new worker
 * helps), `stalled` (the worker stopped answering), `stopped` (the page replaced
 * the worker; requests to the old one end with it and are not shown), `csp` (the
 * page's Content-Security-Policy blocked the worker, a module, a fetch or the wasm's
 * compile: the message names the directive to add, see csp.mjs), `storage` (the
 * browser would not keep a saved run: training goes on).
 */
export const PAGE_KINDS = ['load', 'csp', 'crashed', 'stalled', 'stopped', 'storage'];

/** An Error with a kind (and any extra fields, e.g. op). */
export function kindError(kind, message, extra = {}) {
  return Object.assign(new Error(message), { kind }, extra);
}

export const messageOf = (err) => (err && err.message) || String(err);

/** The kind of anything thrown: its own when it has one we know; a trap is a crash. */
export function kindOf(err) {
  if (WASM_KINDS.includes(err?.kind) || PAGE_KINDS.includes(err?.kind)) return err.kind;
  if (err instanceof WebAssembly.RuntimeError || messageOf(err) === 'unreachable') return 'crashed';
  return 'internal';
}

// ---- what a person reads ---------------------------------------------------

const BROWSERS =
  'WebGPU is in Chrome and Edge 113+ (on Linux start them with --enable-unsafe-webgpu --enable-features=Vulkan), ' +
  'Safari 26+, and Firefox 141+ on Windows (elsewhere set dom.webgpu.enabled in about:config). ' +
  'It needs https:// or http://localhost.';

// What each kind of error is called, what it adds, and whether Restart is the way on.
const SAY = {
  config: ['Check the settings'],
  too_large: ['Too large for this GPU'],
  corpus: ['This corpus cannot be used'],
  trace: ['This recording cannot be read'],
  checkpoint: ['This checkpoint cannot be loaded'],
  no_webgpu: ['No WebGPU here'],
  device_lost: ['The GPU device was lost', 'Restart builds a new device and trains again.', true],
  crashed: ['tidepool crashed', 'Restart starts it afresh.', true],
  stalled: ['tidepool stopped answering', 'Restart starts it afresh.', true],
  storage: ['The run was not saved in this browser'],
  load: ['tidepool did not load', '', true],
  csp: ["Blocked by this page's Content-Security-Policy"],
  busy: ['tidepool was asked twice at once', 'Wait for the first request to finish.'],
  internal: ['Something went wrong', '', true],
};

/** [title, text, restart] for an error a person can act on. */
export function describe(err) {
  const kind = kindOf(err);
  const message = messageOf(err);
  const [title, more = '', restart = false] = SAY[kind] ?? SAY.internal;
  const extra = kind === 'no_webgpu' && !/chrome/i.test(message) ? BROWSERS : more;
  return [title, extra ? `${message} ${extra}` : message, restart];
}

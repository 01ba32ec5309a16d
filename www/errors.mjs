// What kind of failure an error is, for the worker (what to do next) and the page
// (what to say). Errors from the wasm API carry `kind` (set in src/web.rs); the
// page adds its own for what happens outside the wasm.

/** Kinds the wasm API sets on its errors. */
// `busy`: a call made before the trainer's previous one resolved (the worker never
// overlaps them; code that drives the wasm API itself may).
export const WASM_KINDS = ['config', 'too_large', 'corpus', 'no_webgpu', 'device_lost', 'busy', 'internal'];

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

// The training loop, in a dedicated Web Worker so the page never freezes: WebGPU
// works in workers, and a step that waits on the GPU here costs the page nothing.
// worker-protocol.mjs speaks with the page, worker-training.mjs trains, and
// worker-schedule.mjs says when to step, evaluate, sample and save.

import { violationOf } from './csp.mjs';
import { Session } from './worker-protocol.mjs';

const session = new Session(self);

// A Content-Security-Policy that blocks the wasm package here (its import: script-src,
// its .wasm: connect-src, its compile: 'wasm-unsafe-eval') says which only in this event.
self.addEventListener('securitypolicyviolation', (e) => (session.violation ??= violationOf(e)));

// console_error_panic_hook prints a Rust panic with console.error, then the wasm
// traps with a bare "unreachable": keep the panic's words to tell the page.
const consoleError = console.error.bind(console);
console.error = (...args) => {
  const text = args.map(String).join(' ');
  if (text.includes('panicked at')) session.lastPanic = text;
  consoleError(...args);
};

self.onmessage = (event) => session.receive(event.data);

// Anything that escapes (a Rust panic traps inside a wasm-bindgen future, whose
// promise then never settles) kills this worker: say so, and answer what waits.
self.addEventListener('unhandledrejection', (event) => {
  event.preventDefault();
  session.fail(session.current?.op ?? 'worker', event.reason, session.current?.id, { escaped: true });
});
self.addEventListener('error', (event) => {
  event.preventDefault();
  session.fail(session.current?.op ?? 'worker', event.error ?? event.message, session.current?.id, { escaped: true });
});

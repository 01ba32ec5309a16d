// What a page's Content-Security-Policy must allow for the trainer, and the error a
// person sees when it does not. A blocked worker, module, fetch or wasm compile only
// shows as a `securitypolicyviolation` event (in the page for the worker, in the
// worker for the rest); its directive and blocked URI say which line to add.
//
// For a package served from ORIGIN (a CDN) the policy needs:
//   script-src ORIGIN 'wasm-unsafe-eval'   the widget's modules, and compiling the wasm
//   worker-src blob: ORIGIN                the worker starts from a same-origin blob: module,
//                                          and a module worker's imports count as worker-src
//   connect-src ORIGIN                     the wasm, the CSS and the default corpus
// Served from the page's own origin, 'self' in each (worker-src 'self', no blob:).
// No style-src: the styles are constructed stylesheets, which CSP does not govern.

import { kindError } from './errors.mjs';

/** The source expression for `origin` as seen from a page on `pageOrigin`. */
const source = (origin, pageOrigin) => (origin === pageOrigin ? "'self'" : origin);

/** The directives a page on `pageOrigin` needs for a package on `packageOrigin`, as one policy string. */
export function neededPolicy(packageOrigin, pageOrigin) {
  const pkg = source(packageOrigin, pageOrigin);
  const worker = packageOrigin === pageOrigin ? "'self'" : `blob: ${packageOrigin}`;
  return `script-src ${pkg} 'wasm-unsafe-eval'; worker-src ${worker}; connect-src ${pkg}`;
}

/**
 * A `csp` error for a violation {directive, blocked} (the event's effectiveDirective and
 * blockedURI): which source to add to which directive, then the whole policy needed.
 */
export function cspError({ directive, blocked }, packageOrigin, pageOrigin) {
  let add;
  if (blocked === 'wasm-eval' || blocked === 'eval') add = "'wasm-unsafe-eval' to script-src (the wasm is compiled in the worker)";
  else if (directive === 'worker-src' || directive === 'child-src') {
    add = blocked === 'blob' || String(blocked).startsWith('blob:')
      ? 'worker-src blob: (tidepool is loaded from another origin, so its worker starts from a same-origin blob: module)'
      : `${source(packageOrigin, pageOrigin)} to worker-src (a module worker's imports count as worker-src)`;
  } else if (directive === 'connect-src') add = `${source(packageOrigin, pageOrigin)} to connect-src (for the wasm, the CSS and the corpus)`;
  else if (/^script-src/.test(directive)) add = `${source(packageOrigin, pageOrigin)} to script-src (for tidepool's modules)`;
  else add = `what ${directive} blocked (${blocked})`;
  return kindError(
    'csp',
    `the page's Content-Security-Policy blocked ${blocked || 'a request'} (${directive}): add ${add}. ` +
      `tidepool needs: ${neededPolicy(packageOrigin, pageOrigin)}.`,
  );
}

/** {directive, blocked} of a SecurityPolicyViolationEvent, a plain object that crosses postMessage. */
export const violationOf = (e) => ({ directive: e.effectiveDirective || e.violatedDirective, blocked: e.blockedURI });

// The widget's stylesheets (tidepool's and uPlot's) as constructable stylesheets,
// adopted by the root the widget renders into: its shadow root, where host pages'
// CSS cannot reach it and its own cannot leak out, or the document when it renders
// into the page itself. No <link> goes into the host's <head>, and none is needed
// inside a shadow root. The CSS is fetched once, with CORS when the package is on
// another origin (a CDN), so a page's Content-Security-Policy governs it through
// connect-src; constructed sheets need no style-src.

import { CHART_CSS_URL } from './plot.mjs';

const TIDEPOOL_CSS_URL = new URL('./tidepool.css', import.meta.url);

// What a shadow root adds before the widget's own rules: the host element is a block
// (a host page can still hide or size it), and nothing inherited from the host page
// (a font size, letter spacing, text-transform...) reaches the widget: it starts
// from CSS's initial values, and tidepool.css's .tp rule sets what it needs.
const SHADOW_BASE = ':host { display: block } :host([hidden]) { display: none } .tp { all: initial }';

const texts = new Map(); // url -> Promise<string>

function cssText(url) {
  if (!texts.has(url)) {
    texts.set(
      url,
      // Accept: a dev server that serves CSS to imports as JavaScript (Vite's) sends
      // it as CSS when asked for CSS; anything else that comes back is refused.
      fetch(url, { headers: { Accept: 'text/css' } }).then((res) => {
        if (!res.ok) throw new Error(`HTTP ${res.status}`);
        const type = res.headers.get('Content-Type') ?? '';
        if (!/^\s*text\/css\b/i.test(type)) throw new Error(`it came back as ${type || 'no Content-Type'}, not text/css`);
        return res.text();
      }),
    );
  }
  return texts.get(url);
}

// One set of sheets per document (a constructed sheet is adopted only in the document
// whose window made it), shared by every widget in it.
const perDocument = new WeakMap();

function sheetsFor(doc) {
  let sheets = perDocument.get(doc);
  if (sheets) return sheets;
  const Sheet = doc.defaultView.CSSStyleSheet;
  const base = new Sheet();
  base.replaceSync(SHADOW_BASE);
  // adopted empty at once, filled when the text arrives (adopted sheets are live)
  const own = [CHART_CSS_URL, TIDEPOOL_CSS_URL].map((url) => ({ url: String(url), sheet: new Sheet({ baseURL: String(url) }) }));
  const ready = Promise.all(
    own.map(({ url, sheet }) =>
      cssText(url).then(
        (text) => sheet.replace(text),
        (err) => {
          // the widget still works, unstyled: say why
          console.warn(
            `tidepool: could not load ${url} (${err.message || err}). From another origin its server must send ` +
              'Access-Control-Allow-Origin, and a Content-Security-Policy must allow that origin in connect-src.',
          );
        },
      ),
    ),
  );
  sheets = { base, own: own.map((o) => o.sheet), ready };
  perDocument.set(doc, sheets);
  return sheets;
}

/**
 * Adopts the widget's sheets into `root` (a ShadowRoot, or a Document), after any it
 * has. Returns a promise that resolves once they hold their rules (a sheet that
 * failed to load stays empty).
 */
export function adoptStyles(root) {
  const doc = root.ownerDocument ?? root;
  const { base, own, ready } = sheetsFor(doc);
  const add = (root === doc ? own : [base, ...own]).filter((sheet) => !root.adoptedStyleSheets.includes(sheet));
  root.adoptedStyleSheets = [...root.adoptedStyleSheets, ...add];
  return ready.then(() => undefined);
}

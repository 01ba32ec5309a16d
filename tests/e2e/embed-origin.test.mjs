// The trainer embedded from another origin, as a blog embeds it from a package CDN:
// the dev server with --cors serves the package on 127.0.0.1:A (and a second one on
// :B), and a plain server on 127.0.0.1:H serves the host pages that embed it with
// README's snippet. Checked: it trains; a hostile stylesheet neither breaks it nor is
// broken by it; it trains under a strict Content-Security-Policy, and a policy
// without `worker-src blob:` gets the message naming it; two trainers from two
// origins on one page train independently. One browser for the whole file.

import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { after, before, test } from 'node:test';
import { chromium } from 'playwright-core';
import { startServer } from '../../www/serve.mjs';
import { CHROMIUM, requirePackage, waitPaused } from './helpers.mjs';

const ARGS = ['--enable-unsafe-webgpu', '--no-sandbox', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-dev-shm-usage'];

/** README's snippet, verbatim; the tests put each package server's origin in for :8000. */
const SNIPPET = `<script type="module" src="http://127.0.0.1:8000/www/tidepool.mjs"></script>
<tidepool-trainer preset="tiny" batch="2" context="8"></tidepool-trainer>`;
const snippet = (origin) => SNIPPET.replaceAll('http://127.0.0.1:8000', origin);

const HOSTILE = '* { all: revert; font-size: 40px } button { display: none }';

let pkg; // the package, --cors
let pkg2; // the same package on a second origin
let host; // the host pages: path -> {body, csp}
let browser;

/** Serves the pages put in `pages` (path -> {body, csp?}) on a free port of 127.0.0.1. */
function hostServer() {
  const pages = new Map();
  const server = createServer((req, res) => {
    const page = pages.get(new URL(req.url, 'http://x').pathname);
    if (!page) return res.writeHead(req.url === '/favicon.ico' ? 204 : 404).end(); // the browser asks for an icon
    res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8', ...(page.csp ? { 'Content-Security-Policy': page.csp } : {}) });
    res.end(`<!doctype html><html lang="en"><head><meta charset="utf-8"><title>a blog</title>${page.head ?? ''}</head><body>${page.body}</body></html>`);
  });
  return new Promise((done) =>
    server.listen(0, '127.0.0.1', () =>
      done({ origin: `http://127.0.0.1:${server.address().port}`, pages, close: () => new Promise((c) => (server.closeAllConnections(), server.close(c))) }),
    ),
  );
}

before(async () => {
  requirePackage();
  pkg = await startServer({ port: 0, cors: true });
  pkg2 = await startServer({ port: 0, cors: true });
  host = await hostServer();
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ARGS });
});
after(async () => {
  await browser?.close();
  await Promise.all([pkg?.close(), pkg2?.close(), host?.close()]);
});

const origin = (server) => server.url.replace(/\/$/, '');

/**
 * Opens host page `path` ({body, head?, csp?}); records errors, CSP violations and what
 * every trainer reports (its tidepool:* events, which bubble to the document).
 */
async function openHost(path, page, onTab = () => {}) {
  host.pages.set(path, page);
  const tab = await browser.newPage({ viewport: { width: 1200, height: 900 } });
  onTab(tab);
  const errors = [];
  tab.on('pageerror', (e) => errors.push(`page: ${e.message}`));
  tab.on('console', (m) => m.type() === 'error' && errors.push(`console: ${m.text()}`));
  tab.on('worker', (w) => w.on('console', (m) => m.type() === 'error' && errors.push(`worker: ${m.text()}`)));
  await tab.addInitScript(() => {
    window.seen = { steps: new Map(), errors: [], created: [], violations: [] };
    const who = (e) => e.target.id || 'trainer';
    document.addEventListener('tidepool:created', (e) => window.seen.created.push([who(e), e.detail.model]));
    document.addEventListener('tidepool:step', (e) => window.seen.steps.set(who(e), e.detail.step));
    document.addEventListener('tidepool:error', (e) => window.seen.errors.push([e.detail.kind, e.detail.message]));
    document.addEventListener('securitypolicyviolation', (e) => window.seen.violations.push(`${e.effectiveDirective} ${e.blockedURI}`));
  });
  await tab.goto(host.origin + path);
  return { tab, errors };
}

const seen = (tab) => tab.evaluate(() => ({ ...window.seen, steps: Object.fromEntries(window.seen.steps) }));

/** Waits until trainer `id` reports step `n` (or anything reports an error). */
async function waitSteps(tab, n, id = 'trainer', timeout = 150_000) {
  await tab.waitForFunction(([id, n]) => (window.seen.steps.get(id) ?? 0) >= n || window.seen.errors.length, [id, n], { timeout, polling: 100 });
  const s = await seen(tab);
  assert.deepEqual(s.errors, [], `no error while training ${id}`);
  return s.steps[id];
}

async function waitCreated(tab, count = 1) {
  await tab.waitForFunction((count) => window.seen.created.length >= count || window.seen.errors.length, count, { timeout: 120_000, polling: 100 });
  const s = await seen(tab);
  assert.deepEqual(s.errors, [], 'no error while loading');
  return s.created;
}

test('a page on another origin embeds the trainer with the snippet and trains', { timeout: 240_000 }, async () => {
  const { tab, errors } = await openHost('/plain', { body: `<h1>My blog</h1>\n${snippet(origin(pkg))}` });
  const [[, model]] = await waitCreated(tab);
  assert.equal(model.batch, 2, 'the batch attribute reached the trainer');
  assert.equal(model.context, 8, 'the context attribute reached the trainer');
  // the worker could not start from the package's origin: it is a same-origin blob: module
  assert.ok(tab.workers().some((w) => w.url().startsWith(`blob:${host.origin}/`)), `a blob: worker (${tab.workers().map((w) => w.url())})`);

  await tab.getByRole('button', { name: 'Start' }).click();
  assert.ok((await waitSteps(tab, 5)) >= 5);
  await tab.getByRole('button', { name: 'Pause' }).click();
  assert.match(await tab.locator('tidepool-trainer [data-testid="loss"]').innerText(), /^\d+\.\d+$/, 'the loss shows');

  // nothing added to the host page's document: the styles live in the shadow root
  const doc = await tab.evaluate(() => ({
    links: document.querySelectorAll('link').length,
    sheets: document.styleSheets.length,
    adopted: document.adoptedStyleSheets.length,
    shadow: document.querySelector('tidepool-trainer').shadowRoot.adoptedStyleSheets.length,
  }));
  assert.deepEqual(doc, { links: 0, sheets: 0, adopted: 0, shadow: 3 });
  assert.deepEqual(errors, [], 'no console errors');
  await tab.close();
});

test('a hostile stylesheet neither breaks the trainer nor is changed by it', { timeout: 240_000 }, async () => {
  const { tab, errors } = await openHost('/hostile', {
    // (and one deliberate theme change, through the part the widget exposes)
    head: `<style>${HOSTILE} .mine { color: rgb(1, 2, 3) } tidepool-trainer::part(trainer) { --tp-bg: rgb(4, 5, 6) }</style>`,
    // the host's own elements, some with the widget's class names
    body: `<p class="mine" id="mine">my text</p><button id="my-button">mine</button>
<div class="tp" id="lookalike"><h2 class="tp-title">not the widget</h2></div>
${snippet(origin(pkg))}`,
  });
  await waitCreated(tab);
  const start = tab.getByRole('button', { name: 'Start' });
  assert.ok(await start.isVisible(), 'the Start button shows');
  const inside = await tab.evaluate(() => {
    const root = document.querySelector('tidepool-trainer').shadowRoot;
    const button = root.querySelector('[data-testid="start"]');
    const css = getComputedStyle(button);
    return { display: css.display, font: css.fontSize, height: button.getBoundingClientRect().height, bg: getComputedStyle(root.querySelector('.tp')).backgroundColor };
  });
  assert.equal(inside.bg, 'rgb(4, 5, 6)', 'a host page themes it through ::part(trainer)');
  assert.notEqual(inside.display, 'none', 'button { display: none } does not reach it');
  assert.equal(inside.font, '15px', "the widget's own font size, not the host's 40px");
  // (its spacing is in rem: a host that sets its root font size scales it, as a reader's setting should)
  assert.ok(inside.height > 20, `the button has a height (${inside.height}px)`);

  await start.click();
  assert.ok((await waitSteps(tab, 2)) >= 2, 'it trains');
  await tab.getByRole('button', { name: 'Pause' }).click();

  const outside = await tab.evaluate(() => {
    const css = (id) => getComputedStyle(document.getElementById(id));
    return {
      mine: [css('mine').color, css('mine').fontSize],
      myButton: css('my-button').display,
      lookalike: [css('lookalike').backgroundColor, css('lookalike').paddingTop, css('lookalike').fontSize],
      sheets: document.styleSheets.length,
      adopted: document.adoptedStyleSheets.length,
    };
  });
  assert.deepEqual(outside, {
    mine: ['rgb(1, 2, 3)', '40px'],
    myButton: 'none',
    lookalike: ['rgba(0, 0, 0, 0)', '0px', '40px'], // tidepool.css's .tp did not leak onto it
    sheets: 1,
    adopted: 0,
  });
  assert.deepEqual(errors, [], 'no console errors');
  await tab.close();
});

test('under a strict Content-Security-Policy it trains; without worker-src blob: (or wasm-unsafe-eval) it says so', { timeout: 240_000 }, async () => {
  const A = origin(pkg);
  const strict = `default-src 'none'; script-src ${A} 'wasm-unsafe-eval'; worker-src blob: ${A}; connect-src ${A}`;
  const { tab, errors } = await openHost('/csp', { body: snippet(A), csp: strict });
  await waitCreated(tab);
  await tab.getByRole('button', { name: 'Start' }).click();
  assert.ok((await waitSteps(tab, 2)) >= 2, 'it trains');
  await tab.getByRole('button', { name: 'Pause' }).click();
  assert.deepEqual((await seen(tab)).violations, [], 'nothing it does violates the policy');
  await tab.getByRole('button', { name: 'Resume' }).waitFor(); // paused, and the controls show
  assert.equal(await tab.evaluate(() => getComputedStyle(document.querySelector('tidepool-trainer').shadowRoot.querySelector('.tp')).fontSize), '15px', 'styled without style-src');
  assert.deepEqual(errors, [], 'no console errors');
  await tab.close();

  for (const [name, csp, want] of [
    ['no-worker-src-blob', `default-src 'none'; script-src ${A} 'wasm-unsafe-eval'; worker-src ${A}; connect-src ${A}`, /add worker-src blob:/],
    ['no-wasm-eval', `default-src 'none'; script-src ${A}; worker-src blob: ${A}; connect-src ${A}`, /add 'wasm-unsafe-eval' to script-src/],
  ]) {
    const { tab: t } = await openHost(`/${name}`, { body: snippet(A), csp });
    await t.waitForFunction(() => window.seen.errors.length, null, { timeout: 60_000 });
    const [kind, message] = (await seen(t)).errors[0];
    assert.equal(kind, 'csp', `${name}: ${message}`);
    assert.match(message, want, name);
    const shown = t.locator('tidepool-trainer [data-testid="error"]');
    assert.match(await shown.innerText(), /Blocked by this page's Content-Security-Policy/, name);
    assert.match(await shown.innerText(), want, `${name}: the message shows`);
    await t.close();
  }

  // Without the package's origin in worker-src the worker's own import is refused inside
  // the worker, where the page cannot see the violation: the load error names both sources.
  const { tab: t } = await openHost('/no-worker-src-origin', { body: snippet(A), csp: `default-src 'none'; script-src ${A} 'wasm-unsafe-eval'; worker-src blob:; connect-src ${A}` });
  await t.waitForFunction(() => window.seen.errors.length, null, { timeout: 60_000 });
  const [kind, message] = (await seen(t)).errors[0];
  assert.equal(kind, 'load', message);
  assert.match(message, new RegExp(`must allow blob: and ${A.replace(/[.]/g, '\\.')} in worker-src`));
  await t.close();
});

test('a same-origin page under a strict policy starts its worker directly', { timeout: 240_000 }, async () => {
  // the package server's own origin, this one page given a policy on the way
  const tab = await browser.newPage();
  const errors = [];
  tab.on('console', (m) => m.type() === 'error' && errors.push(m.text()));
  const csp = "default-src 'none'; script-src 'self' 'wasm-unsafe-eval'; worker-src 'self'; connect-src 'self'";
  await tab.route(`${pkg.url}same-origin.html`, (route) =>
    route.fulfill({ status: 200, contentType: 'text/html', headers: { 'Content-Security-Policy': csp }, body: snippet('') }),
  );
  await tab.addInitScript(() => {
    window.violations = [];
    document.addEventListener('securitypolicyviolation', (e) => window.violations.push(`${e.effectiveDirective} ${e.blockedURI}`));
  });
  await tab.goto(`${pkg.url}same-origin.html`);
  await tab.getByRole('button', { name: 'Start' }).waitFor();
  await tab.waitForFunction(() => /Ready/.test(document.querySelector('tidepool-trainer').shadowRoot.querySelector('.tp-status').textContent), null, { timeout: 120_000 });
  assert.deepEqual(tab.workers().map((w) => w.url()), [`${pkg.url}www/worker.mjs`], 'worker.mjs itself, no blob:');
  await tab.getByRole('button', { name: 'Start' }).click();
  await tab.waitForFunction(() => Number(document.querySelector('tidepool-trainer').shadowRoot.querySelector('[data-testid="step-count"]').textContent) >= 2, null, { timeout: 120_000 });
  await tab.getByRole('button', { name: 'Pause' }).click();
  assert.deepEqual(await tab.evaluate(() => window.violations), []);
  assert.deepEqual(errors, []);
  await tab.close();
});

test('two trainers from two origins on one page train independently', { timeout: 300_000 }, async () => {
  const [A, B] = [origin(pkg), origin(pkg2)];
  const wasm = [];
  const { tab, errors } = await openHost('/two', {
    body: `${snippet(A).replace('<tidepool-trainer ', '<tidepool-trainer id="a" ')}
<div id="b"></div>
<script type="module">
  import { mount } from '${B}/www/tidepool.mjs';
  mount(document.getElementById('b'), { shadow: true, preset: 'tiny', batch: 2, context: 8, pool: false });
</script>`,
  }, (t) => t.on('request', (r) => r.url().endsWith('/pkg/tidepool_bg.wasm') && wasm.push(new URL(r.url()).origin)));
  await waitCreated(tab, 2);
  assert.equal(tab.workers().length, 2, 'a worker each');

  await tab.locator('#a').getByRole('button', { name: 'Start' }).click();
  await tab.locator('#b').getByRole('button', { name: 'Start' }).click();
  await waitSteps(tab, 3, 'a');
  await waitSteps(tab, 3, 'b');
  await tab.locator('#a').getByRole('button', { name: 'Pause' }).click();
  await waitPaused(tab, '#a'); // the step in flight has landed
  const aAt = (await seen(tab)).steps.a;
  const bAt = (await seen(tab)).steps.b;
  await waitSteps(tab, bAt + 2, 'b');
  assert.equal((await seen(tab)).steps.a, aAt, 'a stays paused while b trains');
  await tab.locator('#b').getByRole('button', { name: 'Pause' }).click();

  const [a, b] = await tab.evaluate(() => ['a', 'b'].map((id) => document.getElementById(id).tidepool.history.created));
  assert.equal(a.at(-1), 0, `a: pool on, no buffer created in its latest step (${a})`);
  assert.ok(b.every((c) => c > 0), `b: pool off, buffers created every step (${b})`);
  assert.deepEqual([...wasm].sort(), [A, B].sort(), 'each loaded the wasm from its own origin');
  assert.deepEqual(errors, [], 'no console errors');
  await tab.close();
});

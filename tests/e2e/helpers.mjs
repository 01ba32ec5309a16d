// Shared pieces of the end-to-end tests: the page's own static server, Debian's
// Chromium driven by playwright-core (it never downloads a browser), and waits that
// read the page the way a person would: the numbers it shows.
//
// WebGPU runs on SwiftShader here (a CPU Vulkan): a tiny step takes 0.1-0.5 s, but
// the first step on each new trainer compiles every shader (seconds; half a minute
// on a loaded 2-core machine), so waits for a first step are generous.

import { existsSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { startServer } from '../../www/serve.mjs';

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';

const ARGS = [
  '--no-sandbox',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
  '--disable-dev-shm-usage',
];

// The tiny preset with the smallest batch and context that still train, through the
// page's query string: the same model and code paths at a fraction of SwiftShader's
// time a step.
export const FAST = '?batch=2&context=8';

/** Fails early, and says how to fix it, when the wasm package is not built. */
export function requirePackage() {
  if (!existsSync(join(ROOT, 'pkg', 'tidepool.js'))) {
    throw new Error('pkg/tidepool.js is missing: build it first with `make pkg` (make test does).');
  }
}

/** Server + browser for one test file; `webgpu: false` is a browser without it. */
export async function setup({ webgpu = true } = {}) {
  requirePackage();
  const server = await startServer({ port: 0, root: ROOT });
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: webgpu ? ['--enable-unsafe-webgpu', ...ARGS] : ARGS,
  });
  return {
    server,
    browser,
    async close() {
      await browser.close();
      await server.close();
    },
  };
}

/** Opens `path` and records console errors and uncaught exceptions (workers' too). */
export async function open(env, path = '', { width = 1280, height = 900 } = {}) {
  const page = await env.browser.newPage({ viewport: { width, height } });
  const errors = [];
  page.on('console', (msg) => {
    if (msg.type() === 'error') errors.push(`console: ${msg.text()}`);
  });
  page.on('pageerror', (err) => errors.push(`page: ${err.message}`));
  // the training worker's console too: a wasm panic prints there
  page.on('worker', (worker) =>
    worker.on('console', (msg) => {
      if (msg.type() === 'error') errors.push(`worker: ${msg.text()}`);
    }),
  );
  await page.goto(env.server.url + path);
  return { page, errors };
}

/** `[data-testid=id]` inside `scope` (a CSS selector), or anywhere. */
export const tid = (id, scope = '') => `${scope ? `${scope} ` : ''}[data-testid="${id}"]`;

/** The number a data-testid element shows (NaN when it shows none). */
export async function num(page, id, scope = '') {
  return Number.parseFloat(await page.locator(tid(id, scope)).innerText());
}

/** Waits until the element's number satisfies `ok`; returns it. */
export async function waitNumber(page, id, ok, { scope = '', timeout = 60_000, what } = {}) {
  const deadline = Date.now() + timeout;
  let last;
  while (Date.now() < deadline) {
    last = await num(page, id, scope);
    if (ok(last)) return last;
    await page.waitForTimeout(100);
  }
  throw new Error(`timed out after ${timeout} ms waiting for ${what ?? id} (last shown: ${last})`);
}

/** Waits until the widget has built its trainer (its status says so). */
export async function waitReady(page, scope = '', timeout = 90_000) {
  await page.waitForFunction(
    (sel) => {
      const host = sel ? document.querySelector(sel) : document;
      const root = host?.shadowRoot ?? host; // <tidepool-trainer> renders into its shadow root
      const status = root?.querySelector('.tp-status')?.textContent ?? '';
      return /Ready|Paused|Training/.test(status) && root.querySelector('[data-testid="adapter"]').textContent.includes('(');
    },
    scope,
    { timeout, polling: 100 },
  );
}

/** Waits until the status line says paused and returns the step it shows; on a timeout, says what the widget showed. */
export async function waitPaused(page, scope = '', timeout = 30_000) {
  const shown = (sel) => {
    const host = sel ? document.querySelector(sel) : document;
    const root = host.shadowRoot ?? host;
    return {
      pauseDisabled: root.querySelector('[data-testid="pause"]').disabled,
      status: root.querySelector('.tp-status').textContent,
      // the error box, where it shows
      error: [root.querySelector('[data-testid="error"]')].map((el) => (el?.offsetParent ? el.textContent.replace(/\s+/g, ' ').trim() : ''))[0],
    };
  };
  try {
    await page.waitForFunction(
      (sel) => {
        const host = sel ? document.querySelector(sel) : document;
        const root = host.shadowRoot ?? host;
        return root.querySelector('[data-testid="pause"]').disabled && /Paused|Ready/.test(root.querySelector('.tp-status').textContent);
      },
      scope,
      { timeout, polling: 50 },
    );
  } catch (e) {
    const state = await page.evaluate(shown, scope).catch(() => 'unreadable');
    throw new Error(`not paused after ${timeout} ms${scope ? ` (${scope})` : ''}: ${JSON.stringify(state)}`, { cause: e });
  }
  await nextFrame(page); // the figures are drawn once a frame: let the last step show
  return num(page, 'step-count', scope);
}

/**
 * The page's one training worker. After a Restart, Playwright may still list the
 * terminated worker for a moment (its close event lags the new worker's first
 * step), and evaluating in it fails with "Target ... has been closed": wait until
 * only the live one is listed.
 */
export async function theWorker(page, timeout = 10_000) {
  const until = Date.now() + timeout;
  for (;;) {
    const workers = page.workers();
    if (workers.length === 1) return workers[0];
    if (Date.now() > until) throw new Error(`expected one training worker, the page lists ${workers.length}: ${workers.map((w) => w.url())}`);
    await new Promise((done) => setTimeout(done, 50));
  }
}

export function nextFrame(page) {
  return page.evaluate(() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done))));
}

/** The widget's record of the current run (arrays per step), from its controller. */
export function history(page, selector = '.tp') {
  return page.evaluate((sel) => {
    const h = document.querySelector(sel).tidepool.history;
    return { n: h.n, loss: h.loss, hit: h.hit, created: h.created, held: h.held };
  }, selector);
}

export function screenshotPath() {
  const path = join(ROOT, 'target', 'screenshot.png');
  mkdirSync(dirname(path), { recursive: true });
  return path;
}

export const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;

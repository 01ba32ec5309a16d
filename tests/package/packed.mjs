// The npm package as a user gets it: `npm pack` of this repository, installed into
// fresh projects in a temporary directory outside it, and a trainer embedded there
// that must load and train in Chromium. Shared by the plain-page and Vite tests.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

export const HERE = dirname(fileURLToPath(import.meta.url));
export const ROOT = resolve(HERE, '..', '..');
/** The package's name, as a user imports it. */
export const NAME = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).name;
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
const ARGS = ['--enable-unsafe-webgpu', '--no-sandbox', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-dev-shm-usage'];

/** Packs the repository into a new temporary directory; returns {work, tarball, remove}. */
export function pack() {
  for (const f of ['pkg/tidepool.js', 'pkg/tidepool_bg.wasm']) {
    if (!statSync(join(ROOT, f), { throwIfNoEntry: false })) throw new Error(`${f} is missing: build it first with \`make pkg\``);
  }
  const work = mkdtempSync(join(tmpdir(), 'tidepool-npm-'));
  assert.ok(!resolve(work).startsWith(ROOT + sep), 'the projects are outside the repository');
  execFileSync('npm', ['pack', '--pack-destination', work], { cwd: ROOT, stdio: 'pipe' });
  const tarball = readdirSync(work).find((f) => f.endsWith('.tgz'));
  assert.ok(tarball, 'npm pack made a tarball');
  return { work, tarball: join(work, tarball), remove: () => rmSync(work, { recursive: true, force: true }) };
}

/** A new project `name` in `work` with the tarball installed and `files` ({path: text}) written. */
export function project(work, tarball, name, files = {}) {
  const dir = join(work, name);
  mkdirSync(dir);
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name, private: true, type: 'module' }));
  // --offline: the tarball holds everything it needs (uPlot is bundled), no registry
  execFileSync('npm', ['install', '--offline', '--no-audit', '--no-fund', tarball], { cwd: dir, stdio: 'pipe' });
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, path)), { recursive: true });
    writeFileSync(join(dir, path), text);
  }
  return dir;
}

export function launch() {
  return chromium.launch({ executablePath: CHROMIUM, headless: true, args: ARGS });
}

/**
 * Opens `url` in a new context of `browser` and trains the one trainer there: it must
 * build its model, take three steps with finite losses, and say nothing wrong. Every
 * request is seen (the page's, its worker's); any to another origin is aborted.
 * Returns {seen, failed, model, corpus, styles, workers} for the caller's checks.
 */
export async function trainOn(browser, url) {
  const context = await browser.newContext();
  const origin = new URL(url).origin;
  const seen = [];
  const foreign = [];
  const failed = [];
  await context.route('**/*', (route) => {
    const u = route.request().url();
    seen.push(u);
    if (new URL(u).origin === origin || u.startsWith('data:')) return route.continue();
    foreign.push(u);
    return route.abort('blockedbyclient');
  });
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(`page: ${e.message}`));
  // a browser asks for /favicon.ico by itself; the page does not
  page.on('response', (r) => r.status() >= 400 && !r.url().endsWith('/favicon.ico') && failed.push(`${r.status()} ${r.url()}`));
  page.on('console', (m) => m.type() === 'error' && !/Failed to load resource/.test(m.text()) && errors.push(`console: ${m.text()}`));
  page.on('worker', (w) => w.on('console', (m) => m.type() === 'error' && errors.push(`worker: ${m.text()}`)));
  // what the trainer reports, as a host page would listen for it
  await page.addInitScript(() => {
    window.reported = { steps: [], errors: [], created: null };
    document.addEventListener('tidepool:created', (e) => (window.reported.created = e.detail));
    document.addEventListener('tidepool:step', (e) => window.reported.steps.push(e.detail.loss));
    document.addEventListener('tidepool:error', (e) => window.reported.errors.push(e.detail.message));
  });
  await page.goto(url);
  await page.waitForFunction(() => window.reported.created || window.reported.errors.length, null, { timeout: 120_000 });
  assert.deepEqual(await page.evaluate(() => window.reported.errors), [], 'no error while loading');
  const { model, corpus } = await page.evaluate(() => window.reported.created);

  await page.getByRole('button', { name: 'Start' }).click();
  await page.waitForFunction(() => window.reported.steps.length >= 3 || window.reported.errors.length, null, { timeout: 120_000 });
  const { steps, errors: reported } = await page.evaluate(() => window.reported);
  assert.deepEqual(reported, [], 'no error while training');
  assert.ok(steps.length >= 3 && steps.every(Number.isFinite), `three finite losses (${steps})`);
  await page.getByRole('button', { name: 'Pause' }).click();

  // the widget's own styles reached it (tidepool.css sets 15px; uPlot's places its canvases)
  const styles = await page.evaluate(() => {
    const tp = document.querySelector('tidepool-trainer')?.shadowRoot?.querySelector('.tp') ?? document.querySelector('.tp');
    const over = tp.querySelector('.u-over');
    return { font: getComputedStyle(tp).fontSize, chart: over && getComputedStyle(over).position };
  });
  const workers = page.workers().map((w) => w.url());
  assert.deepEqual(foreign, [], 'no request left the page origin');
  assert.deepEqual(errors, [], 'no console errors');
  await context.close();
  return { seen: seen.map((u) => (u.startsWith('data:') ? 'data:' : new URL(u).pathname)), failed, model, corpus, styles, workers };
}

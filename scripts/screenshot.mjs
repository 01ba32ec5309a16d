// The README's screenshot: the page as `make demo` serves it, trained for a while on
// the default preset and corpus, in headless Chromium (WebGPU on SwiftShader here).
//   make pkg && node scripts/screenshot.mjs [--steps 300] [--out docs/screenshot.png]
// Needs the npm packages (scripts/setup.sh web). $CHROMIUM: the browser (default
// /usr/bin/chromium).
import { parseArgs } from 'node:util';
import { chromium } from 'playwright-core';
import { startServer } from '../www/serve.mjs';

const { values: opt } = parseArgs({
  options: {
    steps: { type: 'string', default: '300' },
    out: { type: 'string', default: 'docs/screenshot.png' },
    width: { type: 'string', default: '1280' },
  },
});
const steps = Number(opt.steps);
if (!Number.isInteger(steps) || steps < 1 || steps > 100_000) {
  console.error(`--steps must be a whole number from 1 to 100000, got ${opt.steps}`);
  process.exit(2);
}

const server = await startServer({ port: 0 });
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  args: ['--enable-unsafe-webgpu', '--no-sandbox', '--disable-dev-shm-usage', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--no-first-run'],
});
try {
  const page = await browser.newPage({ viewport: { width: Number(opt.width), height: 900 } });
  page.on('pageerror', (e) => console.error(`page: ${e.message}`));
  await page.goto(server.url);
  const shown = (id) => page.locator(`[data-testid="${id}"]`).first();
  // ready: the adapter is shown as "name (backend)"
  await page.waitForFunction(() => document.querySelector('[data-testid="adapter"]')?.textContent.includes('('),
    null, { timeout: 180_000, polling: 250 });
  await shown('start').click();
  const started = Date.now();
  for (;;) {
    const step = Number.parseFloat(await shown('step-count').innerText());
    if (step >= steps) break;
    if (Date.now() - started > 600_000) throw new Error(`no step ${steps} after 10 minutes (at ${step})`);
    await page.waitForTimeout(500);
  }
  await shown('pause').click();
  await page.waitForFunction(() => /Paused/.test(document.querySelector('.tp-status')?.textContent ?? ''),
    null, { timeout: 60_000, polling: 100 });
  // two frames: the charts draw the last steps
  await page.evaluate(() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done))));
  await page.screenshot({ path: opt.out, fullPage: true });
  console.log(`${opt.out}: the page after ${steps} steps`);
} finally {
  await browser.close();
  await server.close();
}

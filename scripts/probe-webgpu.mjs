// Which adapter a page of Chromium gets from WebGPU: opens a blank page of the page's
// own server in headless Chromium ($CHROMIUM, with $CHROMIUM_ARGS added to its flags)
// and prints the adapter's info as JSON (null: no adapter). With a file argument, it
// also saves the text of chrome://gpu there, to see why a GPU was or was not used,
// and adds its WebGPU status line to the JSON.
//   CHROMIUM_ARGS='--ignore-gpu-blocklist' node scripts/probe-webgpu.mjs [gpu.txt]
import { writeFileSync } from 'node:fs';
import { chromium } from 'playwright-core';
import { startServer } from '../www/serve.mjs';

const server = await startServer({ port: 0 });
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  args: ['--enable-unsafe-webgpu', '--no-sandbox', '--disable-dev-shm-usage',
    ...(process.env.CHROMIUM_ARGS ?? '').split(' ').filter(Boolean)],
});
try {
  const page = await browser.newPage();
  // The browser says on the console why it has no adapter.
  const console_ = [];
  page.on('console', (m) => console_.push(m.text()));
  await page.goto(`${server.url}www/blank.html`);
  const info = await page.evaluate(async () => {
    if (!navigator.gpu) return { adapter: null, why: `no navigator.gpu (secure context: ${isSecureContext})` };
    const tries = [{}, { powerPreference: 'high-performance' }, { featureLevel: 'compatibility' }];
    for (const options of tries) {
      const adapter = await navigator.gpu.requestAdapter(options).catch((e) => String(e));
      if (typeof adapter === 'string') return { adapter: null, why: adapter };
      if (!adapter) continue;
      const { vendor, architecture, device, description } = adapter.info;
      return { vendor, architecture, device, description, options, storage_buffers: adapter.limits.maxStorageBuffersPerShaderStage };
    }
    return { adapter: null, why: 'requestAdapter resolved to null' };
  });
  info.console = console_.slice(0, 5);
  if (!process.argv[2]) console.log(JSON.stringify(info));
  else {
    await page.goto('chrome://gpu');
    await page.waitForTimeout(2000);
    // The page draws its report inside shadow roots: gather their text too.
    const text = await page.evaluate(() => {
      const walk = (node) => [...(node.shadowRoot ? [node.shadowRoot] : []), ...node.childNodes]
        .map((child) => (child.nodeType === Node.TEXT_NODE ? child.textContent : walk(child))).join(' ');
      return walk(document.body).replace(/[ \t]+/g, ' ');
    });
    writeFileSync(process.argv[2], text);
    const status = text.match(/WebGPU: [^*]*/)?.[0]?.trim() ?? null;
    console.log(JSON.stringify({ ...info, status }));
  }
} finally {
  await browser.close();
  await server.close();
}

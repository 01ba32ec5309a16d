// The latency of a readback on an idle GPU, as a trainer's call ends with one: a
// 16-byte copy submitted, then its buffer mapped and unmapped, `count` times after
// `warmup`. Self-contained, with nothing but `navigator.gpu` and the WebGPU globals:
// bench-browser.mjs hands it to a page (Playwright runs its source there) and
// bench-dawn.mjs calls it in Node.js, so both measure the same calls.
export async function readbackRoundTrips({ warmup, count }) {
  let adapter = null;
  // Headless Chromium on the H200 sometimes answers null at first (bench-browser.mjs).
  for (let i = 0; i < 10 && !adapter; i++) adapter = await navigator.gpu.requestAdapter();
  if (!adapter) throw new Error('no WebGPU adapter');
  const device = await adapter.requestDevice();
  const src = device.createBuffer({ size: 16, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC });
  const dst = device.createBuffer({ size: 16, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const times = [];
  for (let i = 0; i < warmup + count; i++) {
    const start = performance.now();
    const encoder = device.createCommandEncoder();
    encoder.copyBufferToBuffer(src, 0, dst, 0, 16);
    device.queue.submit([encoder.finish()]);
    await dst.mapAsync(GPUMapMode.READ);
    dst.unmap();
    if (i >= warmup) times.push(performance.now() - start);
  }
  device.destroy();
  times.sort((a, b) => a - b);
  return {
    bench: 'readback',
    vendor: adapter.info?.vendor ?? '',
    round_trips: count,
    median_ms: times[Math.floor(count / 2)],
    min_ms: times[0],
    max_ms: times[count - 1],
  };
}

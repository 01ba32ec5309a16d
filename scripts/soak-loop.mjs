// The soak's training loop, one self-contained function: Chromium runs it in a page
// (scripts/soak-browser.mjs passes its source), Node.js through Dawn runs it as it is
// (scripts/soak-dawn.mjs). It trains `steps` steps in calls of `atOnce`, `inFlight`
// calls in flight as the page's worker keeps them, evaluating and sampling on their
// cadence between calls, and every `every` steps reads what should stay flat after
// warm-up: the bytes the pool holds, buffers and bind groups created so far, the
// wasm memory and the JS heap (after a collection where the runtime exposes one).

/**
 * @param {object} opt  {pkg, wasmBytes?, corpus, preset, batch?, context?, steps, every,
 *                       atOnce, inFlight, evalEvery, evalBatches, sampleEvery, sampleLength}
 * @returns {Promise<{adapter: object, rows: object[]}>}
 */
export async function soak(opt) {
  const m = await import(opt.pkg);
  const wasm = opt.wasmBytes ? m.initSync({ module: opt.wasmBytes }) : await m.default();
  const config = { preset: opt.preset, eval_batches: opt.evalBatches };
  if (opt.batch) config.batch = opt.batch;
  if (opt.context) config.context = opt.context;
  // Headless Chromium on the H200 resolves requestAdapter to null now and then (its
  // console: "A valid external Instance reference no longer exists"), as
  // scripts/bench-browser.mjs found: a trainer refused a device so is built again,
  // up to 10 times, and the report says how many tries it took.
  let adapterRetries = 0;
  let trainer;
  for (;;) {
    try {
      trainer = await m.Trainer.create(config, opt.corpus);
      break;
    } catch (e) {
      if (e?.kind !== 'no_webgpu' || adapterRetries >= 9) throw e;
      adapterRetries += 1;
      await new Promise((ok) => setTimeout(ok, 500));
    }
  }
  const heap = () => {
    globalThis.gc?.();
    if (globalThis.process?.memoryUsage) return globalThis.process.memoryUsage().heapUsed;
    return globalThis.performance?.memory?.usedJSHeapSize ?? null;
  };
  const rows = [];
  let last = null;
  let done = 0;
  const due = (every, from, to) => every > 0 && Math.floor(to / every) > Math.floor(from / every);
  const t0 = Date.now();
  // Calls end at the next multiple of `every` (a row), of the evaluation or sample
  // cadence, or at the run's end, as the page's schedule cuts them.
  const nextEnd = (from) => {
    const to = (k) => (k > 0 ? from + (k - (from % k)) : Infinity);
    return Math.min(from + opt.atOnce, to(opt.every), to(opt.evalEvery), to(opt.sampleEvery), opt.steps);
  };
  let ahead = null;
  while (done < opt.steps) {
    const from = done;
    const end = nextEnd(from);
    const call = ahead ?? trainer.steps(end - from);
    ahead = null;
    const quiet = !due(opt.every, from, end) && !due(opt.evalEvery, from, end) && !due(opt.sampleEvery, from, end);
    if (opt.inFlight > 1 && quiet && end < opt.steps) ahead = trainer.steps(nextEnd(end) - end);
    const stats = await call;
    last = stats[stats.length - 1];
    done = end;
    if (ahead) continue;
    if (due(opt.evalEvery, from, end)) await trainer.evaluate();
    if (due(opt.sampleEvery, from, end)) await trainer.sample('\n', opt.sampleLength, 0.8, 0);
    if (due(opt.every, from, end) || done === opt.steps) {
      // Now, with what the evaluation or sample just made (a step's stats hold its
      // record time's counters).
      const { context: c, pool } = trainer.counters();
      rows.push({
        step: done,
        bytes_held: pool.bytes_held,
        bytes_in_use: c.bytes_in_use,
        buffers_created: c.buffers_created,
        bind_groups_created: c.bind_groups_created,
        pipelines_created: c.pipelines_created,
        wasm_memory: wasm.memory.buffer.byteLength,
        js_heap: heap(),
        loss: last.loss,
        val_loss: trainer.stats().val_loss ?? null,
        elapsed_s: (Date.now() - t0) / 1e3,
      });
    }
  }
  const adapter = trainer.adapter();
  trainer.free();
  return { adapter: { ...adapter, retries: adapterRetries }, rows };
}

/**
 * Whether the rows are flat after warm-up: from the first row at or past `warmUp`
 * (the step by which every path, evaluation and sampling included, has run once: a
 * path makes its objects at its first use), the same buffers, bind groups and
 * pipelines created, bytes held and wasm memory; the JS heap within `heapSlack`
 * bytes of that row's. Returns the failures, named.
 */
export function flatAfterWarmUp(rows, warmUp = 0, heapSlack = 4 << 20) {
  const from = Math.max(0, rows.findIndex((r) => r.step >= warmUp));
  const [first, ...rest] = rows.slice(from);
  if (!first) return [`no row at or past step ${warmUp}: run more steps than the warm-up`];
  const failures = [];
  for (const key of ['buffers_created', 'bind_groups_created', 'pipelines_created', 'bytes_held', 'wasm_memory']) {
    const moved = rest.filter((r) => r[key] !== first[key]);
    if (moved.length) failures.push(`${key} moved after step ${first.step}: ${[first, ...moved].map((r) => `${r.step}: ${r[key]}`).join(', ')}`);
  }
  if (first.js_heap !== null) {
    const grown = rest.filter((r) => r.js_heap - first.js_heap > heapSlack);
    if (grown.length) failures.push(`the JS heap grew by more than ${heapSlack} bytes: ${grown.map((r) => `${r.step}: ${r.js_heap}`).join(', ')}`);
  }
  return failures;
}

/** The rows as a Markdown table. */
export function table(rows) {
  const mb = (b) => (b === null ? 'n/a' : (b / 2 ** 20).toFixed(2));
  const lines = [
    '| step | bytes held (MiB) | buffers created | bind groups created | wasm memory (MiB) | JS heap (MiB) | loss | s |',
    '| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
  ];
  for (const r of rows) {
    lines.push(`| ${r.step} | ${mb(r.bytes_held)} | ${r.buffers_created} | ${r.bind_groups_created} | ${mb(r.wasm_memory)} | ${mb(r.js_heap)} | ${r.loss.toFixed(3)} | ${r.elapsed_s.toFixed(0)} |`);
  }
  return lines.join('\n');
}

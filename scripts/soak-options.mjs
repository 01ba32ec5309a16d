// What the two soak scripts share besides their loop (scripts/soak-loop.mjs): their
// command line, checked (whole numbers in their ranges, or an exit naming the flag
// and what it takes), and their report (a Markdown table or JSON, --out FILE, exit 1
// when a figure moved after warm-up).
import { writeFileSync } from 'node:fs';
import { cpus, hostname } from 'node:os';
import { parseArgs } from 'node:util';
import { flatAfterWarmUp, table } from './soak-loop.mjs';

const RANGES = {
  batch: [1, 65_536],
  context: [1, 65_536],
  steps: [1, 10_000_000],
  every: [1, 10_000_000],
  'at-once': [1, 1024],
  'in-flight': [1, 2],
  'eval-every': [0, 10_000_000],
  'eval-batches': [1, 10_000],
  'sample-every': [0, 10_000_000],
  'sample-length': [1, 10_000],
};

/**
 * The command line, `defaults` (flag -> string) over the shared ones: the parsed
 * strings (`values`) and the soak loop's options (`opt`).
 */
export function soakArgs(defaults, extra = {}) {
  const options = { preset: { type: 'string' }, json: { type: 'boolean', default: false }, out: { type: 'string' }, ...extra };
  for (const name of Object.keys(RANGES)) options[name] = { type: 'string' };
  for (const [name, value] of Object.entries(defaults)) options[name].default = value;
  const { values } = parseArgs({ options });
  const n = {};
  for (const [name, [lo, hi]] of Object.entries(RANGES)) {
    if (values[name] === undefined) continue;
    const v = Number(values[name]);
    if (!Number.isInteger(v) || v < lo || v > hi) {
      console.error(`--${name} must be a whole number from ${lo} to ${hi}, got ${values[name]}`);
      process.exit(2);
    }
    n[name] = v;
  }
  const opt = {
    preset: values.preset,
    batch: n.batch,
    context: n.context,
    steps: n.steps,
    every: n.every,
    atOnce: n['at-once'],
    inFlight: n['in-flight'],
    evalEvery: n['eval-every'],
    evalBatches: n['eval-batches'],
    sampleEvery: n['sample-every'],
    sampleLength: n['sample-length'],
  };
  return { values, opt };
}

/** Prints (and with --out writes) the soak's report; exits 1 when it is not flat. */
export function report(runtime, result, { values, opt }) {
  // Warm-up ends once every path has run: the first evaluation and the first sample.
  const firstUses = [opt.evalEvery, opt.sampleEvery].filter((n) => n > 0);
  const failures = flatAfterWarmUp(result.rows, Math.max(0, ...firstUses));
  const out = {
    bench: 'soak',
    runtime,
    adapter: result.adapter,
    machine: `${hostname()}, ${cpus().length} cores`,
    date: new Date().toISOString().slice(0, 10),
    options: opt,
    rows: result.rows,
    flat: failures.length === 0,
    failures,
  };
  if (values.out) writeFileSync(values.out, `${JSON.stringify(out, null, 1)}\n`);
  if (values.json) console.log(JSON.stringify(out));
  else {
    const shape = `batch ${opt.batch ?? 'of the preset'}, context ${opt.context ?? 'of the preset'}`;
    console.log(`soak: ${opt.preset} (${shape}), ${opt.steps} steps, ${runtime}, ${JSON.stringify(result.adapter)}`);
    console.log(table(result.rows));
    console.log(failures.length ? `NOT FLAT:\n${failures.join('\n')}` : 'flat after warm-up');
  }
  process.exit(failures.length ? 1 : 0);
}

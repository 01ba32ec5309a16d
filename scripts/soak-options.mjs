// The soak scripts' options, checked: whole numbers in their ranges, or an exit
// naming the flag and what it takes.

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

/** parseArgs' strings as the soak loop's options. */
export function soakOptions(values) {
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
  return {
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
}

// The wasm Trainer through 'tidepool-gpu/wasm' (pkg/tidepool.js with www/wasm.d.ts's shapes),
// and a check that www/wasm.d.ts declares exactly the methods wasm-bindgen generated.

import init, { presets, replayTrace, Schedule, Snapshot, Trainer, type ErrorKind, type ModelInfo, type RecordingReport, type StepStats, type TrainerConfig } from 'tidepool-gpu/wasm';
import type * as generated from '../../pkg/tidepool.js';

type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
const assert = <T extends true>(): T => true as T;
// Same instance methods and statics as the generated class; a method added to
// src/web.rs fails here until www/wasm.d.ts has it.
assert<Equal<keyof Trainer, keyof generated.Trainer>>();
assert<Equal<Exclude<keyof typeof Trainer, 'prototype'>, Exclude<keyof typeof generated.Trainer, 'prototype'>>>();
// Every function the wasm package exports is declared, with the same parameters.
assert<Equal<Exclude<keyof typeof import('tidepool-gpu/wasm'), never>, keyof typeof generated>>();
assert<Equal<Parameters<Trainer['sample']>, Parameters<generated.Trainer['sample']>>>();
assert<Equal<keyof Schedule, keyof generated.Schedule>>();
assert<Equal<keyof Snapshot, keyof generated.Snapshot>>();
assert<Equal<Exclude<keyof typeof Snapshot, 'prototype'>, Exclude<keyof typeof generated.Snapshot, 'prototype'>>>();
assert<Equal<Parameters<typeof Snapshot.read>, Parameters<typeof generated.Snapshot.read>>>();

async function train(): Promise<number> {
  await init();
  const names: string[] = presets();
  const config: TrainerConfig = { preset: 'tiny', batch: 2, context: 8, pool: true, policy: 'exact', eval_every: 5 };
  // @ts-expect-error: presets are the names presets() lists, not any string
  const typo: TrainerConfig = { preset: 'tiyn' };
  // @ts-expect-error: pow2/N splits an octave in a power of two
  const odd: TrainerConfig = { policy: 'pow2/3' };
  const fine: TrainerConfig = { policy: 'pow2/1024' };
  // @ts-expect-error: unknown fields are refused by the wasm, and by the types
  const bad: TrainerConfig = { layer: 3 };
  const half: TrainerConfig = { precision: 'f16' };
  // @ts-expect-error: the precisions are f32 and f16
  const bf16: TrainerConfig = { precision: 'bf16' };
  const schedule = new Schedule({ callMs: 16, maxAtOnce: 16, overlapMs: 8, evalEvery: 20, end: 100 });
  // @ts-expect-error: unknown options are refused by the wasm, and by the types
  const misnamed = new Schedule({ batchMs: 16 });
  const n: number = schedule.stepsFrom(0, undefined);
  const overlap: boolean = schedule.overlaps(4) && schedule.nothingDueAt(n);
  const trainer = await Trainer.create(config, 'abcabcabd'.repeat(50), 'letters');
  // `using` needs ESNext.Disposable; the method is there, typed, without it
  const dispose: () => void = trainer[Symbol.dispose];
  const model: ModelInfo = trainer.model();
  let stats: StepStats = trainer.stats();
  for (let i = 0; i < 3; i++) stats = await trainer.step();
  const held: number = await trainer.evaluate();
  // null under the pool's policies; a planned run's arenas and each tensor's range
  const plan = trainer.memoryPlan();
  const offsets: number[] = plan ? plan.ranges.map((r) => plan.arenas[r.arena].bytes - r.offset) : [];
  const text: string = await trainer.sample('ab', 20, 0.8, 0);
  console.log(names, model.params, trainer.adapter().backend, trainer.corpus().tokens, held, offsets, text, bad, half, bf16, typo, odd, fine, dispose, overlap, misnamed);
  trainer.free();
  return stats.loss;
}

/** A PyTorch snapshot's report, and where its timeline peaks. */
function snapshotPeak(bytes: Uint8Array): [number, string, number] {
  const snapshot = Snapshot.read(bytes);
  const report: RecordingReport = snapshot.report();
  const step = report.steps[0];
  const recorded: number = step.replay.rows[1].peak_bytes;
  const timeline = snapshot.timeline(0);
  const sizes: Float64Array = timeline.size;
  const found: boolean = step.chosen === 'found' && step.period !== null && step.period.matched > 0.9;
  snapshot.free();
  const kind: ErrorKind = 'trace';
  console.log(recorded, sizes.length, found, kind, replayTrace('{}').format);
  return [timeline.peak, report.format, step.peaks.reserved];
}

export { snapshotPeak, train };

// Uses every part of the widget's declared API the way a TypeScript page would;
// `tsc -p tests/types` (make test-types) fails when a declaration is missing or wrong.
// Lines marked @ts-expect-error must stay errors: they prove the types reject misuse.

import {
  mount,
  optionsFromQuery,
  TidepoolTrainer,
  type StepStats,
  type TidepoolController,
  type TidepoolErrorKind,
  type TidepoolOptions,
} from 'tidepool-gpu';

const options: TidepoolOptions = {
  title: 'My trainer',
  preset: 'tiny',
  pool: false,
  policy: 'pow2/8',
  lr: 0.003,
  batch: 2,
  context: 8,
  seed: 7,
  steps: 200,
  corpus: 'some text to learn',
  corpusName: 'notes',
  corpusUrl: '/corpus.txt',
  autostart: true,
  pkgUrl: new URL('/pkg/tidepool.js', location.href),
  schedule: { evalEvery: 10, firstSample: 5, sampleSeconds: 20, temperature: 0.9, topK: 40, maxSteps: 100, overlap: false },
  watchdog: { busy: 600_000 },
};
// @ts-expect-error: options are checked
const wrong: TidepoolOptions = { batch: '2' };
// @ts-expect-error: so are policies
const badPolicy: TidepoolOptions = { policy: 'fibonacci' };
// @ts-expect-error: and presets: a typo is caught here, not at run time
const badPreset: TidepoolOptions = { preset: 'tiyn' };
// where a bundler moved the package's files
const moved: TidepoolOptions = { pkgUrl: '/assets/tidepool.js', wasmUrl: new URL('/assets/tidepool_bg.wasm', location.href), workerUrl: '/assets/worker.js' };

const host = document.createElement('div');
const trainer: TidepoolController = mount(host, { ...options, ...optionsFromQuery('?batch=4&pool=off') });
trainer.start();
trainer.pause();
trainer.stepOnce();
trainer.sample();
const rebuilt: Promise<boolean> = trainer.reset();
void trainer.setPool(true);
void trainer.useCorpus('new text', 'mine');
void trainer.useCorpus(new File(['text'], 'a.txt'));
void trainer.useCorpus(undefined);
void trainer.useCorpus(new TextEncoder().encode('bytes of text'), 'bytes');
// @ts-expect-error: a name is text
void trainer.useCorpus('text', 5);
void trainer.restart(true);
const building: number = trainer.state.building;
trainer.watchdog.busy = 60_000;
const running: boolean = trainer.running;
const lastLoss: number | undefined = trainer.history.loss.at(-1);
const previous = trainer.previous?.label;
const latest: StepStats | null = trainer.latest;
// the arena view of the last traced step, under the planned policy
const arenaOffsets: number[] = trainer.lastTrace?.arenas?.tensors.map((t) => t.offset) ?? [];
const same: boolean = trainer === host.tidepool && trainer.element === host;

// Events bubble from the mount point; their details are typed.
host.addEventListener('tidepool:step', (e) => {
  const loss: number = e.detail.loss;
  const hit: number = e.detail.step_hit_rate;
  const created: number = e.detail.buffers_created_step;
  const buckets: number = e.detail.buckets.reduce((n, b) => n + b.count * b.size, 0);
  const val: number | null = e.detail.val_loss;
  console.log(loss, hit, created, buckets, val, e.detail.pool.hits, e.detail.context.buffers_created);
});
host.addEventListener('tidepool:created', (e) => {
  const params: number = e.detail.model.params;
  const vocab: number = e.detail.corpus.vocab;
  const backend: string = e.detail.adapter.backend;
  console.log(params, vocab, backend);
});
host.addEventListener('tidepool:sample', (e) => console.log(e.detail.step, e.detail.text.length));
host.addEventListener('tidepool:state', (e) => console.log(e.detail.running, e.detail.step, e.detail.reason ?? ''));
host.addEventListener('tidepool:error', (e) => {
  const kind: TidepoolErrorKind | undefined = e.detail.kind;
  console.log(e.detail.message, kind);
});
host.addEventListener('tidepool:step', (e) => {
  // @ts-expect-error: a step's detail has no text
  console.log(e.detail.text);
});

// The element: typed by its tag name, its controller once connected.
const el = document.createElement('tidepool-trainer');
const isElement: TidepoolTrainer = el;
el.setAttribute('preset', 'tiny');
el.setAttribute('batch', '2');
el.setAttribute('context', '8');
el.toggleAttribute('autostart', true);
document.body.append(el);
el.tidepool?.start();
const found: TidepoolTrainer | null = document.querySelector('tidepool-trainer');
found?.addEventListener('tidepool:state', (e) => console.log(e.detail.running));
customElements.whenDefined('tidepool-trainer').then(() => trainer.destroy());

export { building, rebuilt, running, lastLoss, previous, latest, arenaOffsets, same, wrong, badPolicy, badPreset, moved, isElement };

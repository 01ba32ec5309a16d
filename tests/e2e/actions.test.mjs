// A property of the page: no sequence of actions leaves the trainer stuck. Seeded
// random sequences of what a person can do (Start, Pause, Step once, Reset, the Pool
// switch, a corpus change, a sample, Dismiss, a wait), fired as fast as a person
// could click and without waiting for each to finish; after each sequence one press
// of Pause settles the page paused, Step once completes, and the page still answers.
// A failure prints the seed and the actions; the seed replays the same choices.
//
// No property-testing package: shrinking a failing sequence would replay a browser
// session (seconds an action) dozens of times, so a seed and its log serve better.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { FAST, open, setup, tid, waitReady } from './helpers.mjs';

const SEEDS = (process.env.SEEDS ?? '1,2,3').split(',').map(Number);
const ACTIONS_PER_SEQUENCE = 30;
// Relative weights: the ones that build a new trainer (reset, pool, corpus) are rarer,
// as each makes SwiftShader compile every shader again at its first step.
const WEIGHTS = { start: 4, pause: 4, step: 4, sample: 2, dismiss: 1, wait: 2, reset: 1, pool: 1, corpus: 1 };
const POEM = 'The tide comes in over the flat grey stones,\nand every pool it leaves behind is a small world.\n'.repeat(40);

/** Runs one sequence in the page; returns the actions taken. */
function runSequence(page, seed) {
  return page.evaluate(
    async ({ seed, count, weights, poem }) => {
      // mulberry32: a small seeded generator, so a seed replays the same choices
      let a = seed >>> 0;
      const rand = () => {
        a = (a + 0x6d2b79f5) >>> 0;
        let t = a;
        t = Math.imul(t ^ (t >>> 15), t | 1);
        t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
        return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
      };
      const sleep = (ms) => new Promise((done) => setTimeout(done, ms));
      const root = document.querySelector('.tp');
      const t = root.tidepool;
      const click = (ref) => root.querySelector(`[data-ref="${ref}"]`).click(); // a disabled button ignores it, as for a person
      const corpora = [
        ['poem.txt', () => t.useCorpus(poem, 'poem.txt')],
        ['default', () => t.useCorpus(undefined)],
        ['empty.txt', () => t.useCorpus('', 'empty.txt')],
      ];
      const actions = {
        start: () => click('start'),
        pause: () => click('pause'),
        step: () => click('stepOnce'),
        sample: () => click('sampleNow'),
        dismiss: () => click('dismiss'),
        reset: () => click('reset'),
        pool: () => click('pool'),
        corpus: () => {
          const [name, use] = corpora[Math.floor(rand() * corpora.length)];
          use(); // not awaited: the next action comes while it is built
          return `corpus ${name}`;
        },
        wait: async () => {
          const ms = Math.round(200 + rand() * 1300);
          await sleep(ms);
          return `wait ${ms}`;
        },
      };
      const names = Object.keys(weights);
      const total = names.reduce((s, n) => s + weights[n], 0);
      const pick = () => {
        let r = rand() * total;
        for (const n of names) if ((r -= weights[n]) < 0) return n;
        return names.at(-1);
      };
      const log = [];
      for (let i = 0; i < count; i++) {
        const name = pick();
        log.push((await actions[name]()) ?? name);
        await sleep(Math.round(rand() * 250));
      }
      return log;
    },
    { seed, count: ACTIONS_PER_SEQUENCE, weights: WEIGHTS, poem: POEM },
  );
}

/** What the page shows and the widget is doing, for a failure's message. */
function snapshot(page) {
  return page.evaluate(() => {
    const root = document.querySelector('.tp');
    const q = (ref) => root.querySelector(`[data-ref="${ref}"]`);
    const buttons = ['start', 'pause', 'stepOnce', 'reset'].map((r) => `${r}${q(r).disabled ? ' (disabled)' : ''}`).join(', ');
    const error = q('error').hidden ? 'none' : q('error').textContent.replace(/\s+/g, ' ').trim();
    return `status "${q('status').textContent}", ${buttons}, error: ${error}, state ${JSON.stringify(root.tidepool.state)}`;
  });
}

describe('random sequences of page actions', { timeout: 1_500_000 }, () => {
  let env;
  let page;
  let errors;

  before(async () => {
    env = await setup();
    ({ page, errors } = await open(env, FAST));
    await waitReady(page);
    // every error the widget shows, by kind
    await page.evaluate(() => {
      window.shownKinds = [];
      document.querySelector('.tp').addEventListener('tidepool:error', (e) => window.shownKinds.push(e.detail.kind));
    });
  });
  after(() => env?.close());

  for (const seed of SEEDS) {
    test(`seed ${seed}: ${ACTIONS_PER_SEQUENCE} actions never leave the trainer stuck`, { timeout: 480_000 }, async () => {
      const log = await runSequence(page, seed);
      const context = `seed ${seed}, actions: ${log.join(', ')}`;

      // One press of Pause, and the page settles paused with a trainer: queued builds
      // finish (half a minute each on a loaded SwiftShader) and none starts it again.
      await page.evaluate(() => document.querySelector('.tp [data-ref="pause"]').click());
      await page
        .waitForFunction(
          () => {
            const root = document.querySelector('.tp');
            const q = (ref) => root.querySelector(`[data-ref="${ref}"]`);
            return q('pause').disabled && !q('stepOnce').disabled && !/Building|Loading/.test(q('status').textContent);
          },
          null,
          { timeout: 300_000, polling: 200 },
        )
        .catch(async (err) => assert.fail(`the page did not settle paused (${err.message}): ${await snapshot(page)}; ${context}`));

      const before = await page.evaluate(() => document.querySelector('.tp').tidepool.history.n);
      const stepped = await page.evaluate(() => {
        const t = document.querySelector('.tp').tidepool;
        const timeout = new Promise((done) => setTimeout(() => done('no step within 120 s'), 120_000));
        return Promise.race([t.stepOnce().then(() => 'stepped'), timeout]);
      });
      assert.equal(stepped, 'stepped', context);
      const after = await page.evaluate(() => document.querySelector('.tp').tidepool.history.n);
      assert.equal(after, before + 1, `Step once took one step; ${context}`);

      // still answering: a frame is drawn and the controls reflect the state
      const t0 = Date.now();
      await page.evaluate(() => new Promise((done) => requestAnimationFrame(() => done())));
      assert.ok(Date.now() - t0 < 5000, `a frame took ${Date.now() - t0} ms`);
      assert.ok(await page.locator(tid('start')).isEnabled(), context);
      assert.ok(await page.locator(tid('pause')).isDisabled(), context);

      // the only errors a person could cause here are the empty corpus's
      const kinds = await page.evaluate(() => window.shownKinds.splice(0));
      assert.deepEqual(
        kinds.filter((k) => k !== 'corpus'),
        [],
        `errors shown: ${kinds}; ${context}`,
      );
      assert.deepEqual(errors.filter((e) => e.startsWith('page:')), [], `no uncaught exceptions; ${context}`);
    });
  }
});

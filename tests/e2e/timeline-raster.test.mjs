// www/timeline-raster.mjs against a plain reference: the sweep from column to column
// paints what stacking every live allocation afresh at each column paints, on random
// recordings of odd sizes, over a canvas poisoned first; each column shows the
// position of its range with the most bytes live; hover finds the band drawn there.
// Node only (no browser).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { allocationAt, colorsOf, columnMax, columnPositions, paintLive, pixelOf } from '../../www/timeline-raster.mjs';

const POISON = 0xdeadbeef;

/** A small deterministic generator (xorshift32). */
function rng(seed) {
  let s = seed >>> 0 || 1;
  return (n) => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s % n;
  };
}

/** A random timeline shaped as src/snapshot/timeline.rs makes them. */
function randomTimeline(seed, n, events) {
  const below = rng(seed);
  const allocs = Array.from({ length: n }, () => {
    const start = below(4) === 0 ? 0 : below(events + 1);
    const end = Math.min(events + 1, start + 1 + below(events));
    return { start, end, size: 1 + below(5000), stack: 1 + below(3) };
  }).sort((a, b) => a.start - b.start);
  const live = new Float64Array(events + 1);
  for (const a of allocs) for (let p = a.start; p < Math.min(a.end, events + 1); p++) live[p] += a.size;
  const byEnd = Uint32Array.from(allocs.map((_, k) => k)).sort((x, y) => allocs[x].end - allocs[y].end);
  return {
    events,
    start: Uint32Array.from(allocs, (a) => a.start),
    end: Uint32Array.from(allocs, (a) => a.end),
    size: Float64Array.from(allocs, (a) => a.size),
    stack: Uint32Array.from(allocs, (a) => a.stack),
    by_end: byEnd,
    live,
    // stacks 1..3 named by frames 0..2; stack 0 empty
    stack_label: Uint32Array.from([0xffffffff, 0, 1, 2]),
    no_frame: 0xffffffff,
  };
}

/** Stacks every allocation live at each column's position afresh. */
function referencePaint(t, at, colors, pixels, width, height, lo, hi) {
  const scale = height / (hi - lo);
  for (let x = 0; x < width; x++) {
    const p = at[x];
    let bytes = 0;
    for (let k = 0; k < t.start.length; k++) {
      if (!(t.start[k] <= p && p < t.end[k])) continue;
      const r0 = Math.round((hi - bytes - t.size[k]) * scale);
      const r1 = Math.round((hi - bytes) * scale);
      for (let r = Math.max(0, r0); r < Math.min(height, r1); r++) pixels[r * width + x] = colors[k];
      bytes += t.size[k];
    }
  }
}

test('the sweep paints what stacking afresh at every column paints', () => {
  for (let seed = 1; seed <= 60; seed++) {
    const below = rng(seed * 7919);
    const t = randomTimeline(seed, 3 + below(90), 5 + below(200));
    const n = t.live.length;
    const from = below(n - 1);
    const to = from + 1 + below(n - from);
    const width = 7 + below(61);
    const height = 5 + below(53);
    const at = columnPositions(t.live, from, to, width);
    let top = 0;
    for (const p of at) top = Math.max(top, t.live[p]);
    const lo = below(3) === 0 ? top * 0.3 : 0;
    const hi = top * (1 + below(20) / 100) + 1;
    const colors = Uint32Array.from({ length: t.start.length }, (_, k) => k + 1);
    const ours = new Uint32Array(width * height).fill(POISON);
    const theirs = new Uint32Array(width * height).fill(POISON);
    paintLive(t, at, colors, ours, width, height, lo, hi);
    referencePaint(t, at, colors, theirs, width, height, lo, hi);
    assert.deepEqual(ours, theirs, `seed ${seed}: ${width} x ${height}, positions ${from}..${to}`);
    // every column's top band reaches the bytes live there
    for (let x = 0; x < width; x++) {
      const p = at[x];
      const rows = Math.round((hi - Math.max(lo, t.live[p])) * (height / (hi - lo)));
      if (t.live[p] > lo && rows > 0 && rows < height) assert.equal(ours[(rows - 1) * width + x], POISON, `seed ${seed}: nothing above the stack`);
    }
  }
});

test('each column shows the position of its range with the most bytes live', () => {
  for (let seed = 1; seed <= 40; seed++) {
    const below = rng(seed * 104729);
    const t = randomTimeline(seed, 40, 3 + below(400));
    const n = t.live.length;
    const width = 1 + below(97);
    const at = columnPositions(t.live, 0, n, width);
    const most = columnMax(t.live, 0, n, width);
    const k = n / width;
    for (let x = 0; x < width; x++) {
      const a = Math.min(n - 1, Math.floor(x * k));
      const b = Math.min(n, Math.max(a + 1, Math.floor((x + 1) * k)));
      let best = a;
      for (let p = a; p < b; p++) if (t.live[p] > t.live[best]) best = p;
      assert.equal(at[x], best, `seed ${seed} column ${x}`);
      assert.equal(most[x], t.live[best]);
      if (x > 0) assert.ok(at[x] >= at[x - 1], 'positions never go back');
    }
    // every position of the recording is in one column's range: no peak falls between
    const peak = Math.max(...t.live);
    assert.equal(Math.max(...most), peak, `seed ${seed}: the peak is drawn`);
  }
});

test('hover finds the allocation stacked at a position and height', () => {
  const t = randomTimeline(5, 50, 80);
  for (let p = 0; p < t.live.length; p++) {
    let bytes = 0;
    for (let k = 0; k < t.start.length; k++) {
      if (!(t.start[k] <= p && p < t.end[k])) continue;
      assert.equal(allocationAt(t, p, bytes + t.size[k] / 2), k);
      bytes += t.size[k];
    }
    assert.equal(bytes, t.live[p]);
    assert.equal(allocationAt(t, p, bytes + 1), -1, 'above the stack');
  }
});

test('colours follow the frame that names each stack; the legend by bytes held', () => {
  const t = randomTimeline(9, 30, 40);
  const palette = ['#ff0000', '#00ff00'];
  const { pixels, css, legend } = colorsOf(t, palette, '#000000', 2);
  for (let k = 0; k < t.start.length; k++) {
    const frame = t.stack_label[t.stack[k]];
    assert.equal(pixels[k], pixelOf(css.get(frame)));
  }
  assert.equal(pixelOf('#102030'), 0xff302010, 'RGBA bytes in memory order');
  assert.ok(legend.length === 2 && legend[0].bytes >= legend[1].bytes);
});

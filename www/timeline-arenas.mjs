// The arena view of a traced step under the planned policy: one band per arena of the
// plan (Trainer.memoryPlan()), each tensor drawn at its offset inside its arena (up)
// over its lifetime (across), so the plan's packing shows: tensors that never meet
// share bytes, and the arena's size stands beside the most bytes live in it.
//
// A tensor at a planned range is known by its arena's buffer id and its offset
// (trace events carry `offset` there, docs/trace.md); the plan names its arenas by
// the same buffer ids.

import { fmtBytes, fmtBytesShort } from './format.mjs';
import { BIRTHS, DEATHS, HEIGHT, fitCanvas, plotFrame, tensorKey } from './timeline-draw.mjs';

const MIN_LABELLED_BAND = 12; // CSS pixels a band needs for its name

/**
 * The step's tensors at planned ranges, by arena: null when there is no plan or no
 * event of the step lies in one of its arenas (a pool's step, or the traced first
 * step that made the plan). Columns as in analyse(): 0 is the step's start, i + 1
 * just after event i.
 * @returns {{arenas: {buffer, bytes, base, peak}[], tensors: {arena, offset, size, start, end, op, birth, death}[], total, columns} | null}
 */
export function arenaView(step, plan) {
  if (!plan?.arenas?.length) return null;
  const index = new Map(plan.arenas.map((a, i) => [a.buffer, i]));
  const events = step.events;
  const columns = events.length + 1;
  const tensors = [];
  const open = new Map(); // tensor key -> tensor index
  events.forEach((e, i) => {
    const arena = e.offset === undefined || e.offset === null ? undefined : index.get(e.buffer);
    if (arena === undefined) return;
    const key = tensorKey(e);
    if (BIRTHS.has(e.kind)) {
      open.set(key, tensors.length);
      tensors.push({ arena, offset: e.offset, size: e.class, start: i + 1, end: columns, op: e.op, birth: e, death: null });
    } else if (DEATHS.has(e.kind)) {
      const k = open.get(key);
      if (k === undefined) {
        // live when the step began
        tensors.push({ arena, offset: e.offset, size: e.class, start: 0, end: i + 1, op: e.op, birth: null, death: e });
      } else {
        Object.assign(tensors[k], { end: i + 1, death: e });
        open.delete(key);
      }
    }
  });
  if (!tensors.length) return null;
  // Bands stacked from the first arena up; each arena's peak of live bytes.
  let base = 0;
  const arenas = plan.arenas.map((a) => {
    const band = { buffer: a.buffer, bytes: a.bytes, base, peak: 0 };
    base += a.bytes;
    return band;
  });
  const deltas = arenas.map(() => new Map());
  for (const t of tensors) {
    const d = deltas[t.arena];
    d.set(t.start, (d.get(t.start) ?? 0) + t.size);
    d.set(t.end, (d.get(t.end) ?? 0) - t.size);
  }
  deltas.forEach((d, i) => {
    let live = 0;
    // deaths and births at one column: the sum settles before the peak is read
    for (const c of [...d.keys()].sort((x, y) => x - y)) {
      live += d.get(c);
      arenas[i].peak = Math.max(arenas[i].peak, live);
    }
  });
  return { arenas, tensors, total: base, columns, reserved: plan.reserved };
}

/** One line per arena: its size and the most bytes live in it over the step. */
export function arenaSummary(view) {
  return view.arenas.map((a, i) => ({
    arena: i,
    bytes: a.bytes,
    peak: a.peak,
    text: `arena ${i}: ${fmtBytes(a.bytes)}, at most ${fmtBytes(a.peak)} live (${((100 * a.peak) / Math.max(1, a.bytes)).toFixed(1)}%)`,
  }));
}

/**
 * Draws `view` on `canvas`, tensors in `colors` (op -> colour); returns the frame
 * and each tensor's rectangle in CSS pixels ({x, y, w, h}, in view.tensors' order).
 */
export function drawArenas(canvas, view, theme, colors) {
  const { g, width } = fitCanvas(canvas, HEIGHT);
  const f = plotFrame(width, 0, view.total, 0, view.columns);
  g.font = theme.font;
  // Each band: a faint ground, its edge, and its name at the left.
  view.arenas.forEach((a, i) => {
    const top = f.y(a.base + a.bytes);
    const h = f.y(a.base) - top;
    g.fillStyle = theme.ghost;
    g.globalAlpha = 0.25;
    g.fillRect(f.left, top, f.w, h);
    g.globalAlpha = 1;
    g.strokeStyle = theme.grid;
    g.strokeRect(f.left + 0.5, top + 0.5, f.w - 1, h - 1);
    // many arenas (a device with a small binding limit) leave bands too thin to name
    if (h >= MIN_LABELLED_BAND) {
      g.fillStyle = theme.fg;
      g.textAlign = 'right';
      g.textBaseline = 'middle';
      g.fillText(`#${i} ${fmtBytesShort(a.bytes)}`, f.left - 4, top + h / 2);
    }
  });
  g.globalAlpha = 0.9;
  const rects = view.tensors.map((t) => {
    const base = view.arenas[t.arena].base;
    const x = f.x(t.start);
    const y = f.y(base + t.offset + t.size);
    const w = Math.max(0.5, f.x(t.end) - x);
    const h = Math.max(0.5, f.y(base + t.offset) - y);
    g.fillStyle = colors.get(t.op) ?? theme.colors[0];
    g.fillRect(x, y, w, h);
    return { x, y, w, h };
  });
  g.globalAlpha = 1;
  g.fillStyle = theme.fg;
  g.textBaseline = 'top';
  g.textAlign = 'left';
  g.fillText('event 0', f.left, f.topPad + f.h + 3);
  g.textAlign = 'right';
  g.fillText(`event ${view.columns - 2}`, f.left + f.w, f.topPad + f.h + 3);
  return { frame: f, rects };
}

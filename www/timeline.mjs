// The memory timeline and the what-if replay table: one traced training
// step (docs/trace.md) drawn as PyTorch's "active memory" view draws a snapshot, each
// tensor a band from its birth to its death stacked on those still live, coloured by
// the kernel that asked for it; beside it the pool's free bytes per size class over
// the same sequence; below, the step replayed through every size policy and an offset
// plan against the lower bound (the wasm's replayTrace).
//
// Under the planned policy a third view shows the plan's arenas, each tensor at its
// offset inside its arena (timeline-arenas.mjs).
//
// Nothing is traced unless asked: the Trace button, or every N steps while the panel
// is open (an option, off by default). A traced step is a real training step.
//
// Below it, a recording opened from a file (timeline-file.mjs): a PyTorch memory
// snapshot or a tidepool trace, drawn and replayed the same way.

import { fmtBytes, fmtBytesShort } from './format.mjs';
import { readTheme } from './plot.mjs';
import { arenaSummary, arenaView, drawArenas } from './timeline-arenas.mjs';
import { FileView } from './timeline-file.mjs';
import { BIRTHS, DEATHS, PALETTE, REPLAY_HEAD, drawAxes, escapeHtml, fitCanvas, markPeak, plotFrame, replayRowsHtml, tensorKey } from './timeline-draw.mjs';

const MAX_EVERY = 1_000_000; // steps between automatic traces, at most

/**
 * The step's tensors and the pool's free buffers, column by column: column 0 is the
 * step's start, column i + 1 the state just after event i.
 * @returns {{tensors, base, top: number[], peak, peakAt, classes: number[], free: Map<number, number[]>, held: number[], heldPeak, columns}}
 */
export function analyse(step) {
  const events = step.events;
  const columns = events.length + 1;
  const tensors = [];
  const open = new Map(); // tensor key -> tensor index
  // Tensors born before the step that die in it: live from column 0, lowest in the stack.
  const seen = new Set();
  for (const e of events) {
    const key = tensorKey(e);
    if (BIRTHS.has(e.kind)) seen.add(key);
    else if (DEATHS.has(e.kind) && !seen.has(key)) {
      seen.add(key);
      open.set(key, tensors.length);
      tensors.push({ buffer: e.buffer, size: e.class, start: 0, end: columns, birth: null, death: null, op: e.op, before: true });
    }
  }
  events.forEach((e, i) => {
    const key = tensorKey(e);
    if (BIRTHS.has(e.kind)) {
      open.set(key, tensors.length);
      tensors.push({ buffer: e.buffer, size: e.class, start: i + 1, end: columns, birth: e, death: null, op: e.op, before: false });
    } else if (DEATHS.has(e.kind) && open.has(key)) {
      const t = tensors[open.get(key)];
      t.end = i + 1;
      t.death = e;
      open.delete(key);
    }
  });
  const before = tensors.reduce((s, t) => s + (t.before ? t.size : 0), 0);
  const base = Math.max(0, step.in_use_at_start - before); // live across the whole step: weights, optimizer state

  // Stack offsets: at each column the live tensors in birth order, each on the last.
  const top = new Array(columns).fill(base);
  let peak = -1;
  let peakAt = 0;
  const deltas = new Array(columns + 1).fill(0);
  for (const t of tensors) {
    deltas[t.start] += t.size;
    deltas[t.end] -= t.size;
  }
  let live = base;
  for (let c = 0; c < columns; c++) {
    live += deltas[c];
    top[c] = live;
    if (live > peak) [peak, peakAt] = [live, c];
  }

  // Free buffers per class: known ids (released in the step) and the start's anonymous ones.
  const counts = new Map(); // class -> count now
  for (const { size, count } of step.free_at_start ?? []) counts.set(size, (counts.get(size) ?? 0) + count);
  const freeIds = new Map(); // buffer id -> class
  const classSet = new Set(counts.keys());
  const take = (cls, id) => {
    if (freeIds.has(id)) freeIds.delete(id);
    counts.set(cls, Math.max(0, (counts.get(cls) ?? 0) - 1));
  };
  const snapshots = [new Map(counts)];
  for (const e of events) {
    if (e.kind === 'release') {
      freeIds.set(e.buffer, e.class);
      counts.set(e.class, (counts.get(e.class) ?? 0) + 1);
      classSet.add(e.class);
    } else if (e.kind === 'hit') take(e.class, e.buffer);
    else if ((e.kind === 'evict' || e.kind === 'destroy') && e.purpose === 'storage') {
      // a destroy after a reject or a discard is of a buffer that was never free
      if (freeIds.has(e.buffer) || e.kind === 'evict') take(e.class, e.buffer);
    }
    snapshots.push(new Map(counts));
  }
  const classes = [...classSet].sort((a, b) => a - b);
  const free = new Map(classes.map((cls) => [cls, snapshots.map((m) => (m.get(cls) ?? 0) * cls)]));
  const held = snapshots.map((m) => [...m].reduce((s, [cls, n]) => s + cls * n, 0));
  const heldPeak = held.reduce((m, v) => Math.max(m, v), 0); // no spread: a long step has many events
  return { tensors, base, top, peak, peakAt, classes, free, held, heldPeak, columns };
}

function opColors(tensors) {
  const colors = new Map();
  for (const t of tensors) if (!colors.has(t.op)) colors.set(t.op, PALETTE[colors.size % PALETTE.length]);
  return colors;
}
const classColor = (i, n) => `hsl(${200 + (i * 140) / Math.max(1, n - 1)} 55% 55%)`;

export class TimelinePanel {
  /**
   * @param {HTMLDetailsElement} root an empty <details> to fill
   * @param {{trace: () => Promise<{trace, replay, plan}>, files: import('./snapshot-client.mjs').SnapshotClient}} hooks
   *   trace: one traced training step (plan: the planned policy's memoryPlan(), or
   *   null); files: where opened recordings are read
   */
  constructor(root, { trace, files }) {
    this.root = root;
    this.requestTrace = trace;
    this.inFlight = false;
    this.lastTraced = 0;
    this.current = null; // {trace, replay, plan, step, view, arenas}
    this.traces = 0; // shown since the page loaded
    root.classList.add('tp-timeline');
    root.dataset.testid = 'timeline';
    root.innerHTML = `
      <summary>Memory timeline <span class="tp-muted">one traced step, or any allocator's recording, every allocation</span></summary>
      <div class="tp-timeline-controls">
        <button type="button" data-tl="trace" data-testid="trace">Trace a step</button>
        <label>every <input type="number" min="0" step="1" value="0" data-tl="every" data-testid="trace-every"> steps
          <span class="tp-muted">(0: only when asked; only while this panel is open)</span></label>
        <span class="tp-muted" data-tl="note" data-testid="timeline-note">Trace runs one training step with every buffer event recorded.</span>
      </div>
      <div class="tp-timeline-plots" data-tl="plots" hidden>
        <figure class="tp-timeline-fig">
          <figcaption>Live bytes over the step <span class="tp-muted" data-tl="peak" data-testid="timeline-peak"></span></figcaption>
          <div class="tp-timeline-box"><canvas data-tl="live" data-testid="timeline-live" role="img"
            aria-label="Live bytes per tensor over the traced step"></canvas>
            <div class="tp-timeline-tip" data-tl="tip" data-testid="timeline-tooltip" hidden></div></div>
          <p class="tp-timeline-legend" data-tl="legend"></p>
        </figure>
        <figure class="tp-timeline-fig">
          <figcaption>Pool's free bytes per size class <span class="tp-muted" data-tl="heldPeak"></span></figcaption>
          <div class="tp-timeline-box"><canvas data-tl="free" data-testid="timeline-free" role="img"
            aria-label="Free bytes per size class over the traced step"></canvas></div>
          <p class="tp-timeline-legend" data-tl="freeLegend"></p>
        </figure>
        <figure class="tp-timeline-fig" data-tl="arenasFig" data-testid="timeline-arenas-figure" hidden>
          <figcaption>Arenas of the memory plan, each tensor at its offset <span class="tp-muted" data-tl="arenasNote" data-testid="timeline-arenas-note"></span></figcaption>
          <div class="tp-timeline-box"><canvas data-tl="arenas" data-testid="timeline-arenas" role="img"
            aria-label="Each planned tensor at its offset in its arena over the traced step"></canvas>
            <div class="tp-timeline-tip" data-tl="arenaTip" data-testid="timeline-arenas-tooltip" hidden></div></div>
          <p class="tp-timeline-legend" data-tl="arenasLegend" data-testid="timeline-arenas-legend"></p>
        </figure>
      </div>
      <div data-tl="replay" data-testid="replay" hidden>
        <h4>What-if replay <span class="tp-muted" data-tl="replayNote"></span></h4>
        <table class="tp-replay" data-testid="replay-table">${REPLAY_HEAD}<tbody data-tl="rows"></tbody></table>
      </div>
      <div data-tl="file"></div>`;
    this.el = {};
    for (const n of root.querySelectorAll('[data-tl]')) this.el[n.dataset.tl] = n;
    this.el.trace.addEventListener('click', () => this.trace());
    this.el.live.addEventListener('mousemove', (e) => this.hover(e));
    this.el.live.addEventListener('mouseleave', () => (this.el.tip.hidden = true));
    this.el.arenas.addEventListener('mousemove', (e) => this.hoverArena(e));
    this.el.arenas.addEventListener('mouseleave', () => (this.el.arenaTip.hidden = true));
    this.file = new FileView(this.el.file, { root, files });
    root.addEventListener('toggle', () => {
      if (!root.open) return;
      this.file.warm();
      this.redraw();
    });
    this.onResize = () => root.open && this.redraw();
    addEventListener('resize', this.onResize);
  }

  redraw() {
    if (this.current) this.draw();
    this.file.draw();
  }

  get every() {
    const n = Math.floor(Number(this.el.every.value));
    return Number.isFinite(n) && n > 0 ? Math.min(n, MAX_EVERY) : 0;
  }

  /** Traces one step now; resolves once it is shown (or failed: the widget shows errors). */
  async trace() {
    if (this.inFlight) return;
    this.inFlight = true;
    this.el.trace.disabled = true;
    this.el.note.textContent = 'Tracing a step…';
    try {
      const { trace, replay, plan } = await this.requestTrace();
      this.show(trace, replay, plan);
    } catch (err) {
      this.el.note.textContent = `The trace failed: ${err?.message ?? err}`;
    } finally {
      this.inFlight = false;
      this.el.trace.disabled = false;
    }
  }

  /** Called on every step: traces the next one when due, only while the panel is open. */
  onStep(step) {
    const every = this.every;
    if (!every || !this.root.open || this.inFlight || step - this.lastTraced < every) return;
    this.trace();
  }

  /** A new trainer: what was shown is of the old one. */
  reset() {
    this.current = null;
    this.lastTraced = 0;
    this.el.plots.hidden = true;
    this.el.replay.hidden = true;
    this.el.arenasFig.hidden = true;
    this.el.note.textContent = 'Trace runs one training step with every buffer event recorded.';
  }

  show(trace, replay, plan = null) {
    const step = trace.steps.at(-1);
    const view = analyse(step);
    const arenas = arenaView(step, plan);
    this.current = { trace, replay, plan, step, view, arenas };
    this.lastTraced = step.step;
    this.traces++;
    const buffers = new Set(view.tensors.map((t) => t.buffer)).size;
    Object.assign(this.root.dataset, {
      step: step.step,
      events: step.events.length,
      bands: view.tensors.length,
      buffers,
      peak: view.peak,
      heldPeak: view.heldPeak,
      traces: this.traces,
      arenas: arenas ? arenas.arenas.length : 0,
    });
    const planNote = plan && !arenas ? ' The step ran on the pool and was traced for the plan: trace a later step to see the arenas.' : '';
    this.el.note.textContent = `Step ${step.step} (${step.label}): ${step.events.length} events, ${view.tensors.length} tensors in ${buffers} buffers, policy ${trace.policy}.${planNote}`;
    this.el.peak.textContent = `peak ${fmtBytes(view.peak)} (${view.peak} B) at event ${Math.max(0, view.peakAt - 1)}; the axis starts near the ${fmtBytes(view.base)} live across the whole step (grey)`;
    this.el.peak.dataset.bytes = view.peak;
    this.el.heldPeak.textContent = `at most ${fmtBytes(view.heldPeak)} free`;
    this.el.plots.hidden = false;
    this.showReplay(replay);
    this.draw();
  }

  /** The step shown's row of a report (`replayTrace`'s): its replay table. */
  showReplay(report) {
    const s = report?.steps?.at(-1);
    this.el.replay.hidden = !s;
    if (!s) return;
    this.el.replayNote.textContent = `${s.recording}: ${s.replay.tensors} tensors; x bound: peak over the lower bound`;
    this.el.rows.innerHTML = replayRowsHtml(s.replay.rows);
  }

  draw() {
    if (!this.current || !this.root.open) return;
    const { view } = this.current;
    const theme = readTheme(this.root);
    const { tensors, base, columns } = view;

    // Live bytes: one rectangle per run of columns where a tensor's offset is unchanged.
    // The axis starts at what is live across the whole step (weights, optimizer state),
    // which would otherwise dwarf the step's own tensors; a grey strip stands for it.
    const { g, width } = fitCanvas(this.el.live);
    const lo = base > 0 ? base - (view.peak - base) * 0.04 : 0;
    const hi = view.peak + (view.peak - lo) * 0.05;
    const f = plotFrame(width, lo, hi, 0, columns);
    this.liveFrame = f;
    const ends = ['event 0', `event ${columns - 2}`];
    drawAxes(g, f, lo, hi, theme, ...ends);
    g.fillStyle = theme.ghost;
    g.globalAlpha = 0.45;
    g.fillRect(f.x(0), f.y(base), f.w, f.y(lo) - f.y(base));
    g.globalAlpha = 0.9;
    const offsets = stackOffsets(tensors, columns, base);
    const colors = opColors(tensors);
    tensors.forEach((t, k) => {
      g.fillStyle = colors.get(t.op);
      const off = offsets[k];
      let c = t.start;
      while (c < t.end) {
        let d = c + 1;
        while (d < t.end && off[d - t.start] === off[c - t.start]) d++;
        const y0 = f.y(off[c - t.start]);
        const y1 = f.y(off[c - t.start] + t.size);
        g.fillRect(f.x(c), y1, Math.max(0.5, f.x(d) - f.x(c)), Math.max(0.5, y0 - y1));
        c = d;
      }
    });
    g.globalAlpha = 1;
    this.offsets = offsets;
    markPeak(g, f, f.x(view.peakAt) + 0.5, view.peak, theme.colors[2], `peak ${fmtBytes(view.peak)}`);

    // legend: the ops holding the most bytes
    const byOp = new Map();
    for (const t of tensors) byOp.set(t.op, (byOp.get(t.op) ?? 0) + t.size * (t.end - t.start));
    this.el.legend.innerHTML = [...byOp]
      .sort((a, b) => b[1] - a[1])
      .slice(0, 12)
      .map(([op]) => `<span><i style="background:${colors.get(op)}"></i>${escapeHtml(op)}</span>`)
      .join('');

    // Free bytes per size class, stacked.
    const fr = fitCanvas(this.el.free);
    const maxHeld = Math.max(1, view.heldPeak);
    const ff = plotFrame(fr.width, 0, maxHeld * 1.05, 0, columns);
    drawAxes(fr.g, ff, 0, maxHeld * 1.05, theme, ...ends);
    const acc = new Array(columns).fill(0);
    view.classes.forEach((cls, i) => {
      const series = view.free.get(cls);
      fr.g.fillStyle = classColor(i, view.classes.length);
      fr.g.beginPath();
      fr.g.moveTo(ff.x(0), ff.y(acc[0]));
      for (let c = 0; c < columns; c++) {
        fr.g.lineTo(ff.x(c), ff.y(acc[c] + series[c]));
        fr.g.lineTo(ff.x(c + 1), ff.y(acc[c] + series[c]));
      }
      for (let c = columns - 1; c >= 0; c--) {
        fr.g.lineTo(ff.x(c + 1), ff.y(acc[c]));
        fr.g.lineTo(ff.x(c), ff.y(acc[c]));
      }
      fr.g.closePath();
      fr.g.fill();
      for (let c = 0; c < columns; c++) acc[c] += series[c];
    });
    this.el.freeLegend.innerHTML = view.classes
      .map((cls, i) => `<span><i style="background:${classColor(i, view.classes.length)}"></i>${fmtBytesShort(cls)}</span>`)
      .join('');
    this.drawArenas(theme, colors);
  }

  /** The plan's arenas, under the planned policy (hidden otherwise). */
  drawArenas(theme, colors) {
    const { arenas } = this.current;
    this.el.arenasFig.hidden = !arenas;
    this.arenaRects = null;
    if (!arenas) return;
    this.arenaRects = drawArenas(this.el.arenas, arenas, theme, colors).rects;
    const live = arenas.arenas.reduce((s, a) => s + a.peak, 0);
    const n = arenas.arenas.length;
    this.el.arenasNote.textContent = `${arenas.tensors.length} tensors in ${n} arena${n === 1 ? '' : 's'} of ${fmtBytes(arenas.reserved)} (${arenas.reserved} B); at most ${fmtBytes(live)} live in them`;
    this.el.arenasNote.dataset.bytes = arenas.reserved;
    this.el.arenasLegend.innerHTML = arenaSummary(arenas)
      .map((a) => `<span data-arena="${a.arena}" data-bytes="${a.bytes}" data-peak="${a.peak}">${escapeHtml(a.text)}</span>`)
      .join('');
  }

  hover(e) {
    const { current, liveFrame: f, offsets } = this;
    if (!current || !f || !offsets) return;
    const rect = this.el.live.getBoundingClientRect();
    const px = e.clientX - rect.left;
    const py = e.clientY - rect.top;
    const c = f.columnAt(px);
    const bytes = f.bytesAt(py);
    const { tensors, base } = current.view;
    let hit = null;
    if (c >= 0 && c < current.view.columns) {
      hit = tensors.findIndex((t, k) => c >= t.start && c < t.end && bytes >= offsets[k][c - t.start] && bytes < offsets[k][c - t.start] + t.size);
    }
    const tip = this.el.tip;
    if (hit === null || (hit < 0 && !(bytes < base))) {
      tip.hidden = true;
      return;
    }
    if (hit < 0) {
      tip.innerHTML = `<b>live across steps</b><br>${fmtBytes(base)}: weights, optimizer state, anything held between steps`;
    } else {
      const t = tensors[hit];
      const b = t.birth;
      const layer = (b ?? t.death)?.layer;
      tip.innerHTML =
        `<b data-testid="tooltip-op">${escapeHtml(t.op)}</b>${layer === undefined || layer === null ? '' : ` · layer ${layer}`}<br>` +
        (b ? `requested ${fmtBytes(b.requested)} · class ${fmtBytes(t.size)}<br>${b.kind === 'hit' ? 'hit (from the pool)' : b.kind === 'miss' ? 'miss (a new buffer)' : b.kind} · ` : `class ${fmtBytes(t.size)}<br>born before the step · `) +
        `buffer ${t.buffer}<br>events ${t.start ? t.start - 1 : 'start'}–${t.death ? t.end - 1 : 'end'}` +
        (t.death ? ` (${t.death.kind})` : '');
    }
    tip.hidden = false;
    const box = this.el.live.parentElement.clientWidth;
    tip.style.left = `${Math.min(px + 12, box - 240)}px`;
    tip.style.top = `${Math.max(0, py - 10)}px`;
  }

  /** The tensor under the pointer in the arena view: its op, arena, offset, size and lifetime. */
  hoverArena(e) {
    const rects = this.arenaRects;
    const view = this.current?.arenas;
    const tip = this.el.arenaTip;
    if (!rects || !view) return;
    const box = this.el.arenas.getBoundingClientRect();
    const [px, py] = [e.clientX - box.left, e.clientY - box.top];
    const k = rects.findIndex((r) => px >= r.x && px < r.x + r.w && py >= r.y && py < r.y + r.h);
    if (k < 0) {
      tip.hidden = true;
      return;
    }
    const t = view.tensors[k];
    const layer = (t.birth ?? t.death)?.layer;
    tip.innerHTML =
      `<b data-testid="arena-tooltip-op">${escapeHtml(t.op)}</b>${layer === undefined || layer === null ? '' : ` · layer ${layer}`}<br>` +
      `arena ${t.arena} · offset ${t.offset} (${fmtBytes(t.offset)})<br>${fmtBytes(t.size)} (${t.size} B)` +
      `${t.birth ? ` · requested ${fmtBytes(t.birth.requested)}` : ''}<br>` +
      `events ${t.start ? t.start - 1 : 'start'}–${t.death ? t.end - 1 : 'end'}`;
    tip.hidden = false;
    const width = this.el.arenas.parentElement.clientWidth;
    tip.style.left = `${Math.min(px + 12, width - 240)}px`;
    tip.style.top = `${Math.max(0, py - 10)}px`;
  }

  destroy() {
    removeEventListener('resize', this.onResize);
    this.file.destroy();
  }
}

/** Each tensor's offset in the stack at each column it is live (tensors in birth order). */
function stackOffsets(tensors, columns, base) {
  const out = tensors.map((t) => new Array(t.end - t.start));
  // a tensor's offset is base + the sizes of the live tensors before it: sweep columns
  // with the live list kept in index order (births append, so it stays sorted)
  const startsAt = new Array(columns).fill(null).map(() => []);
  tensors.forEach((t, k) => startsAt[t.start].push(k));
  let live = [];
  for (let c = 0; c < columns; c++) {
    live = live.filter((k) => tensors[k].end > c);
    for (const k of startsAt[c]) live.push(k);
    let off = base;
    for (const k of live) {
      out[k][c - tensors[k].start] = off;
      off += tensors[k].size;
    }
  }
  return out;
}

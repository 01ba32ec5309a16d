// An allocator's recording opened from a file, in the memory timeline: a PyTorch
// memory snapshot (the pickle torch.cuda.memory._dump_snapshot writes) or a tidepool
// trace, dropped on the panel or chosen with its button. The wasm reads it in a
// worker of its own (snapshot-client.mjs): the file never leaves the browser.
//
// Shown: live bytes by allocation over the events with the peak marked
// (timeline-raster.mjs draws them), the allocator's reserved bytes beside them, hover
// with size, stream and the top frames of the stack, zoom (wheel, buttons, + and -)
// and pan (drag, arrow keys) over the events, what step was found, and the replay
// table with the recorded allocator's own figure as a row (src/snapshot/report.rs).

import { describe } from './errors.mjs';
import { fmtBytes } from './format.mjs';
import { readTheme } from './plot.mjs';
import { PALETTE, REPLAY_HEAD, drawAxes, escapeHtml, fitCanvas, markPeak, plotFrame, replayRowsHtml } from './timeline-draw.mjs';
import { allocationAt, colorsOf, columnMax, columnPositions, framesOf, paintLive } from './timeline-raster.mjs';

const MIN_SPAN = 8; // positions in view, at the closest zoom
const WHEEL_ZOOM = 0.0015; // per unit of wheel delta
const PAN_KEY = 0.1; // of the span, per arrow key
const TOP_FRAMES = 4; // frames a tooltip shows
const DRAW_TIMES = 50; // frame times kept for the page's figures
const NO_FRAME_COLOR = '#8b949e';

/** `/a/b/c/d.py` -> `c/d.py`: enough of a path to tell files apart. */
const shortPath = (file) => file.split('/').slice(-2).join('/');

const frameText = ({ name, file, line }) => `${name}${file ? ` ${shortPath(file)}:${line}` : ''}`;

/** What a report's step says it replayed: the step found, a range, or everything. */
function stepText(s) {
  const range = `events ${s.first_event}..${s.end_event}`;
  if (s.chosen === 'found' && s.period) {
    const p = s.period;
    return `${range}, the repeating step (${p.symbols} allocations and frees, ${p.repeats} whole repeats, ${(p.matched * 100).toFixed(1)}% matched)`;
  }
  if (s.chosen === 'range') return `${range}, the events asked for`;
  return `${range}: no repeating step found, the whole recording`;
}

export class FileView {
  /**
   * @param {HTMLElement} el an empty element of the panel to fill
   * @param {{root: HTMLElement, files: import('./snapshot-client.mjs').SnapshotClient}} opts
   *   root: the panel (files dropped anywhere on it open); files: where files are read
   */
  constructor(el, { root, files }) {
    this.root = root;
    this.files = files;
    this.opening = 0; // the latest open asked for: an older one that ends later is dropped
    this.current = null; // {name, format, report, timelines, index, t, colors, reservedPeak}
    this.range = { from: 0, to: 1 }; // positions in view
    this.drawTimes = [];
    this.raf = 0;
    el.innerHTML = `
      <div class="tp-timeline-controls tp-timeline-open">
        <button type="button" data-fv="choose" data-testid="snapshot-choose">Open a recording…</button>
        <input type="file" accept=".pickle,.pkl,.json" data-fv="input" data-testid="snapshot-input" hidden>
        <span class="tp-muted">a PyTorch memory snapshot (<code>.pickle</code>) or a tidepool trace (<code>.json</code>),
          or drop one on this panel. It is read here, in this browser: nothing is uploaded.</span>
      </div>
      <p class="tp-timeline-message" data-fv="message" data-testid="snapshot-message" role="status" hidden></p>
      <section class="tp-timeline-file" data-fv="view" data-testid="snapshot" hidden>
        <p data-fv="summary" data-testid="snapshot-summary"></p>
        <div class="tp-timeline-controls">
          <label data-fv="pick" hidden>recording <select data-fv="recording" data-testid="snapshot-recording"></select></label>
          <button type="button" data-fv="zoomIn" title="Zoom in (+)" aria-label="Zoom in">+</button>
          <button type="button" data-fv="zoomOut" title="Zoom out (-)" aria-label="Zoom out">−</button>
          <button type="button" data-fv="whole" data-testid="snapshot-whole">Whole recording</button>
          <button type="button" data-fv="step" data-testid="snapshot-step">The step</button>
          <button type="button" data-fv="replayView" data-testid="snapshot-replay-view">Replay the events in view</button>
          <span class="tp-muted" data-fv="range" data-testid="snapshot-range"></span>
        </div>
        <div class="tp-timeline-plots">
          <figure class="tp-timeline-fig">
            <figcaption>Live bytes by allocation <span class="tp-muted" data-fv="peak" data-testid="snapshot-peak"></span></figcaption>
            <div class="tp-timeline-box"><canvas data-fv="live" data-testid="snapshot-live" tabindex="0" role="img"
              aria-label="Live bytes by allocation over the events: the wheel or + and - zoom, dragging or the arrow keys pan"></canvas>
              <div class="tp-timeline-tip" data-fv="tip" data-testid="snapshot-tooltip" hidden></div></div>
            <p class="tp-timeline-legend" data-fv="legend"></p>
          </figure>
          <figure class="tp-timeline-fig">
            <figcaption>Reserved by the allocator <span class="tp-muted" data-fv="reservedPeak" data-testid="snapshot-reserved-peak"></span></figcaption>
            <div class="tp-timeline-box"><canvas data-fv="reserved" data-testid="snapshot-reserved" tabindex="0" role="img"
              aria-label="Bytes the allocator reserved, and live bytes, over the events"></canvas></div>
            <p class="tp-timeline-legend" data-fv="reservedLegend"></p>
          </figure>
        </div>
        <div data-testid="snapshot-replay">
          <h4>What-if replay <span class="tp-muted" data-fv="replayNote" data-testid="snapshot-replay-note"></span></h4>
          <table class="tp-replay" data-testid="snapshot-table">${REPLAY_HEAD}<tbody data-fv="rows"></tbody></table>
          <ul class="tp-muted tp-timeline-notes" data-fv="notes"></ul>
        </div>
      </section>`;
    this.el = {};
    for (const n of el.querySelectorAll('[data-fv]')) this.el[n.dataset.fv] = n;
    this.wire();
  }

  wire() {
    const { el, root } = this;
    el.choose.addEventListener('click', () => el.input.click());
    el.input.addEventListener('change', () => {
      const file = el.input.files?.[0];
      el.input.value = ''; // the same file chosen again opens again
      if (file) this.open(file);
    });
    // Files dropped anywhere on the panel (its summary too, while it is closed).
    this.onDragOver = (e) => {
      if (![...(e.dataTransfer?.types ?? [])].includes('Files')) return;
      e.preventDefault();
      if (!root.classList.contains('tp-timeline-dropping')) this.warm();
      e.dataTransfer.dropEffect = 'copy';
      root.classList.add('tp-timeline-dropping');
    };
    this.onDragLeave = (e) => {
      if (!root.contains(e.relatedTarget)) root.classList.remove('tp-timeline-dropping');
    };
    this.onDrop = (e) => {
      const file = e.dataTransfer?.files?.[0];
      root.classList.remove('tp-timeline-dropping');
      if (!file) return;
      e.preventDefault();
      root.open = true;
      this.open(file);
    };
    root.addEventListener('dragover', this.onDragOver);
    root.addEventListener('dragleave', this.onDragLeave);
    root.addEventListener('drop', this.onDrop);
    el.recording.addEventListener('change', () => this.select(Number(el.recording.value)));
    el.zoomIn.addEventListener('click', () => this.zoom(0.5));
    el.zoomOut.addEventListener('click', () => this.zoom(2));
    el.whole.addEventListener('click', () => this.setRange(0, Infinity));
    el.step.addEventListener('click', () => this.showStep());
    el.replayView.addEventListener('click', () => this.replayView());
    for (const canvas of [el.live, el.reserved]) {
      canvas.addEventListener('wheel', (e) => this.onWheel(e, canvas), { passive: false });
      canvas.addEventListener('pointerdown', (e) => this.onPointerDown(e, canvas));
      canvas.addEventListener('keydown', (e) => this.onKey(e));
    }
    el.live.addEventListener('mousemove', (e) => this.hover(e));
    el.live.addEventListener('mouseleave', () => (el.tip.hidden = true));
  }

  /**
   * Starts the reading worker ahead of a file (the panel opened, a file dragged over
   * it), so that opening one waits only for the reading; a failure to start shows
   * when a file is opened.
   */
  warm() {
    this.files.worker().catch(() => {});
  }

  say(text, failed = false) {
    this.el.message.hidden = !text;
    this.el.message.textContent = text;
    this.el.message.classList.toggle('tp-timeline-failed', failed);
  }

  /** Reads `file` and shows it; resolves once shown, or once its failure is. */
  async open(file) {
    const token = ++this.opening;
    const started = performance.now();
    const { dataset } = this.root;
    this.say(`Reading ${file.name} (${fmtBytes(file.size)}) in this browser…`);
    dataset.snapshotState = 'reading';
    try {
      const read = await this.files.open(file);
      if (token !== this.opening) return;
      this.show(file.name, read);
      cancelAnimationFrame(this.raf);
      this.raf = 0;
      this.draw();
      const ms = performance.now() - started;
      this.el.view.dataset.openMs = ms.toFixed(0);
      // where the time went: the worker's parts, the rest (starting it, moving the arrays, drawing)
      const parts = Object.entries(read.ms ?? {}).map(([part, t]) => `${part} ${t}`);
      this.el.view.dataset.openParts = parts.join(', ');
      this.say(`${file.name}: read and drawn in ${ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`}, in this browser.`);
      delete this.el.message.dataset.kind;
      dataset.snapshotState = 'shown';
    } catch (err) {
      if (token !== this.opening) return;
      const [title, text] = describe(err);
      this.current = null;
      this.el.view.hidden = true;
      this.say(`${title}: ${file.name}: ${text}`, true);
      this.el.message.dataset.kind = err?.kind ?? '';
      dataset.snapshotState = 'failed';
    }
    dataset.snapshotOpens = Number(dataset.snapshotOpens ?? 0) + 1;
  }

  /** A file read: {format, report, timelines} from the worker. */
  show(name, { format, report, timelines }) {
    if (!timelines.length) throw Object.assign(new Error('the file holds no recording (a trace of no steps?)'), { kind: 'trace' });
    this.current = { name, format, report, timelines };
    const { recording } = this.el;
    recording.innerHTML = timelines.map((t, i) => `<option value="${i}">${escapeHtml(t.label)}</option>`).join('');
    this.el.pick.hidden = timelines.length < 2;
    this.el.notes.innerHTML = report.notes.map((n) => `<li>${escapeHtml(n)}</li>`).join('');
    this.el.view.hidden = false;
    Object.assign(this.el.view.dataset, { format, recordings: timelines.length });
    // a tidepool trace's last step is its steady one
    recording.value = String(timelines.length - 1);
    this.select(timelines.length - 1);
  }

  /** Shows recording `i` of the file: the whole of it, and its step's replay. */
  select(i) {
    const c = this.current;
    const t = c.timelines[i];
    const s = c.report.steps[i];
    let reservedAt = 0;
    for (let p = 1; p < t.reserved.length; p++) if (t.reserved[p] > t.reserved[reservedAt]) reservedAt = p;
    const reservedPeak = t.reserved[reservedAt] ?? 0;
    Object.assign(c, { index: i, t, step: s, reservedPeak, reservedAt, colors: colorsOf(t, PALETTE, NO_FRAME_COLOR) });
    const allocations = t.start.length;
    this.el.summary.textContent =
      `${c.name}: ${t.allocator}, ${t.label}: ${t.events} events, ${allocations} allocations; ` +
      `peak live ${fmtBytes(s.peaks.live)}, allocated ${fmtBytes(s.peaks.allocated)}, reserved ${fmtBytes(s.peaks.reserved)}. ` +
      `Step: ${stepText(s)}.`;
    this.el.peak.textContent = `peak ${fmtBytes(t.peak)} (${t.peak} B) at event ${Math.max(0, t.peak_at - 1)}`;
    this.el.reservedPeak.textContent = `at most ${fmtBytes(reservedPeak)} (${reservedPeak} B)`;
    Object.assign(this.el.view.dataset, {
      recording: i,
      events: t.events,
      allocations,
      peak: t.peak,
      peakAt: t.peak_at,
      reservedPeak,
      firstEvent: s.first_event,
      endEvent: s.end_event,
    });
    this.el.legend.innerHTML = c.colors.legend
      .map(({ frame, color }) => {
        const f = { name: t.frame_names[frame], file: t.frame_files[frame], line: t.frame_lines[frame] };
        return `<span><i style="background:${color}"></i>${escapeHtml(frameText(f))}</span>`;
      })
      .join('');
    this.showReplay(s, 'the step');
    this.setRange(0, Infinity);
  }

  showReplay(s, what) {
    this.el.replayNote.textContent = `${what}: ${stepText(s)}; ${s.replay.tensors} tensors; x bound: peak over the lower bound`;
    this.el.rows.innerHTML = replayRowsHtml(s.replay.rows);
  }

  showStep() {
    const s = this.current?.step;
    if (!s) return;
    this.showReplay(s, 'the step');
    this.setRange(s.first_event, s.end_event + 2);
  }

  /** The events in view (`from`..`to` positions: event e is position e + 1) replayed. */
  async replayView() {
    const c = this.current;
    if (!c) return;
    const start = Math.max(0, Math.floor(this.range.from));
    const end = Math.max(start + 1, Math.min(c.t.events, Math.ceil(this.range.to) - 1));
    this.el.replayView.disabled = true;
    try {
      const s = await this.files.replay(c.index, start, end);
      if (this.current === c) this.showReplay(s, 'the events in view');
    } catch (err) {
      const [title, text] = describe(err);
      this.say(`${title}: ${text}`, true);
    } finally {
      this.el.replayView.disabled = false;
    }
  }

  // ---- zoom and pan ---------------------------------------------------------

  /** Positions from..to in view, kept inside the recording and at least MIN_SPAN wide. */
  setRange(from, to) {
    const t = this.current?.t;
    if (!t) return;
    const n = t.live.length;
    const span = Math.min(n, Math.max(Math.min(MIN_SPAN, n), to - from));
    from = Math.min(Math.max(0, from), n - span);
    this.range = { from, to: from + span };
    this.el.range.textContent = `events ${Math.floor(from)}..${Math.ceil(from + span) - 1} of ${t.events}`;
    Object.assign(this.el.view.dataset, { from: this.range.from, to: this.range.to });
    this.requestDraw();
  }

  /** Zooms by `factor` (below 1: in) keeping position `at` where it is. */
  zoom(factor, at = (this.range.from + this.range.to) / 2) {
    const { from, to } = this.range;
    this.setRange(at - (at - from) * factor, at + (to - at) * factor);
  }

  pan(positions) {
    this.setRange(this.range.from + positions, this.range.to + positions);
  }

  /** The position under client x on `canvas`. */
  positionAt(canvas, clientX) {
    const f = plotFrame(canvas.clientWidth, 0, 1, this.range.from, this.range.to);
    const px = clientX - canvas.getBoundingClientRect().left;
    return this.range.from + ((px - f.left) / f.w) * (this.range.to - this.range.from);
  }

  onWheel(e, canvas) {
    if (!this.current) return;
    e.preventDefault();
    const delta = e.deltaMode === 1 ? e.deltaY * 30 : e.deltaY;
    this.zoom(Math.exp(delta * WHEEL_ZOOM), this.positionAt(canvas, e.clientX));
  }

  onPointerDown(e, canvas) {
    if (!this.current || e.button !== 0) return;
    canvas.setPointerCapture?.(e.pointerId);
    let last = e.clientX;
    const move = (m) => {
      const f = plotFrame(canvas.clientWidth, 0, 1, this.range.from, this.range.to);
      this.pan(((last - m.clientX) / f.w) * (this.range.to - this.range.from));
      last = m.clientX;
    };
    const up = () => {
      canvas.removeEventListener('pointermove', move);
      canvas.removeEventListener('pointerup', up);
      canvas.removeEventListener('pointercancel', up);
    };
    canvas.addEventListener('pointermove', move);
    canvas.addEventListener('pointerup', up);
    canvas.addEventListener('pointercancel', up);
  }

  onKey(e) {
    if (!this.current) return;
    const span = this.range.to - this.range.from;
    const act = { ArrowLeft: () => this.pan(-span * PAN_KEY), ArrowRight: () => this.pan(span * PAN_KEY), '+': () => this.zoom(0.5), '=': () => this.zoom(0.5), '-': () => this.zoom(2), Home: () => this.setRange(0, Infinity) }[e.key];
    if (!act) return;
    e.preventDefault();
    act();
  }

  // ---- drawing --------------------------------------------------------------

  /** Draws at the next frame, once however often asked. */
  requestDraw() {
    if (this.raf) return;
    this.raf = requestAnimationFrame(() => {
      this.raf = 0;
      this.draw();
    });
  }

  draw() {
    const c = this.current;
    if (!c || this.el.view.hidden || !this.root.open) return;
    const started = performance.now();
    const theme = readTheme(this.root);
    this.drawLive(c, theme);
    this.drawReserved(c, theme);
    const ms = performance.now() - started;
    this.drawTimes.push(ms);
    if (this.drawTimes.length > DRAW_TIMES) this.drawTimes.shift();
    this.el.view.dataset.drawMs = ms.toFixed(1);
    this.el.view.dataset.draws = Number(this.el.view.dataset.draws ?? 0) + 1;
  }

  /** The step found, as a bar under the plot's axis. */
  markStep(g, f, s, color) {
    const x0 = Math.max(f.left, f.x(s.first_event + 1));
    const x1 = Math.min(f.left + f.w, f.x(s.end_event + 1));
    if (x1 <= x0) return;
    g.fillStyle = color;
    g.fillRect(x0, f.topPad + f.h + 1, x1 - x0, 3);
  }

  drawLive(c, theme) {
    const { t, colors, step } = c;
    const { from, to } = this.range;
    const { g, width, dpr } = fitCanvas(this.el.live);
    const outline = plotFrame(width, 0, 1, from, to);
    const cols = Math.max(1, Math.round(outline.w * dpr));
    const rows = Math.max(1, Math.round(outline.h * dpr));
    const at = columnPositions(t.live, from, to, cols);
    let top = 0;
    for (const p of at) top = Math.max(top, t.live[p]);
    const hi = top * 1.05 || 1;
    const f = plotFrame(width, 0, hi, from, to);
    const image = g.createImageData(cols, rows);
    paintLive(t, at, colors.pixels, new Uint32Array(image.data.buffer), cols, rows, 0, hi);
    g.putImageData(image, Math.round(f.left * dpr), Math.round(f.topPad * dpr));
    drawAxes(g, f, 0, hi, theme, `event ${Math.floor(from)}`, `event ${Math.ceil(to) - 1}`);
    this.markStep(g, f, step, theme.colors[1]);
    if (t.peak_at >= from && t.peak_at < to) markPeak(g, f, f.x(t.peak_at + 0.5), t.peak, theme.colors[2], `peak ${fmtBytes(t.peak)}`);
    this.liveDraw = { f, at, dpr };
  }

  drawReserved(c, theme) {
    const { t, step, reservedPeak, reservedAt } = c;
    const { from, to } = this.range;
    const { g, width } = fitCanvas(this.el.reserved);
    const outline = plotFrame(width, 0, 1, from, to);
    const cols = Math.max(1, Math.round(outline.w));
    const reserved = columnMax(t.reserved, from, to, cols);
    const live = columnMax(t.live, from, to, cols);
    let top = 0;
    for (let x = 0; x < cols; x++) top = Math.max(top, reserved[x], live[x]);
    const hi = top * 1.05 || 1;
    const f = plotFrame(width, 0, hi, from, to);
    drawAxes(g, f, 0, hi, theme, `event ${Math.floor(from)}`, `event ${Math.ceil(to) - 1}`);
    // one CSS pixel a column: reserved as steps, live as a line over them
    const x = (i) => f.left + i;
    g.fillStyle = theme.ghost;
    g.globalAlpha = 0.45;
    g.beginPath();
    g.moveTo(x(0), f.y(0));
    for (let i = 0; i < cols; i++) {
      g.lineTo(x(i), f.y(reserved[i]));
      g.lineTo(x(i + 1), f.y(reserved[i]));
    }
    g.lineTo(x(cols), f.y(0));
    g.closePath();
    g.fill();
    g.globalAlpha = 1;
    g.strokeStyle = theme.colors[0];
    g.beginPath();
    for (let i = 0; i < cols; i++) g.lineTo(x(i) + 0.5, f.y(live[i]));
    g.stroke();
    this.markStep(g, f, step, theme.colors[1]);
    if (reservedPeak > 0 && reservedAt >= from && reservedAt < to) {
      markPeak(g, f, f.x(reservedAt + 0.5), reservedPeak, theme.colors[2], `reserved ${fmtBytes(reservedPeak)}`);
    }
    this.el.reservedLegend.innerHTML =
      `<span><i style="background:${theme.ghost}"></i>reserved (${escapeHtml(t.allocator)})</span>` +
      `<span><i style="background:${theme.colors[0]}"></i>live</span><span><i style="background:${theme.colors[1]}"></i>the step replayed</span>`;
  }

  hover(e) {
    const c = this.current;
    const d = this.liveDraw;
    if (!c || !d) return;
    const rect = this.el.live.getBoundingClientRect();
    const px = e.clientX - rect.left;
    const py = e.clientY - rect.top;
    const col = Math.floor((px - d.f.left) * d.dpr);
    const tip = this.el.tip;
    const k = col >= 0 && col < d.at.length ? allocationAt(c.t, d.at[col], d.f.bytesAt(py)) : -1;
    if (k < 0) {
      tip.hidden = true;
      return;
    }
    const { t } = c;
    const frames = framesOf(t, k, TOP_FRAMES);
    const born = t.start[k] > 0 ? `allocated at event ${t.start[k] - 1}` : 'allocated before the recording began';
    const freed = t.end[k] <= t.events ? `freed at event ${t.end[k] - 1}` : 'live at its end';
    tip.innerHTML =
      `<b data-testid="snapshot-tooltip-size">${fmtBytes(t.size[k])}</b> (${t.size[k]} B) · ` +
      `<span data-testid="snapshot-tooltip-stream">stream ${escapeHtml(t.streams[t.stream[k]])}</span><br>${born}, ${freed}` +
      (frames.length
        ? `<ol class="tp-timeline-frames" data-testid="snapshot-tooltip-frames">${frames.map((f) => `<li>${escapeHtml(frameText(f))}</li>`).join('')}</ol>`
        : '<br><span class="tp-muted">no stack recorded</span>');
    tip.hidden = false;
    const box = this.el.live.parentElement.clientWidth;
    tip.style.left = `${Math.max(0, Math.min(px + 12, box - 250))}px`;
    tip.style.top = `${Math.max(0, py - 10)}px`;
  }

  destroy() {
    cancelAnimationFrame(this.raf);
    this.root.removeEventListener('dragover', this.onDragOver);
    this.root.removeEventListener('dragleave', this.onDragLeave);
    this.root.removeEventListener('drop', this.onDrop);
    this.files?.terminate();
  }
}

// What the memory timeline's views share: the trace's event families and how a
// tensor is known, canvases sized to their box, the plot frame and its byte axis, the
// colours, and the replay table's rows.

import { fmtBytes, fmtBytesShort } from './format.mjs';

export const HEIGHT = 220; // CSS pixels of each canvas

/** Trace events (docs/trace.md) that begin a tensor's life, and that end it. */
export const BIRTHS = new Set(['hit', 'miss', 'oversize', 'unpooled']);
export const DEATHS = new Set(['release', 'reject', 'discard']);

/** A tensor's buffer, and its offset there when it lies at a planned range of an arena. */
export const tensorKey = (e) => (e.offset === undefined || e.offset === null ? `${e.buffer}` : `${e.buffer}@${e.offset}`);

// Colours handed out in order of first appearance: a step has a few dozen kernels
// (a snapshot a few dozen lines that allocate), and neighbours in time get hues far
// apart.
export const PALETTE = ['#4e79a7', '#f28e2b', '#59a14f', '#e15759', '#76b7b2', '#edc948', '#b07aa1', '#ff9da7', '#9c755f', '#8cd17d', '#a0cbe8', '#d37295', '#86bcb6', '#f1ce63', '#499894', '#d4a6c8'];

export const escapeHtml = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

/** Sizes a canvas to its box (device pixels); its 2D context in CSS pixels, cleared. */
export function fitCanvas(canvas, height = HEIGHT) {
  const width = Math.max(200, canvas.parentElement.clientWidth);
  const dpr = devicePixelRatio || 1;
  canvas.width = Math.round(width * dpr);
  canvas.height = Math.round(height * dpr);
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  const g = canvas.getContext('2d');
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, width, height);
  return { g, width, dpr };
}

/**
 * The plot area inside a canvas `width` wide (a left margin for the byte axis):
 * bytes lo..hi up, positions from..to across.
 */
export function plotFrame(width, lo, hi, from, to, height = HEIGHT) {
  const left = 52;
  const right = 8;
  const topPad = 8;
  const bottom = 18;
  const w = width - left - right;
  const h = height - topPad - bottom;
  const span = to - from;
  return {
    left,
    topPad,
    w,
    h,
    from,
    to,
    x: (c) => left + ((c - from) / span) * w,
    y: (bytes) => topPad + h - (hi > lo ? ((bytes - lo) / (hi - lo)) * h : 0),
    bytesAt: (py) => lo + ((topPad + h - py) / h) * (hi - lo),
    columnAt: (px) => Math.floor(from + ((px - left) / w) * span),
  };
}

/** Grid lines with byte labels, and `first`/`last` under the ends of the x axis. */
export function drawAxes(g, f, lo, hi, theme, first, last) {
  g.fillStyle = theme.fg;
  g.strokeStyle = theme.grid;
  g.font = theme.font;
  g.textAlign = 'right';
  g.textBaseline = 'middle';
  for (let i = 0; i <= 4; i++) {
    const v = lo + ((hi - lo) * i) / 4;
    const y = f.y(v);
    g.beginPath();
    g.moveTo(f.left, y);
    g.lineTo(f.left + f.w, y);
    g.stroke();
    g.fillText(fmtBytesShort(Math.round(v)), f.left - 4, y);
  }
  g.textBaseline = 'top';
  g.textAlign = 'left';
  g.fillText(first, f.left, f.topPad + f.h + 3);
  g.textAlign = 'right';
  g.fillText(last, f.left + f.w, f.topPad + f.h + 3);
}

/** A dashed line across the plot at `bytes` and down at x `px`, labelled. */
export function markPeak(g, f, px, bytes, color, label) {
  g.strokeStyle = color;
  g.setLineDash([4, 3]);
  g.beginPath();
  g.moveTo(px, f.topPad);
  g.lineTo(px, f.topPad + f.h);
  g.moveTo(f.left, f.y(bytes));
  g.lineTo(f.left + f.w, f.y(bytes));
  g.stroke();
  g.setLineDash([]);
  g.fillStyle = color;
  g.textAlign = px > f.left + f.w / 2 ? 'right' : 'left';
  g.textBaseline = 'bottom';
  g.fillText(label, px + (g.textAlign === 'left' ? 4 : -4), f.y(bytes) + 12);
}

/** The rows of a replay table (`tidepool trace replay`'s), as table rows. */
export function replayRowsHtml(rows) {
  return rows
    .map(
      (row) => `<tr data-allocator="${escapeHtml(row.allocator)}" data-peak="${row.peak_bytes}" data-ratio="${row.ratio}">
          <td>${escapeHtml(row.allocator)}</td><td class="tp-num">${row.peak_bytes}</td><td class="tp-muted">${fmtBytes(row.peak_bytes)}</td>
          <td class="tp-num">${row.ratio.toFixed(3)}</td><td class="tp-num">${row.buffers_created}</td><td class="tp-num">${row.hits}</td></tr>`,
    )
    .join('');
}

/** The head of a replay table. */
export const REPLAY_HEAD = `<thead><tr><th>allocator</th><th>peak bytes</th>
          <th></th><th>x bound</th><th>buffers created</th><th>hits</th></tr></thead>`;

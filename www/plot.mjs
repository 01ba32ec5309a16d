// Thin wrappers over uPlot (small, fast, no dependencies; served from node_modules,
// so the page works offline). A Chart sizes itself to its box and redraws only
// when it is handed new data; the page hands it data at most once a frame.

import uPlot from '../node_modules/uplot/dist/uPlot.esm.js';
import { fmtCount } from './format.mjs';

/** uPlot's stylesheet, adopted with the widget's own (styles.mjs). */
export const CHART_CSS_URL = new URL('../node_modules/uplot/dist/uPlot.min.css', import.meta.url);

// Theme colours come from the widget's CSS custom properties, so light and dark
// schemes (and a host page's overrides) reach the canvas too.
export function readTheme(el) {
  const css = getComputedStyle(el);
  const v = (name, fallback) => css.getPropertyValue(name).trim() || fallback;
  return {
    fg: v('--tp-fg-muted', '#9aa4b2'),
    grid: v('--tp-grid', 'rgba(128,128,128,.2)'),
    font: `12px ${v('--tp-font', 'system-ui, sans-serif')}`,
    colors: [1, 2, 3, 4].map((i) => v(`--tp-c${i}`, ['#2dd4bf', '#fbbf24', '#f472b6', '#60a5fa'][i - 1])),
    ghost: v('--tp-ghost', '#8b949e'),
  };
}

const INTEGER_STEPS = [1, 2, 5].flatMap((m) => [1, 10, 100, 1e3, 1e4, 1e5, 1e6].map((p) => m * p)).sort((a, b) => a - b);

let measuring = null;
const measurer = () => (measuring ??= document.createElement('canvas').getContext('2d'));

function axis(theme, { side = 3, scale = 'y', fmt = fmtCount, size, splits, label } = {}) {
  return {
    side,
    scale,
    stroke: theme.fg,
    font: theme.font,
    labelFont: theme.font,
    label,
    labelSize: label ? 18 : 0,
    grid: { stroke: theme.grid, width: 1, show: scale === 'y' || scale === 'x' },
    ticks: { stroke: theme.grid, width: 1, size: 4 },
    // wide enough for the longest tick label ("1023.9 KiB"), measured, not guessed
    size:
      size ??
      (side === 2
        ? 36
        : (u, values) => {
            if (!values?.length) return 40;
            const ctx = measurer();
            ctx.font = theme.font;
            return Math.ceil(Math.max(...values.map((v) => ctx.measureText(v).width))) + 14;
          }),
    splits,
    values: (u, vals) => vals.map((x) => fmt(x)),
    gap: 3,
  };
}

/**
 * One live chart in `el`.
 * spec: { bars?: boolean, height?: number, xLabel?: string, xFmt?: fn, xSplits?: fn,
 *   y: {fmt, range?: [min, max]}, y2?: {fmt, range?},
 *   series: [{label, color (index into the theme, or 'ghost'), y2?: boolean, dash?: number[], width?: number}] }
 */
export class Chart {
  constructor(el, spec) {
    this.el = el;
    this.spec = spec;
    this.plot = null;
    this.data = null;
    this.width = 0;
    this.observer = new ResizeObserver((entries) => {
      const w = Math.floor(entries[0].contentRect.width);
      if (w > 0 && w !== this.width) {
        this.width = w;
        if (this.plot) this.plot.setSize({ width: w, height: this.height() });
        else if (this.data) this.build();
      }
    });
    this.observer.observe(el);
  }

  height() {
    return this.spec.height ?? 190;
  }

  build() {
    const { spec } = this;
    const theme = readTheme(this.el);
    const colour = (c) => (c === 'ghost' ? theme.ghost : theme.colors[c ?? 0]);
    const bars = spec.bars ? uPlot.paths.bars({ size: [0.7, 48], radius: 0.1 }) : null;
    const series = [
      { label: spec.xLabel ?? 'step', value: (u, v) => (v == null ? '–' : (spec.xFmt ?? fmtCount)(v)) },
      ...spec.series.map((s) => ({
        label: s.label,
        scale: s.y2 ? 'y2' : 'y',
        stroke: colour(s.color),
        width: s.width ?? 1.5,
        dash: s.dash,
        fill: bars ? colour(s.color) + '' : undefined,
        paths: bars ?? undefined,
        points: { show: s.points ?? false, size: 5, fill: colour(s.color) },
        spanGaps: true,
        value: (u, v) => (v == null ? '–' : ((s.y2 ? spec.y2?.fmt : spec.y?.fmt) ?? fmtCount)(v)),
      })),
    ];
    const scales = {
      x: {
        time: false,
        range: (u, min, max) =>
          min == null || !Number.isFinite(min) ? [0, 1] : spec.bars ? [min - 0.5, max + 0.5] : [min, Math.max(max, min + 1)],
      },
      y: {
        range: spec.y?.range
          ? () => spec.y.range
          : (u, min, max) => nice(min, spec.y?.skipFirst ? maxAfterFirst(u, 'y', max) : max, spec.y?.zero),
      },
    };
    const axes = [
      // steps and size classes are whole numbers: no 2.5 ticks
      { ...axis(theme, { side: 2, scale: 'x', fmt: spec.xFmt ?? fmtCount, splits: spec.xSplits }), incrs: INTEGER_STEPS },
      axis(theme, { side: 3, scale: 'y', fmt: spec.y?.fmt ?? fmtCount }),
    ];
    if (spec.y2) {
      scales.y2 = { range: spec.y2.range ? () => spec.y2.range : (u, min, max) => nice(min, max, spec.y2.zero) };
      axes.push({ ...axis(theme, { side: 1, scale: 'y2', fmt: spec.y2.fmt ?? fmtCount }), grid: { show: false } });
    }
    this.plot = new uPlot(
      {
        width: this.width,
        height: this.height(),
        series,
        scales,
        axes,
        legend: { show: true, live: false },
        cursor: { drag: { x: false, y: false }, points: { show: false } },
        padding: [8, spec.y2 ? 4 : 12, 0, 0],
      },
      this.data,
      this.el,
    );
  }

  /** New data (uPlot's aligned columns). Built on first data once the box has a width. */
  setData(data) {
    this.data = data;
    if (this.plot) this.plot.setData(data);
    else if (this.width > 0) this.build();
  }

  /** Rebuild with the current theme (after a colour-scheme change). */
  restyle() {
    if (!this.plot) return;
    this.plot.destroy();
    this.plot = null;
    if (this.data && this.width > 0) this.build();
  }

  destroy() {
    this.observer.disconnect();
    this.plot?.destroy();
    this.plot = null;
  }
}

// The largest value on `scale` leaving out each series' first point (when there are
// enough others to show a shape).
function maxAfterFirst(u, scale, max) {
  let m = -Infinity;
  u.series.forEach((s, i) => {
    if (i === 0 || s.scale !== scale) return;
    const col = u.data[i];
    if (!col || col.length < 4) return (m = Math.max(m, max));
    for (let j = 1; j < col.length; j++) if (col[j] != null && col[j] > m) m = col[j];
  });
  return Number.isFinite(m) ? m : max;
}

// A range with a little headroom that does not hug the data, from zero if asked.
function nice(min, max, zero) {
  if (min == null || max == null || !Number.isFinite(min) || !Number.isFinite(max)) return [0, 1];
  if (zero) min = Math.min(0, min);
  if (min === max) return [min - (Math.abs(min) * 0.1 || 1), max + (Math.abs(max) * 0.1 || 1)];
  const pad = (max - min) * 0.08;
  return [zero && min === 0 ? 0 : min - pad, max + pad];
}

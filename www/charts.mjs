// The widget's five charts: loss, pool hit rate and objects created, bytes, free
// buffers per size class, and step time. Their x is the step; a run's history
// (history.mjs) holds only the steps recorded, and each draw thins it to at most
// MAX_POINTS columns, so a frame costs the same however long the run.

import { fmtBytes, fmtBytesShort, fmtCount } from './format.mjs';
import { Chart } from './plot.mjs';

// Above this many points a series is thinned before drawing: the eye cannot tell.
const MAX_POINTS = 2000;

const pct = (v) => `${Math.round(v * 100)}%`;

/**
 * The step axis over [lo, hi] in at most MAX_POINTS bins of `stride` steps; each
 * bin's x is its last step.
 */
function stepAxis(lo, hi) {
  if (!(hi >= lo)) return { lo: 0, stride: 1, xs: [] };
  const stride = Math.max(1, Math.ceil((hi - lo + 1) / MAX_POINTS));
  const xs = Array.from({ length: Math.ceil((hi - lo + 1) / stride) }, (_, j) => Math.min(lo + (j + 1) * stride - 1, hi));
  return { lo, stride, xs };
}

/** `values` of `run` on `axis`: the last value present in each bin (null where none). */
function column(run, values, { lo, stride, xs }) {
  const out = new Array(xs.length).fill(null);
  if (!run) return out;
  for (let i = 0; i < run.n; i++) {
    const v = values[i];
    if (v == null) continue;
    const j = Math.floor((run.x[i] - lo) / stride);
    if (j >= 0 && j < out.length) out[j] = v;
  }
  return out;
}

const first = (run) => (run?.n ? run.x[0] : undefined);
const last = (run) => (run?.n ? run.x[run.n - 1] : undefined);

export class RunCharts {
  /** `el`: the widget's elements by data-ref (chartLoss, chartHit, chartBytes, chartBuckets, chartTime). */
  constructor(el) {
    this.el = el;
    this.bucketSizes = [];
    const plot = (fig) => fig.querySelector('.tp-plot');
    const bytes = { fmt: fmtBytes, zero: true };
    this.charts = {
      loss: new Chart(plot(el.chartLoss), {
        y: { fmt: (v) => v.toFixed(2) },
        series: [
          { label: 'training', color: 0 },
          { label: 'held-out', color: 1, points: true, width: 2 },
          { label: 'previous run', color: 'ghost', dash: [4, 4], width: 1 },
        ],
      }),
      hit: new Chart(plot(el.chartHit), {
        y: { fmt: pct, range: [0, 1.02] },
        y2: { fmt: fmtCount, zero: true },
        series: [
          { label: 'hit rate, this step', color: 0, width: 2 },
          { label: 'since start', color: 3 },
          { label: 'buffers created', color: 2, y2: true },
          { label: 'bind groups created', color: 1, y2: true, dash: [4, 3] },
          { label: 'pipelines created', color: 3, y2: true, dash: [2, 3] },
        ],
      }),
      bytes: new Chart(plot(el.chartBytes), {
        y: bytes,
        series: [
          { label: 'held by the pool', color: 0, width: 2 },
          { label: 'in use', color: 1 },
        ],
      }),
      buckets: new Chart(plot(el.chartBuckets), {
        bars: true,
        xLabel: 'size class',
        // every size class is a bar; labels thin out when they would collide
        xSplits: (u) => {
          const n = this.bucketSizes.length;
          const fit = Math.max(1, Math.floor(u.bbox.width / devicePixelRatio / 38));
          const every = Math.ceil(n / fit);
          return this.bucketSizes.map((_, i) => i).filter((i) => i % every === 0);
        },
        xFmt: (i) => (Number.isInteger(i) && this.bucketSizes[i] !== undefined ? fmtBytesShort(this.bucketSizes[i]) : ''),
        y: { fmt: fmtCount, zero: true },
        series: [{ label: 'free buffers', color: 3 }],
      }),
      time: new Chart(plot(el.chartTime), {
        // the first step compiles every shader: left off the scale, or it flattens the rest
        y: { fmt: (v) => `${+v.toFixed(1)}`, zero: true, skipFirst: true },
        y2: { fmt: fmtCount, zero: true },
        series: [
          { label: 'ms per step', color: 0, width: 2 },
          { label: 'tokens/s', color: 1, y2: true },
          { label: 'previous run, ms', color: 'ghost', dash: [4, 4], width: 1 },
        ],
      }),
    };
  }

  /**
   * Draws `cur` (and `prev` dashed, where its steps overlap cur's: a run loaded far
   * along would otherwise squash both into a corner). `pooling`: the pool is on.
   */
  draw(cur, prev, pooling) {
    const { el, charts } = this;
    const s = cur.latest;
    const ghost = prev?.n && (!cur.n || first(prev) <= last(cur)) ? prev : null;
    const lo = Math.min(first(cur) ?? Infinity, first(ghost) ?? Infinity);
    const hi = Math.max(last(cur) ?? -Infinity, last(ghost) ?? -Infinity);
    const shared = stepAxis(lo, hi);
    const col = (values) => column(cur, values, shared);
    charts.loss.setData([shared.xs, col(cur.loss), col(cur.val), column(ghost, ghost?.loss, shared)]);
    charts.hit.setData([shared.xs, col(cur.hit), col(cur.hitCum), col(cur.created), col(cur.bindGroups), col(cur.pipelines)]);
    charts.time.setData([shared.xs, col(cur.ms), col(cur.tps), column(ghost, ghost?.ms, shared)]);
    const own = stepAxis(first(cur), last(cur));
    charts.bytes.setData([own.xs, column(cur, cur.held, own), column(cur, cur.inUse, own)]);

    // Bars: every size class seen in this run keeps its slot, so bars rise and fall in place.
    const sizes = [...cur.sizes].sort((a, b) => a - b);
    const counts = sizes.map((size) => s?.buckets?.find((b) => b.size === size)?.count ?? 0);
    this.bucketSizes = sizes;
    charts.buckets.setData([sizes.map((_, i) => i), counts]);
    el.bucketsEmpty.textContent = counts.some((c) => c > 0)
      ? ''
      : !pooling
        ? 'None: with the pool off, every buffer is destroyed after its step.'
        : s
          ? 'None free right now.'
          : 'Appears after the first step.';

    // Plain figures for tests and for anyone reading the DOM: the points recorded,
    // the last step drawn, the latest value.
    const mark = (fig, points, latest) => {
      fig.dataset.points = points;
      fig.dataset.lastStep = last(cur) ?? '';
      fig.dataset.latest = latest ?? '';
    };
    mark(el.chartLoss, cur.n, s?.loss);
    mark(el.chartHit, cur.n, s?.step_hit_rate);
    mark(el.chartBytes, cur.n, s?.bytes_held);
    mark(el.chartBuckets, counts.filter((c) => c > 0).length, s?.total_pooled);
    mark(el.chartTime, cur.n, s?.ms);
  }

  /** Rebuilt with the current theme (after the styles arrive, or a colour-scheme change). */
  restyle() {
    for (const c of Object.values(this.charts)) c.restyle();
  }

  destroy() {
    for (const c of Object.values(this.charts)) c.destroy();
  }
}

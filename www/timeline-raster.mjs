// An opened recording's live bytes, drawn as PyTorch's "active memory timeline"
// draws a snapshot: each allocation a band from its birth to its free, stacked on the
// live ones born before it. A recording may have a million events, so it is drawn at
// the canvas's resolution: each pixel column shows one position, the one in its range
// where the most bytes are live (no peak falls between columns), and the stack there
// is swept to from the column before, not rebuilt. A frame costs the events in view
// plus, per column, the allocations live there.
//
// Pure functions over the arrays of a timeline (src/snapshot/timeline.rs: `start`,
// `end`, `size`, `by_end`, `live`, ... one entry an allocation, in birth order).

/** A '#rrggbb' colour as ImageData's 32-bit pixel (little-endian RGBA, opaque). */
export function pixelOf(hex) {
  const v = Number.parseInt(hex.slice(1), 16);
  return ((255 << 24) | ((v & 0xff) << 16) | (v & 0xff00) | ((v >> 16) & 0xff)) >>> 0;
}

/** Frame `f` of the timeline: {name, file, line}. */
export function frameOf(t, f) {
  return { name: t.frame_names[f], file: t.frame_files[f], line: t.frame_lines[f] };
}

/** The frames of allocation `k`'s stack, innermost first, at most `max`. */
export function framesOf(t, k, max = Infinity) {
  const s = t.stack[k];
  const end = Math.min(t.stack_offsets[s + 1], t.stack_offsets[s] + max);
  const out = [];
  for (let i = t.stack_offsets[s]; i < end; i++) out.push(frameOf(t, t.stack_frames[i]));
  return out;
}

/**
 * Each allocation's colour, by the frame that names its stack (`stack_label`): the
 * frames in order of first birth take the palette's colours in turn (no frame: `none`).
 * Returns {pixels: Uint32Array (ImageData pixels), css: Map frame -> colour, legend:
 * the `top` frames holding the most bytes over the events, [{frame, color, bytes}]}.
 */
export function colorsOf(t, palette, none, top = 12) {
  const n = t.start.length;
  const css = new Map();
  const weight = new Map();
  const pixels = new Uint32Array(n);
  const packed = palette.map(pixelOf);
  const nonePixel = pixelOf(none);
  for (let k = 0; k < n; k++) {
    const f = t.stack_label[t.stack[k]];
    if (f === t.no_frame) {
      pixels[k] = nonePixel;
      continue;
    }
    if (!css.has(f)) css.set(f, css.size % palette.length);
    pixels[k] = packed[css.get(f)];
    weight.set(f, (weight.get(f) ?? 0) + t.size[k] * (t.end[k] - t.start[k]));
  }
  const legend = [...weight]
    .sort((a, b) => b[1] - a[1])
    .slice(0, top)
    .map(([frame, bytes]) => ({ frame, color: palette[css.get(frame)], bytes }));
  return { pixels, css: new Map([...css].map(([f, i]) => [f, palette[i]])), legend };
}

/**
 * Calls `f(x, a, b)` for each of `width` pixel columns over positions [from, to):
 * column x covers positions a..b (b excluded, at least one), within 0..n.
 */
function eachColumn(from, to, width, n, f) {
  const k = (to - from) / width;
  for (let x = 0; x < width; x++) {
    const a = Math.min(n - 1, Math.max(0, Math.floor(from + x * k)));
    const b = Math.min(n, Math.max(a + 1, Math.floor(from + (x + 1) * k)));
    f(x, a, b);
  }
}

/** The position each pixel column shows: in its range, the one where `live` is highest. */
export function columnPositions(live, from, to, width) {
  const out = new Uint32Array(width);
  eachColumn(from, to, width, live.length, (x, a, b) => {
    let best = a;
    for (let p = a + 1; p < b; p++) if (live[p] > live[best]) best = p;
    out[x] = best;
  });
  return out;
}

/** The highest of `values` in each pixel column. */
export function columnMax(values, from, to, width) {
  const out = new Float64Array(width);
  eachColumn(from, to, width, values.length, (x, a, b) => {
    let m = values[a];
    for (let p = a + 1; p < b; p++) if (values[p] > m) m = values[p];
    out[x] = m;
  });
  return out;
}

/** The first index of `sorted` (ascending) whose value is above `v`. */
function above(sorted, v, key = (i) => sorted[i]) {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (key(mid) <= v) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * Paints the stacked allocations into `pixels` (a Uint32Array over an ImageData of
 * `width` x `height`, left as it is where nothing is live): column x shows position
 * `at[x]` (non-decreasing), bytes `lo`..`hi` from the bottom row to the top.
 */
export function paintLive(t, at, colors, pixels, width, height, lo, hi) {
  const { start, end, size, by_end: byEnd } = t;
  const n = start.length;
  if (width === 0 || n === 0 || !(hi > lo)) return;
  // The live allocations in birth order: a doubly linked list (-1 ends it).
  const next = new Int32Array(n);
  const prev = new Int32Array(n);
  const listed = new Uint8Array(n);
  let head = -1;
  let tail = -1;
  const append = (k) => {
    prev[k] = tail;
    next[k] = -1;
    if (tail >= 0) next[tail] = k;
    else head = k;
    tail = k;
    listed[k] = 1;
  };
  const unlink = (k) => {
    const p = prev[k];
    const q = next[k];
    if (p >= 0) next[p] = q;
    else head = q;
    if (q >= 0) prev[q] = p;
    else tail = p;
    listed[k] = 0;
  };
  // Births (by start) and frees (by end) up to the first column's position.
  const first = at[0];
  let born = above(start, first);
  for (let k = 0; k < born; k++) if (end[k] > first) append(k);
  let freed = above(byEnd, first, (i) => end[byEnd[i]]);
  const scale = height / (hi - lo);
  for (let x = 0; x < width; x++) {
    const p = at[x];
    for (; born < n && start[born] <= p; born++) if (end[born] > p) append(born);
    for (; freed < n && end[byEnd[freed]] <= p; freed++) if (listed[byEnd[freed]]) unlink(byEnd[freed]);
    // Each band's rows: those whose centre its bytes cover; adjacent bands share an
    // edge's rounding, so they tile without gaps.
    let bytes = 0;
    let below = Math.round((hi - bytes) * scale);
    for (let k = head; k >= 0; k = next[k]) {
      bytes += size[k];
      const top = Math.round((hi - bytes) * scale);
      const r1 = Math.min(height, below);
      if (top < r1) {
        const c = colors[k];
        for (let r = Math.max(0, top); r < r1; r++) pixels[r * width + x] = c;
      }
      below = top;
      if (top <= 0) break;
    }
  }
}

/** The allocation stacked at position `p`, `bytes` up from the bottom; -1 for none. */
export function allocationAt(t, p, bytes) {
  const { start, end, size } = t;
  let acc = 0;
  for (let k = 0; k < start.length && start[k] <= p; k++) {
    if (end[k] <= p) continue;
    if (bytes < acc + size[k]) return bytes >= acc ? k : -1;
    acc += size[k];
  }
  return -1;
}

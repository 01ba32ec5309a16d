// Numbers as the widget shows them: bytes, sizes on a crowded axis, counts.

const KIB = 1024;
/** 1536 -> "1.5 KiB" */
export function fmtBytes(n) {
  if (n == null || !Number.isFinite(n)) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = Math.abs(n);
  let u = 0;
  while (v >= KIB && u < units.length - 1) {
    v /= KIB;
    u++;
  }
  const sign = n < 0 ? '-' : '';
  return u === 0 ? `${sign}${v} B` : `${sign}${v.toFixed(v < 10 ? 1 : 0)} ${units[u]}`;
}

/** 65536 -> "64K": short size labels for a crowded axis */
export function fmtBytesShort(n) {
  const units = ['', 'K', 'M', 'G', 'T'];
  let u = 0;
  while (n >= KIB && u < units.length - 1) {
    n /= KIB;
    u++;
  }
  return `${+n.toFixed(n < 10 && n % 1 ? 1 : 0)}${units[u] || 'B'}`;
}

/** 12345 -> "12.3k" for axis ticks */
export function fmtCount(n) {
  if (n == null || !Number.isFinite(n)) return '–';
  const a = Math.abs(n);
  if (a >= 1e9) return `${+(n / 1e9).toFixed(1)}G`;
  if (a >= 1e6) return `${+(n / 1e6).toFixed(1)}M`;
  if (a >= 1e3) return `${+(n / 1e3).toFixed(1)}k`;
  return `${+n.toFixed(3)}`;
}

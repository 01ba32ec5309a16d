// Getting a corpus's bytes to the trainer. The wasm checks every corpus (empty,
// binary, not UTF-8, too short, too large) and names what is wrong; the page only
// refuses early what is over the size cap, so a 2 GB file is not read into memory
// to be refused after.

import { kindError, messageOf } from './errors.mjs';

/**
 * The largest corpus, in bytes, until the wasm says (its maxCorpusBytes(), the cap
 * src/data.rs enforces, replaces it once loaded).
 */
export const MAX_CORPUS_BYTES = 64 * 1024 * 1024;

/**
 * The default corpus (Tiny Shakespeare), shipped in the package's data/: written as
 * the literal new URL(..., import.meta.url) that bundlers follow and emit.
 */
export const DEFAULT_CORPUS_URL = new URL('../data/tinyshakespeare.txt', import.meta.url);
/** Its name in the widget (a bundler renames the file it emits). */
export const DEFAULT_CORPUS_NAME = 'tinyshakespeare.txt';

const MIB = 1024 * 1024;
const mib = (n) => `${(n / MIB).toFixed(n < 10 * MIB ? 1 : 0)} MiB`;

/** Throws a corpus error when `bytes` is over the cap `max`. */
export function checkSize(name, bytes, max = MAX_CORPUS_BYTES) {
  if (bytes > max) {
    throw kindError('corpus', `${name} is ${mib(bytes)} (${bytes} bytes); a corpus may be at most ${mib(max)} (${max} bytes). Choose a smaller file.`);
  }
}

/** The UTF-8 size of a string, without encoding a copy of it. */
export const utf8Bytes = (text) => new Blob([text]).size;

/** A chosen or dropped file as bytes (checked against the cap before it is read). */
export async function readFile(file, max = MAX_CORPUS_BYTES, name = file.name) {
  checkSize(name, file.size, max);
  return new Uint8Array(await file.arrayBuffer());
}

/**
 * Fetches `url` as bytes: refused before the download when the server gives a size
 * over the cap, and cut off as soon as the bytes pass it when it gives none; an HTML
 * page in its place is refused. `name`: its name in the widget (default: the URL's
 * last segment). Resolves {name, bytes}.
 */
export async function fetchCorpus(url, max = MAX_CORPUS_BYTES, name = undefined) {
  const where = String(url);
  let res;
  try {
    res = await fetch(url);
  } catch (err) {
    throw kindError('corpus', `could not fetch the corpus ${where}: ${messageOf(err)}`);
  }
  if (!res.ok) throw kindError('corpus', `could not fetch the corpus ${where}: HTTP ${res.status}`);
  checkNotPage(where, res.url || where, res.headers.get('Content-Type'));
  if (name === undefined) {
    name = new URL(res.url || where, location.href).pathname.split('/').pop() || 'corpus';
    try {
      name = decodeURIComponent(name);
    } catch {}
  }
  const declared = Number(res.headers.get('Content-Length'));
  if (declared > 0) checkSize(name, declared, max);
  const chunks = [];
  let total = 0;
  const reader = res.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.length;
    if (total > max) {
      reader.cancel().catch(() => {});
      checkSize(name, total, max); // throws
    }
    chunks.push(value);
  }
  const bytes = new Uint8Array(total);
  let at = 0;
  for (const c of chunks) {
    bytes.set(c, at);
    at += c.length;
  }
  return { name, bytes };
}

/**
 * Refuses an HTML page in place of a text file: what a dev server or a single-page
 * app's host sends for a path it does not have (with 200). A corpus asked for by an
 * .html or .htm URL may be HTML.
 */
export function checkNotPage(asked, answered, contentType) {
  const html = /^\s*(text\/html|application\/xhtml\+xml)\b/i.test(contentType ?? '');
  const path = new URL(answered, 'http://x/').pathname;
  if (html && !/\.x?html?$/i.test(path)) {
    throw kindError(
      'corpus',
      `the corpus ${asked} came back as an HTML page (${contentType}), not a text file: the server has no such file and answered with its fallback page. Check the URL (mount()'s corpusUrl), or serve the file there.`,
    );
  }
}

// The worker's side of opening a recording (a PyTorch memory snapshot or a tidepool
// trace) for the memory timeline: snapshot-client.mjs is the page's. The page runs
// these in a worker of their own, never the training one, so a large file neither
// stalls training nor leaves its memory in the trainer's wasm instance.
//
//   {type:'snapshot', id, file}   read a File (a Blob: it crosses without a copy)
//                                 -> 'snapshot' {format, report, timelines, ms}
//                                 (ms: the time each part took)
//   {type:'replay', id, recording, start, end}   that recording's events start..end
//                                 replayed -> 'replayed' {step} (one step of a report)
//
// Each timeline is an object of typed arrays (src/snapshot/timeline.rs): they are
// transferred to the page, not copied.

import { kindError } from './errors.mjs';

/** The typed arrays of the timelines, to transfer. */
function buffers(timelines) {
  const out = [];
  for (const t of timelines) for (const v of Object.values(t)) if (ArrayBuffer.isView(v)) out.push(v.buffer);
  return out;
}

export class SnapshotReader {
  constructor() {
    this.snapshot = null; // the wasm Snapshot of the file open
  }

  close() {
    try {
      this.snapshot?.free();
    } catch {}
    this.snapshot = null;
  }

  /** Reads `file` with the wasm package `wasm`; the reply for the page. */
  async read(wasm, file) {
    if (!(file instanceof Blob)) throw kindError('trace', 'no file was given to read.');
    this.close();
    wasm.Snapshot.checkSize(file.size); // before its bytes are read
    const ms = {};
    let since = performance.now();
    const lap = (name) => {
      const now = performance.now();
      ms[name] = Math.round(now - since);
      since = now;
    };
    const bytes = new Uint8Array(await file.arrayBuffer());
    lap('file');
    this.snapshot = wasm.Snapshot.read(bytes);
    lap('read');
    const report = this.snapshot.report();
    lap('report');
    const timelines = [];
    for (let i = 0; i < this.snapshot.recordings; i++) timelines.push(this.snapshot.timeline(i));
    lap('timeline');
    return { type: 'snapshot', format: this.snapshot.format, report, timelines, ms, transfer: buffers(timelines) };
  }

  replay({ recording, start, end }) {
    if (!this.snapshot) throw kindError('trace', 'no file is open: open one first.');
    return { type: 'replayed', step: this.snapshot.replay(recording, start, end) };
  }
}

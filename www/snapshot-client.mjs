// The page's side of opening a recording for the memory timeline (timeline-file.mjs):
// a worker of its own, never the training one (a large file would stall training,
// and leave its memory in the trainer's wasm), started when the first file is opened
// and again after it is gone. It is the trainer's worker script with its wasm
// (client.mjs loads both, wherever mount()'s URLs put them), asked only to read files
// (worker-snapshot.mjs).

import { TrainerClient } from './client.mjs';

export class SnapshotClient {
  /** @param {{pkgUrl?, wasmUrl?, workerUrl?, watchdog?}} urls as for TrainerClient */
  constructor(urls = {}) {
    this.urls = urls;
    this.client = null;
    this.ready = null; // the client's start, once asked
  }

  /** The worker, started if it is not running. */
  async worker() {
    if (!this.client?.alive) {
      this.client?.terminate();
      this.client = new TrainerClient(this.urls);
      this.ready = this.client.start();
    }
    const client = this.client;
    try {
      await this.ready;
    } catch (err) {
      if (this.client === client) this.terminate(); // the next file tries a new one
      throw err;
    }
    return client;
  }

  /** Reads `file` (a File or Blob): resolves to {format, report, timelines}. */
  async open(file) {
    const client = await this.worker();
    return client.request({ type: 'snapshot', file }, { quiet: true });
  }

  /** Events `start..end` of recording `index` of the file open, replayed: a report's step. */
  async replay(index, start, end) {
    const client = await this.worker();
    const reply = await client.request({ type: 'replay', recording: index, start, end }, { quiet: true });
    return reply.step;
  }

  terminate() {
    this.client?.terminate();
    this.client = null;
    this.ready = null;
  }
}

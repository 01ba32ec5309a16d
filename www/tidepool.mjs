// tidepool's trainer widget: controls, live charts of the buffer pool, samples.
// Any page can import this module and either
//   mount(element, options)          -> a controller (start, pause, ...)
// or write
//   <tidepool-trainer preset="tiny" pool="off" autostart></tidepool-trainer>
// Each widget owns its own Web Worker (so its own wasm instance, GPU device and
// Trainer): several run on one page independently. index.html is one of them.
// It loads from any origin that sends CORS headers (a package CDN; client.mjs says
// how the worker starts there) and through bundlers (docs/embed.md).

import { TidepoolTrainer } from './element.mjs';

export { TidepoolTrainer } from './element.mjs';
export { optionsFromQuery } from './options.mjs';
export { mount } from './widget.mjs';

if (!customElements.get('tidepool-trainer')) customElements.define('tidepool-trainer', TidepoolTrainer);

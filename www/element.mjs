// <tidepool-trainer preset="tiny" batch="2" context="8" autostart></tidepool-trainer>:
// the element form of mount(), always in its own shadow root. Its attributes (and its
// `settings` property) are read once, when it joins the page (options.mjs says how).

import { optionsFromElement } from './options.mjs';
import { mount } from './widget.mjs';

export class TidepoolTrainer extends HTMLElement {
  connectedCallback() {
    if (this.tidepool) return;
    mount(this, { ...optionsFromElement(this), shadow: true });
    // the title attribute would also show as a tooltip over the whole widget
    this.removeAttribute('title');
  }

  disconnectedCallback() {
    // moved within the page: keep running; removed: release the GPU
    queueMicrotask(() => {
      if (!this.isConnected && this.tidepool) {
        this.tidepool.destroy();
        this.tidepool = undefined;
      }
    });
  }
}

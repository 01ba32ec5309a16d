// What a trainer is asked for: mount()'s options, a page link's query, a
// <tidepool-trainer>'s attributes. The widget's own options are DEFAULTS' keys; every
// other option is a training setting, passed to the wasm's Trainer.create as it is,
// and the wasm checks it and says what is wrong.

export const DEFAULTS = Object.freeze({
  title: 'tidepool',
  corpus: undefined, // text or bytes; undefined: the default corpus (Tiny Shakespeare)
  corpusName: 'custom text',
  corpusUrl: undefined, // fetched at mount when given
  autostart: false,
  // Where the package's files are, when a bundler or a server moved them (each
  // defaults to its place beside the widget's modules, as the package ships them):
  pkgUrl: undefined, // the wasm package's JS (pkg/tidepool.js)
  wasmUrl: undefined, // its .wasm (pkg/tidepool_bg.wasm)
  workerUrl: undefined, // the training worker (www/worker.mjs)
  shadow: false, // render into a shadow root with its own styles (the element always does)
  schedule: {}, // evaluation and sampling cadence, see worker-schedule.mjs
  watchdog: {}, // how soon a silent worker is noticed, see client.mjs
  autosaveEvery: 200, // steps between saves to IndexedDB for "Resume the last run" (0: none)
  autosaveKey: 'last', // the saved run's key in IndexedDB (give each widget on a page its own)
});

/** Splits mount()'s options into the widget's own and the training settings (flat, or in `settings`). */
export function splitOptions(options) {
  const widget = { ...DEFAULTS };
  const settings = {};
  for (const [key, value] of Object.entries(options ?? {})) {
    if (value === undefined) continue;
    if (key === 'settings') Object.assign(settings, value);
    else if (key in DEFAULTS) widget[key] = value;
    else settings[key] = value;
  }
  return { widget, settings };
}

// A string from a query or an attribute as the value a setting takes: on/off and
// true/false as booleans, decimal numbers as numbers, anything else as it is (the
// wasm says when a setting does not take it).
export function settingValue(text) {
  const t = text.trim();
  if (t === '' || /^(on|true)$/i.test(t)) return true;
  if (/^(off|false)$/i.test(t)) return false;
  if (/^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i.test(t)) return Number(t);
  return text;
}
export const settingKey = (name) => name.replace(/-/g, '_');

/**
 * Options from a query string, so a link can open a configured trainer:
 * `?preset=small&batch=4&context=32&lr=0.002&pool=off&policy=exact&autostart`.
 * Every parameter is a training setting and goes to the wasm, which checks it, except
 * `autostart` and `autosave=N` (steps between saves to IndexedDB); a link cannot set
 * the widget's own options (where code and data load from).
 */
export function optionsFromQuery(search = location.search) {
  const o = {};
  for (const [key, value] of new URLSearchParams(search)) {
    if (key === 'autostart') o.autostart = true;
    else if (key === 'autosave') o.autosaveEvery = Number(value);
    else if (!(key in DEFAULTS)) o[settingKey(key)] = settingValue(value);
  }
  return o;
}

// <tidepool-trainer preset="tiny" pool="off" lr="0.001" batch="8" context="64"
//   policy="pow2" steps="2000" corpus-url="text.txt" title="..." autostart>
// title, autostart and the URLs are the widget's; every other attribute that is not
// one of HTML's own is a training setting (eval-every="50" is eval_every: 50) for the
// wasm to check, as is each entry of the element's `settings` property.
const HTML_ATTRIBUTES = /^(id|class|style|slot|part|is|lang|dir|hidden|inert|tabindex|title|role|nonce|translate|draggable|spellcheck|contenteditable|autofocus|accesskey|autocapitalize|enterkeyhint|inputmode|popover|(data|aria)-.*|on.*)$/i;
const ELEMENT_OPTIONS = { 'corpus-url': 'corpusUrl', 'pkg-url': 'pkgUrl', 'wasm-url': 'wasmUrl', 'worker-url': 'workerUrl', autostart: 'autostart' };

/** mount()'s options for a <tidepool-trainer>: its attributes, then its `settings` property. */
export function optionsFromElement(element) {
  const settings = {};
  const options = { title: element.hasAttribute('title') ? element.getAttribute('title') : DEFAULTS.title, settings };
  for (const { name, value } of element.attributes) {
    if (name in ELEMENT_OPTIONS) options[ELEMENT_OPTIONS[name]] = name === 'autostart' ? true : value;
    else if (!HTML_ATTRIBUTES.test(name)) settings[settingKey(name)] = settingValue(value);
  }
  for (const [key, value] of Object.entries(element.settings ?? {})) {
    settings[settingKey(key)] = typeof value === 'string' ? settingValue(value) : value;
  }
  return options;
}

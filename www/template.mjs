// The widget's markup: every element the widget drives has a data-ref (its name in
// the widget's `el`), and those tests read a data-testid. Everything interpolated is
// escaped. The checkpoint panel is checkpoints.mjs's.

import { panel as checkpointPanel } from './checkpoints.mjs';

export const escapeHtml = (s) =>
  String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);

/**
 * The widget's markup. `id` makes its ids unique on the page; `o` holds the widget's
 * options (its title), `settings` the training settings the form starts from.
 */
export function template(id, o, settings) {
  const title = o.title ? `<h2 class="tp-title">${escapeHtml(o.title)}</h2>` : '';
  const num = (v) => (v === undefined || v === null ? '' : escapeHtml(v));
  // The menus are filled from the wasm once it is loaded (fillMenus); until then they
  // show what was asked for. An empty policy leaves it to the trainer's default.
  const option = (v, label = v) => `<option value="${escapeHtml(v)}" selected>${escapeHtml(label)}</option>`;
  const preset = settings.preset === undefined ? '' : option(settings.preset);
  const policy = settings.policy === undefined ? option('', 'default') : option(settings.policy);
  return `
  <div class="tp-head">
    ${title}
    <p class="tp-status" role="status" aria-live="polite" data-ref="status">Loading…</p>
  </div>
  <div class="tp-error" data-testid="error" data-ref="error" role="alert" hidden>
    <p class="tp-error-title" data-ref="errorTitle"></p>
    <p class="tp-error-text" data-ref="errorText"></p>
    <div class="tp-error-actions">
      <button type="button" class="tp-primary" data-ref="restart" hidden>Restart</button>
      <button type="button" data-ref="dismiss">Dismiss</button>
    </div>
  </div>
  <div class="tp-controls" role="group" aria-label="Training">
    <button type="button" class="tp-primary" data-testid="start" data-ref="start">Start</button>
    <button type="button" data-testid="pause" data-ref="pause" disabled>Pause</button>
    <button type="button" data-testid="step-once" data-ref="stepOnce">Step once</button>
    <button type="button" data-testid="reset" data-ref="reset">Reset</button>
    <label class="tp-switch">
      <input type="checkbox" role="switch" data-testid="pool-toggle" data-ref="pool" ${settings.pool === false ? '' : 'checked'}
        aria-describedby="${id}-pool-hint">
      <span>Pool</span>
    </label>
    <span class="tp-hint" id="${id}-pool-hint">switching restarts training</span>
  </div>
  <details class="tp-settings">
    <summary>Settings</summary>
    <div class="tp-fields">
      <label>Model <select data-ref="preset">${preset}</select></label>
      <label>Learning rate <input type="number" inputmode="decimal" step="any" min="0" data-ref="lr" value="${num(settings.lr)}" placeholder="preset"></label>
      <label>Batch <input type="number" inputmode="numeric" step="1" min="1" data-ref="batch" value="${num(settings.batch)}" placeholder="preset"></label>
      <label>Context <input type="number" inputmode="numeric" step="1" min="2" data-ref="context" value="${num(settings.context)}" placeholder="preset"></label>
      <label>Size classes <select data-ref="policy">${policy}</select></label>
      <label>Precision <select data-ref="precision" data-testid="precision">
        <option value="f32"${settings.precision === 'f16' ? '' : ' selected'}>f32</option>
        <option value="f16"${settings.precision === 'f16' ? ' selected' : ''}>f16 matmuls</option>
      </select></label>
      <label><input type="checkbox" data-ref="recompute" data-testid="recompute" ${settings.recompute === true ? 'checked' : ''}>
        Recompute layernorms <span class="tp-muted">(less memory, slower)</span></label>
    </div>
    <p class="tp-hint" data-ref="precisionHint" data-testid="precision-hint"></p>
    <p class="tp-hint" data-ref="settingsHint">Empty fields take the preset's value. Changes apply on Reset.</p>
  </details>
  ${checkpointPanel(id)}
  <div class="tp-corpus" data-ref="drop">
    <p class="tp-corpus-info"><span class="tp-label">Corpus</span>
      <span data-ref="corpusName">default</span> <span class="tp-muted" data-ref="corpusInfo"></span></p>
    <div class="tp-corpus-actions">
      <label class="tp-button">Choose a text file…<input type="file" class="tp-visually-hidden" data-testid="corpus-file"
        data-ref="file" accept=".txt,.md,.csv,.tsv,.json,.html,.xml,.tex,.js,.py,.rs,text/*"></label>
      <button type="button" data-ref="defaultCorpus" hidden>Use the default corpus</button>
      <span class="tp-hint">or drop one here</span>
    </div>
  </div>
  <dl class="tp-figures">
    <div class="tp-wide"><dt>Device</dt><dd data-testid="adapter" data-ref="adapter"></dd></div>
    <div><dt>Step</dt><dd><span data-testid="step-count" data-ref="step">0</span></dd></div>
    <div><dt>Loss</dt><dd><span data-testid="loss" data-ref="loss"></span></dd></div>
    <div><dt>Held-out loss</dt><dd><span data-ref="valLoss"></span></dd></div>
    <div><dt>Hit rate, this step</dt><dd><span data-testid="hit-rate" data-ref="hitRate"></span> %</dd></div>
    <div><dt>Buffers created, this step</dt><dd><span data-testid="buffers-created" data-ref="created"></span></dd></div>
    <div><dt>Bytes held by the pool</dt><dd><span data-testid="bytes-held" data-ref="held"></span>
      <span class="tp-muted" data-ref="heldHuman"></span></dd></div>
    <div data-ref="planRow" hidden><dt>Planned arenas</dt><dd><span data-testid="arena-bytes" data-ref="arenas"></span>
      <span class="tp-muted" data-testid="plan-fallbacks" data-ref="planFallbacks"></span></dd></div>
    <div><dt>Step time</dt><dd><span data-ref="ms"></span> ms</dd></div>
    <div><dt>Tokens per second</dt><dd><span data-ref="tps"></span></dd></div>
  </dl>
  <p class="tp-model tp-muted" data-ref="model"></p>
  <div class="tp-charts">
    <figure class="tp-chart" data-testid="chart-loss" data-ref="chartLoss" data-points="0">
      <figcaption>Loss <span class="tp-muted">training, held-out<span data-ref="prevLoss"></span></span></figcaption>
      <div class="tp-plot" role="img" aria-label="Loss per step"></div></figure>
    <figure class="tp-chart" data-testid="chart-hit-rate" data-ref="chartHit" data-points="0">
      <figcaption>Pool hit rate <span class="tp-muted">and GPU objects created (buffers, bind groups, pipelines), per step</span></figcaption>
      <div class="tp-plot" role="img" aria-label="Pool hit rate per step"></div></figure>
    <figure class="tp-chart" data-testid="chart-bytes" data-ref="chartBytes" data-points="0">
      <figcaption>Bytes <span class="tp-muted">held free by the pool, and in use</span></figcaption>
      <div class="tp-plot" role="img" aria-label="Bytes held and in use per step"></div></figure>
    <figure class="tp-chart" data-testid="chart-buckets" data-ref="chartBuckets" data-points="0">
      <figcaption>Free buffers per size class <span class="tp-muted">now</span></figcaption>
      <p class="tp-empty tp-muted" data-ref="bucketsEmpty"></p>
      <div class="tp-plot" role="img" aria-label="Free buffers per size class"></div></figure>
    <figure class="tp-chart" data-testid="chart-step-time" data-ref="chartTime" data-points="0">
      <figcaption>Step time <span class="tp-muted">ms, and tokens per second<span data-ref="prevTime"></span></span></figcaption>
      <div class="tp-plot" role="img" aria-label="Step time per step"></div></figure>
    <section class="tp-sample" aria-labelledby="${id}-sample-h">
    <div class="tp-sample-head">
      <h3 id="${id}-sample-h">Sample</h3>
      <span class="tp-muted" data-ref="sampleStep">from the current model, refreshed as it trains</span>
      <button type="button" data-ref="sampleNow">Sample now</button>
    </div>
    <pre data-testid="sample" data-ref="sample" tabindex="0" aria-label="Sampled text"></pre>
    </section>
  </div>
  <details data-ref="timeline"></details>`;
}

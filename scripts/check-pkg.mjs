// Run by `npm pack` / `npm publish` (prepack): the package ships pkg/, the wasm-pack
// output, which is built, not committed. Refuse to pack without it, saying how to
// build it, rather than publish a widget whose worker cannot load its wasm.

import { existsSync } from 'node:fs';

const missing = ['pkg/tidepool.js', 'pkg/tidepool_bg.wasm', 'pkg/tidepool.d.ts'].filter((f) => !existsSync(f));
if (missing.length) {
  console.error(`npm pack: ${missing.join(', ')} missing. Build the wasm package first: make pkg`);
  process.exit(1);
}

// Finds and loads the compiled addon. The only module in lib/ that touches the raw binding.
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import type { Binding } from './types.js';

/** The package root: the nearest folder above this file that holds package.json. */
export function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json'))) {
    const up = dirname(dir);
    if (up === dir) throw new Error(`mstar: no package.json above ${fileURLToPath(import.meta.url)}`);
    dir = up;
  }
  return dir;
}

let binding: Binding | undefined;

export function loadBinding(): Binding {
  if (binding) return binding;
  const root = packageRoot();
  const candidates = [join(root, 'build', 'Release', 'mstar.node')];
  const found = candidates.find((p) => existsSync(p));
  if (!found) {
    throw new Error(
      `mstar: the native addon is not built (looked for ${candidates.join(', ')}). Run \`npm install\` in ${root}.`,
    );
  }
  binding = createRequire(import.meta.url)(found) as Binding;
  return binding;
}

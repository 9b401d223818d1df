// The model that ships inside the package: `mstar serve` with no model serves it, with its two
// demo adapters, so a fresh machine (no GPU, no network) has something real to talk to.
import { join } from 'node:path';

import { packageRoot } from '../addon/loader.js';

export const DEMO_NAME = 'mstar-demo';

export function demoModel(): { model: string; adapters: { name: string; path: string }[] } {
  const assets = join(packageRoot(), 'lib', 'demo', 'assets');
  return {
    model: join(assets, 'model'),
    adapters: ['shout', 'gpl'].map((name) => ({ name, path: join(assets, 'adapters', name) })),
  };
}

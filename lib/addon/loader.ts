// Finds and loads the compiled addon. The only module in lib/ that touches the raw binding.
//
// node-gyp-build picks the file: build/Release/mstar.node (built from source: `npm install`
// in a checkout, `npm run build:native`), then build/Debug, then the prebuild that ships in the
// package, prebuilds/<platform>-<arch>/mstar.glibc.node. MSTAR_PREBUILD=DIR makes it look in DIR
// (another installed mstar package) instead of this package.
import { existsSync, readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

import { explainNoCuda } from './cuda_env.js';
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

interface NodeGypBuild {
  (dir: string): unknown;
  /** The path of the .node that fits this process; throws "No native build was found ...". */
  path(dir: string): string;
}

const require = createRequire(import.meta.url);

/** Where the addon was looked for and which file was picked. */
export interface AddonLocation {
  /** The folder whose build/ and prebuilds/ were searched (the package root or MSTAR_PREBUILD). */
  dir: string;
  /** The folders searched, in order. */
  searched: string[];
  /** The file node-gyp-build picked, if any. */
  path?: string;
  /** true when path is a shipped prebuild (prebuilds/...), false when it was built here. */
  prebuild?: boolean;
}

/** Which addon file this process loads (or would load), without loading it. */
export function locateAddon(): AddonLocation {
  const dir = process.env.MSTAR_PREBUILD || packageRoot();
  const platformDir = join(dir, 'prebuilds', `${process.platform}-${process.arch}`);
  const searched = [join(dir, 'build', 'Release'), join(dir, 'build', 'Debug'), platformDir];
  try {
    const path = (require('node-gyp-build') as NodeGypBuild).path(dir);
    return { dir, searched, path, prebuild: path.split(sep).includes('prebuilds') };
  } catch {
    return { dir, searched };
  }
}

/** What a folder holds, for an error message. */
function listing(dir: string): string {
  if (!existsSync(dir)) return 'missing';
  const files = readdirSync(dir).filter((f) => f.endsWith('.node'));
  return files.length > 0 ? `has ${files.join(', ')}, none fits` : 'no .node file';
}

let binding: Binding | undefined;
let loadedFrom: AddonLocation | undefined;

/** The location of the addon this process loaded (undefined before loadBinding succeeds). */
export function loadedAddon(): AddonLocation | undefined {
  return loadedFrom;
}

export function loadBinding(): Binding {
  if (binding) return binding;
  const where = locateAddon();
  if (where.path === undefined) {
    const root = packageRoot();
    throw new Error(
      `mstar: no native addon for ${process.platform}-${process.arch} (N-API ${process.versions.napi}) was found; looked in ` +
        `${where.searched.map((d) => `${d} (${listing(d)})`).join(', ')}. ` +
        (process.env.MSTAR_PREBUILD
          ? 'Unset MSTAR_PREBUILD or point it at an installed mstar package.'
          : `Run \`npm rebuild mstar\` (or \`npm install\` in ${root}) to build it from source: ` +
            'that needs CMake >= 3.18, a C++17 compiler, python3 and make (nvcc for the CUDA backend).'),
    );
  }
  let raw: Binding;
  try {
    raw = require(where.path) as Binding;
  } catch (e) {
    throw new Error(
      `mstar: cannot load the native addon ${where.path}${where.prebuild ? ' (prebuilt)' : ''}: ${(e as Error).message}` +
        (where.prebuild
          ? '. A prebuild that does not load here (an older glibc or libstdc++, say) is replaced by one built from source ' +
            'with `npm rebuild mstar --build-from-source`.'
          : ''),
    );
  }
  // The runtime's "cudaErrorInsufficientDriver" says neither what is missing nor where it was
  // looked for: add both (libcuda.so.1, the driver version this build needs) once, here.
  const devices = raw.cudaDevices;
  raw.cudaDevices = () => {
    const r = devices();
    return r.error === undefined ? r : { ...r, error: explainNoCuda(r.error, raw.buildInfo()) };
  };
  binding = raw;
  loadedFrom = where;
  return binding;
}

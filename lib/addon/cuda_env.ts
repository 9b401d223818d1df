// Where the CUDA libraries the addon needs at run time are on this machine — the driver
// (libcuda.so.1), cuBLASLt — looked for as the dynamic loader and the addon's dlopen shims
// look: LD_LIBRARY_PATH, CUDA_HOME / CUDA_PATH, the CUDA and system folders, the loader cache.
// Used to turn "cudaErrorInsufficientDriver" into what is missing, which version is needed and
// where it was looked for; and by `mstar doctor`.
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

import type { BuildInfo } from './types.js';

/** A shared library looked for by name. */
export interface LibraryLookup {
  name: string;
  found?: string;
  /** Folders searched before the loader cache (/etc/ld.so.cache), in order. */
  searched: string[];
}

/** This machine's names in library paths (x86_64) and in `ldconfig -p` (x86-64). */
const ARCH = process.arch === 'arm64'
  ? { dir: 'aarch64', cudaTarget: 'sbsa', ldconfig: 'AArch64' }
  : { dir: 'x86_64', cudaTarget: 'x86_64', ldconfig: 'x86-64' };

/** The folders searched, LD_LIBRARY_PATH first. */
export function libraryDirs(env: NodeJS.ProcessEnv = process.env): string[] {
  const dirs = (env.LD_LIBRARY_PATH ?? '').split(':').filter(Boolean);
  for (const v of [env.CUDA_HOME, env.CUDA_PATH]) if (v) dirs.push(join(v, 'lib64'), join(v, 'lib'));
  dirs.push(
    '/usr/local/cuda/lib64', '/usr/local/cuda/lib', `/usr/local/cuda/targets/${ARCH.cudaTarget}-linux/lib`,
    `/usr/lib/${ARCH.dir}-linux-gnu`, '/usr/lib64', '/usr/lib', '/usr/lib/wsl/lib',
  );
  return [...new Set(dirs)];
}

let ldCache: Map<string, string> | undefined;

/** soname → path from the loader cache (`ldconfig -p`); empty where there is no ldconfig. */
function loaderCache(): Map<string, string> {
  if (ldCache) return ldCache;
  ldCache = new Map();
  const ldconfig = ['/sbin/ldconfig', '/usr/sbin/ldconfig'].find((p) => existsSync(p));
  if (ldconfig) {
    const r = spawnSync(ldconfig, ['-p'], { encoding: 'utf8', timeout: 5000 });
    for (const line of (r.stdout ?? '').split('\n')) {
      const m = /^\s*(\S+) \(([^)]*)\) => (\S+)$/.exec(line);
      if (m && m[2].includes(ARCH.ldconfig) && !ldCache.has(m[1])) ldCache.set(m[1], m[3]);
    }
  }
  return ldCache;
}

/** The first of names found in libraryDirs(), then in the loader cache. */
export function findLibrary(names: string[], env: NodeJS.ProcessEnv = process.env): LibraryLookup {
  const searched = libraryDirs(env);
  for (const name of names) {
    for (const dir of searched) {
      const path = join(dir, name);
      if (existsSync(path)) return { name, found: path, searched };
    }
    const cached = loaderCache().get(name);
    if (cached) return { name, found: cached, searched };
  }
  return { name: names.join(' or '), searched };
}

/** "libX not found (looked in ...)" or the path. */
export function describeLookup(l: LibraryLookup, env: NodeJS.ProcessEnv = process.env): string {
  if (l.found) return l.found;
  const ld = env.LD_LIBRARY_PATH ? '' : 'LD_LIBRARY_PATH (unset), ';
  return `${l.name} not found (looked in ${ld}${l.searched.join(', ')} and the loader cache)`;
}

/** The loaded NVIDIA kernel module's version, from /proc/driver/nvidia/version. */
export function nvidiaDriver(): { version?: string; source?: string } {
  const source = '/proc/driver/nvidia/version';
  if (!existsSync(source)) return {};
  const m = /Kernel Module\s+(?:for \S+\s+)?(\d+\.\d+(?:\.\d+)?)/.exec(readFileSync(source, 'utf8'));
  return m ? { version: m[1], source } : { source };
}

// The oldest Linux driver of each CUDA major version (CUDA's minor version compatibility: a
// binary built with CUDA X.y runs on any driver of the X series from this one on).
const MIN_DRIVER: Record<number, string> = { 11: '450.80.02', 12: '525.60.13', 13: '580.65.06' };

/** The driver a build of the addon needs: CUDA major.minor and the oldest Linux driver for it. */
export function driverRequirement(build: Pick<BuildInfo, 'cuda' | 'cudaVersion'>): { cuda: string; minimum?: string } | undefined {
  if (!build.cuda || !build.cudaVersion) return undefined;
  const [major, minor] = build.cudaVersion.split('.');
  return { cuda: `${major}.${minor}`, minimum: MIN_DRIVER[Number(major)] };
}

export function describeRequirement(req: { cuda: string; minimum?: string }): string {
  return `a driver for CUDA ${req.cuda} or newer${req.minimum ? ` (R${req.minimum.split('.')[0]}+, ${req.minimum} or later)` : ''}`;
}

function olderThan(a: string, b: string): boolean {
  const x = a.split('.').map(Number);
  const y = b.split('.').map(Number);
  for (let i = 0; i < Math.max(x.length, y.length); i++) {
    if ((x[i] ?? 0) !== (y[i] ?? 0)) return (x[i] ?? 0) < (y[i] ?? 0);
  }
  return false;
}

/**
 * The runtime's reason for having no device, with what is missing: the driver library and
 * where it was looked for, or the driver's version against the one this build needs.
 */
export function explainNoCuda(error: string, build: BuildInfo): string {
  if (!build.cuda) return error;
  const req = driverRequirement(build);
  const needs = req ? `; this addon needs ${describeRequirement(req)}` : '';
  const notes: string[] = [];
  if (/InsufficientDriver|NoDevice|no CUDA-capable|driver/i.test(error)) {
    const libcuda = findLibrary(['libcuda.so.1']);
    const driver = nvidiaDriver();
    if (!libcuda.found) {
      notes.push(`the NVIDIA driver's ${describeLookup(libcuda)}${needs}`);
    } else if (driver.version && req?.minimum && olderThan(driver.version, req.minimum)) {
      notes.push(`the NVIDIA driver is ${driver.version} (${driver.source}), older than this addon needs: ${describeRequirement(req)}`);
    } else if (/InsufficientDriver/.test(error)) {
      notes.push(`the driver (${libcuda.found}${driver.version ? `, ${driver.version}` : ''}) is too old${needs}`);
    }
  }
  if (process.env.CUDA_VISIBLE_DEVICES !== undefined) notes.push(`CUDA_VISIBLE_DEVICES=${JSON.stringify(process.env.CUDA_VISIBLE_DEVICES)}`);
  return notes.length > 0 ? `${error} — ${notes.join('; ')}` : error;
}

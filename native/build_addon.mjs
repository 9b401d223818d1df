#!/usr/bin/env node
// Builds the addon from CMakeLists.txt (the one build definition) with cmake-js, then copies
// mstar.node to where node-gyp-build looks for it.
//
//   node native/build_addon.mjs [OUT]      OUT defaults to build/Release/mstar.node
//
// Called by `npm run build:native` (developers) and by binding.gyp's only action, so that
// node-gyp — which prebuildify and node-gyp-build's from-source fallback both run — builds
// through CMake too. cmake-js keeps its tree in build-cmake/, outside build/: `node-gyp rebuild`
// deletes build/ first, and a tree of its own keeps every rebuild incremental.
//
// Environment: MSTAR_CUDA=AUTO|ON|OFF, MSTAR_CUDA_ARCHITECTURES, MSTAR_CUDA_LINEINFO=ON (line
// info for profilers) and MSTAR_CUDA_STAMPS=ON (kernel stamps, bench/stamps.mjs) (CMake cache variables of the same names); MSTAR_BUILD_VERBOSE=1 streams CMake's output even when stdout is not a terminal
// (it is shown anyway when the build fails).
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readFileSync, realpathSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = dirname(dirname(realpathSync(fileURLToPath(import.meta.url))));
const out = resolve(process.argv[2] ?? join(root, 'build', 'Release', 'mstar.node'));
const tree = join(root, 'build-cmake');
const say = (line) => process.stdout.write(`mstar: ${line}\n`);

let cmakeJs;
try {
  const pkg = createRequire(join(root, 'package.json')).resolve('cmake-js/package.json');
  cmakeJs = join(dirname(pkg), 'bin', 'cmake-js');
} catch {
  console.error('mstar: cmake-js is not installed (it is a dependency of mstar: run `npm install` first)');
  process.exit(1);
}

// cmake-js's compile configures a new tree only: cache variables given here go through its
// configure first, so that an existing tree takes them too (and keeps them afterwards).
const defines = ['MSTAR_CUDA', 'MSTAR_CUDA_ARCHITECTURES', 'MSTAR_CUDA_LINEINFO', 'MSTAR_CUDA_STAMPS']
  .filter((name) => process.env[name]).map((name) => `--CD${name}=${process.env[name]}`);
const steps = [...(defines.length ? [['configure', ...defines]] : []), ['compile']];

const verbose = process.stdout.isTTY || process.env.MSTAR_BUILD_VERBOSE === '1';
say(`building the addon from CMakeLists.txt with cmake-js (tree: ${relative(process.cwd(), tree) || '.'})`);
let run, log = '';
for (const [command, ...extra] of steps) {
  run = spawnSync(process.execPath, [cmakeJs, command, '--directory', root, '--out', tree, ...extra], {
    cwd: root,
    stdio: verbose ? 'inherit' : ['ignore', 'pipe', 'pipe'],
    encoding: 'utf8',
    maxBuffer: 256 * 2 ** 20,
  });
  log += verbose ? '' : `${run.stdout ?? ''}${run.stderr ?? ''}`;
  if (run.status !== 0) break;
}
if (!verbose) {
  mkdirSync(tree, { recursive: true });
  writeFileSync(join(tree, 'build.log'), log);
}
if (run.status !== 0) {
  if (!verbose) process.stderr.write(log.split('\n').slice(-80).join('\n'));
  console.error(`\nmstar: the addon build failed (${run.error?.message ?? `cmake-js exited with ${run.status}`}). ` +
    'Building from source needs CMake >= 3.18 and a C++17 compiler (nvcc, CUDA >= 12, for the CUDA backend).');
  process.exit(1);
}

const built = join(tree, 'Release', 'mstar.node');
if (!existsSync(built)) {
  console.error(`mstar: cmake-js succeeded but ${built} is missing`);
  process.exit(1);
}
mkdirSync(dirname(out), { recursive: true });
// Copy then rename: a process that loads the addon meanwhile sees the old file or the new one.
copyFileSync(built, `${out}.tmp`);
renameSync(`${out}.tmp`, out);

// One line on what was built, read from the CMake cache of the tree.
const cache = readFileSync(join(tree, 'CMakeCache.txt'), 'utf8');
const entry = (name) => cache.match(new RegExp(`^${name}:[A-Z]+=(.*)$`, 'm'))?.[1];
const cudaSetting = (entry('MSTAR_CUDA') ?? 'AUTO').toUpperCase();
const nvcc = entry('CMAKE_CUDA_COMPILER');
if (cudaSetting === 'OFF') {
  say('MSTAR_CUDA=OFF; built the CPU backend only');
} else if (!nvcc || nvcc.endsWith('NOTFOUND')) {
  say('nvcc not found; building the CPU backend only (set CUDACXX or put nvcc on PATH for the CUDA backend)');
} else {
  say(`built with the CUDA backend (${nvcc}; architectures ${entry('MSTAR_CUDA_ARCHITECTURES') ?? 'default'})`);
}
say(`addon: ${out}`);

// Built from source inside someone's node_modules (node-gyp-build's fallback): the CMake tree
// (object files of every kernel) is of no further use there.
if (root.split(sep).includes('node_modules')) rmSync(tree, { recursive: true, force: true });

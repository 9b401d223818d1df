// The package as a user gets it: `npm run prebuild` (prebuildify → node-gyp → binding.gyp →
// cmake-js, incremental after `npm install` built the addon), `npm pack`, then `npm install` of
// the tarball into an empty project with a PATH that holds node, npm and sh only — no nvcc,
// cmake, make, python or C/C++ compiler — and `mstar serve` of the demo model answering one
// completion. A second install forces the from-source fallback with a PATH without nvcc: the
// build must be CPU-only and say so in one line.
//
// What the tarball may hold (package.json "files"): dist/lib, prebuilds/, the demo model
// (lib/demo/assets), README.md and LICENSE for users; binding.gyp, CMakeLists.txt, native/ and
// cuda/ sources for the from-source fallback. Nothing else: no test/, no build/ or build-cmake/,
// no lib/*.ts sources, no bench/.
//
// It runs last and alone (vitest.config.ts, project "package"): node-gyp clears build/ first.
import { spawn, spawnSync, type SpawnSyncReturns } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { packageRoot } from '../../lib/addon/loader.js';
import { fatbinEntries } from './fatbin.js';

const ROOT = packageRoot();
const PKG = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { name: string; version: string };
const TIMEOUT = 600_000; // a prebuild after native/ or cuda/ changed recompiles them (~1 min with nvcc)

interface PackResult { filename: string; size: number; unpackedSize: number; entryCount: number; files: { path: string }[] }

/** Runs a command, failing the test with its output when it exits non-zero. */
function run(cmd: string, args: string[], opts: { cwd: string; env?: NodeJS.ProcessEnv }): SpawnSyncReturns<string> {
  const r = spawnSync(cmd, args, { ...opts, encoding: 'utf8', maxBuffer: 64 * 2 ** 20 });
  if (r.status !== 0) {
    throw new Error(`${cmd} ${args.join(' ')} exited with ${r.status ?? r.signal} ${r.error?.message ?? ''}\n${r.stdout}\n${r.stderr}`);
  }
  return r;
}

/** Where a program is on PATH, if anywhere. */
function which(name: string, path = process.env.PATH ?? ''): string | undefined {
  return path.split(delimiter).filter(Boolean).map((d) => join(d, name)).find((p) => existsSync(p));
}

/** The environment of a user's shell: HOME and PATH, no npm_* variables of the outer `npm test`. */
function userEnv(path: string, extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { HOME: process.env.HOME, PATH: path, ...extra };
  if (process.env.npm_config_cache) env.npm_config_cache = process.env.npm_config_cache;
  return env;
}

/** An empty project that installs the tarball; returns the install's output. */
function installInto(dir: string, tarball: string, env: NodeJS.ProcessEnv): string {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: `${PKG.name}-install-check`, private: true }));
  const r = run('npm', ['install', tarball, '--prefer-offline', '--no-audit', '--no-fund', '--foreground-scripts'], { cwd: dir, env });
  return `${r.stdout}${r.stderr}`;
}

interface Doctor {
  addon: { path?: string; prebuild?: boolean; error?: string };
  build?: { cuda: boolean; cudaArchitectures?: string };
  verdict: { device: string };
}

function doctor(project: string, env: NodeJS.ProcessEnv): Doctor {
  const r = run(join(project, 'node_modules', '.bin', 'mstar'), ['doctor', '--json'], { cwd: project, env });
  return JSON.parse(r.stdout) as Doctor;
}

describe('the npm package', () => {
  const work = mkdtempSync(join(tmpdir(), 'mstar-pack-'));
  // node, npm, npx and sh: all that npm and mstar's install script need, and nothing to compile with.
  const bare = join(work, 'bin');
  let pack: PackResult;
  let tarball: string;
  const started = Date.now();

  beforeAll(() => {
    mkdirSync(bare);
    for (const name of ['node', 'npm', 'npx', 'sh']) {
      const target = which(name);
      if (!target) throw new Error(`${name} is not on PATH`);
      symlinkSync(target, join(bare, name));
    }
    const t0 = Date.now();
    run('npm', ['run', 'prebuild'], { cwd: ROOT });
    const t1 = Date.now();
    const out = run('npm', ['pack', '--json', '--pack-destination', work], { cwd: ROOT });
    pack = (JSON.parse(out.stdout) as PackResult[])[0];
    tarball = join(work, pack.filename);
    console.log(`prebuild ${((t1 - t0) / 1000).toFixed(1)} s, pack ${((Date.now() - t1) / 1000).toFixed(1)} s: ` +
      `${pack.filename}, ${(pack.size / 2 ** 20).toFixed(1)} MiB, ${pack.entryCount} files (${(pack.unpackedSize / 2 ** 20).toFixed(1)} MiB unpacked)`);
  }, TIMEOUT);

  afterAll(() => {
    console.log(`package test: ${((Date.now() - started) / 1000).toFixed(1)} s`);
    rmSync(work, { recursive: true, force: true });  // an installed package: seconds on a busy disk, past the default 10 s
  }, TIMEOUT);

  it('prebuilds/linux-x64 holds the N-API glibc addon, with sm_80 and sm_90 code and compute_80 PTX where nvcc is here', () => {
    const file = join(ROOT, 'prebuilds', `${process.platform}-${process.arch}`, `${PKG.name}.glibc.node`);
    expect(existsSync(file)).toBe(true);
    const code = new Set(fatbinEntries(file).map((e) => `${e.kind}:${e.sm}`));
    if (which('nvcc') || process.env.CUDACXX) expect([...code].sort()).toEqual(['elf:80', 'elf:90', 'ptx:80']);
    else expect(code.size).toBe(0);
  });

  it('the tarball holds dist, prebuilds, the demo model, README, licence and the sources to build from, nothing else', () => {
    const files = pack.files.map((f) => f.path);
    for (const want of [
      'package.json', 'README.md', 'LICENSE', 'binding.gyp', 'CMakeLists.txt', 'native/build_addon.mjs', 'native/addon.cc',
      'dist/lib/cli/main.js', 'dist/lib/addon/loader.js', 'dist/lib/addon/index.d.ts',
      `prebuilds/${process.platform}-${process.arch}/${PKG.name}.glibc.node`,
      'lib/demo/assets/model/model.safetensors', 'lib/demo/assets/model/tokenizer.json',
      'lib/demo/assets/adapters/shout/adapter_model.safetensors',
    ]) expect(files).toContain(want);
    // npm adds every README of a folder it walks (lib/demo/README.md, a few lines).
    const allowed = /^(package\.json|README\.md|LICENSE|binding\.gyp|CMakeLists\.txt|dist\/lib\/|prebuilds\/|lib\/demo\/assets\/|native\/|cuda\/)|(^|\/)README\.md$/;
    expect(files.filter((f) => !allowed.test(f))).toEqual([]);
    expect(files.filter((f) => /^(test|bench|build|build-cmake|dist\/bench)\//.test(f) || /^lib\/.*\.ts$/.test(f))).toEqual([]);
    // The heavy parts are the addon (~17 MB, CUDA kernels for three targets) and the demo (~14 MB).
    expect(pack.unpackedSize).toBeLessThan(64 * 2 ** 20);
  });

  it('installs into an empty project without a compiler and serves the demo model', async () => {
    const stripped = bare;
    for (const tool of ['nvcc', 'cmake', 'make', 'python3', 'g++', 'c++', 'gcc', 'cc']) expect(which(tool, stripped)).toBeUndefined();
    const project = join(work, 'prebuilt');
    const env = userEnv(stripped);
    const log = installInto(project, tarball, env);
    // node-gyp-build found the prebuild: no node-gyp, cmake-js or compiler ran.
    expect(log).toMatch(/> node-gyp-build/);
    expect(log).not.toMatch(/gyp info|cmake-js|building the addon/);
    const installed = join(project, 'node_modules', PKG.name);
    expect(existsSync(join(installed, 'build'))).toBe(false);
    expect(existsSync(join(installed, 'build-cmake'))).toBe(false);

    const d = doctor(project, env);
    expect(d.addon.error).toBeUndefined();
    expect(d.addon.prebuild).toBe(true);
    expect(d.addon.path).toBe(join(installed, 'prebuilds', `${process.platform}-${process.arch}`, `${PKG.name}.glibc.node`));
    if (which('nvcc')) expect(d.build).toMatchObject({ cuda: true, cudaArchitectures: '80-real,90a-real,80-virtual' });

    const server = spawn(join(project, 'node_modules', '.bin', 'mstar'), ['serve', '--port', '0'], { cwd: project, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    server.stdout.on('data', (b: Buffer) => { output += b.toString(); });
    server.stderr.on('data', (b: Buffer) => { output += b.toString(); });
    const exited = new Promise<number | null>((resolve) => server.on('exit', (code) => resolve(code)));
    try {
      const url = await new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`mstar serve did not start in 60 s:\n${output}`)), 60_000);
        server.stdout.on('data', () => {
          const m = /serving \S+ on (http:\/\/\S+)/.exec(output);
          if (m) {
            clearTimeout(timer);
            resolve(m[1]);
          }
        });
        server.on('exit', (code) => reject(new Error(`mstar serve exited with ${code}:\n${output}`)));
      });
      const res = await fetch(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'mstar-demo', prompt: 'Permission is hereby granted', max_tokens: 16, temperature: 0 }),
      });
      expect(res.status).toBe(200);
      const body = await res.json() as { choices: { text: string }[] };
      expect(body.choices[0].text.length).toBeGreaterThan(0);
      expect(body.choices[0].text).toMatch(/free of charge/);
    } finally {
      server.kill('SIGTERM');
    }
    expect(await exited).toBe(0);
  }, TIMEOUT);

  it('builds from source when asked, CPU-only without nvcc, saying so in one line', () => {
    // The machine's PATH less every folder that holds nvcc: cmake, make, python3 and g++ stay.
    const noNvcc = (process.env.PATH ?? '').split(delimiter).filter((d) => d && !existsSync(join(d, 'nvcc'))).join(delimiter);
    if (!which('cmake', noNvcc) || !which('make', noNvcc) || !which('c++', noNvcc)) {
      console.log('skipped: no cmake, make or c++ on this machine to build from source with');
      return;
    }
    const project = join(work, 'from-source');
    const env = userEnv(`${bare}${delimiter}${noNvcc}`, { npm_config_build_from_source: 'true' });
    const log = installInto(project, tarball, env);
    const lines = log.split('\n').filter((l) => /nvcc/.test(l));
    expect(lines).toEqual(['mstar: nvcc not found; building the CPU backend only (set CUDACXX or put nvcc on PATH for the CUDA backend)']);
    const installed = join(project, 'node_modules', PKG.name);
    expect(existsSync(join(installed, 'build', 'Release', `${PKG.name}.node`))).toBe(true);
    expect(existsSync(join(installed, 'build-cmake'))).toBe(false); // the CMake tree is removed inside node_modules
    const d = doctor(project, env);
    expect(d.addon.prebuild).toBe(false);
    expect(d.addon.path).toBe(join(installed, 'build', 'Release', `${PKG.name}.node`));
    expect(d.build?.cuda).toBe(false);
    expect(d.verdict.device).toBe('cpu');
    expect(dirname(d.addon.path!)).not.toContain('prebuilds');
  }, TIMEOUT);
});

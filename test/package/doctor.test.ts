// `mstar doctor` on whatever machine runs the tests (a GPU-less one in CI): it reports, never
// fails, and names what is missing with where it looked.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it, vi } from 'vitest';

import { describeLookup, explainNoCuda, findLibrary } from '../../lib/addon/cuda_env.js';
import { runCli } from '../../lib/cli/cli.js';
import type { DoctorReport } from '../../lib/cli/doctor.js';

async function cli(args: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const o = vi.spyOn(process.stdout, 'write').mockImplementation((s) => { out += String(s); return true; });
  const e = vi.spyOn(process.stderr, 'write').mockImplementation((s) => { err += String(s); return true; });
  try {
    return { code: await runCli(args), out, err };
  } finally {
    o.mockRestore();
    e.mockRestore();
  }
}

describe('mstar doctor', () => {
  const dir = mkdtempSync(join(tmpdir(), 'mstar-doctor-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('prints every section and a verdict, and exits 0', async () => {
    const { code, out } = await cli(['doctor']);
    expect(code).toBe(0);
    for (const row of ['mstar', 'node', 'addon', 'build', 'GPUs', 'driver', 'cuBLASLt', 'verdict']) {
      expect(out).toMatch(new RegExp(`^${row} +\\S`, 'm'));
    }
    expect(out).toMatch(/^verdict +device: auto → (cpu|cuda) \(/m);
  });

  it('--json: the addon in use, its build flags, devices, libraries', async () => {
    const { code, out } = await cli(['doctor', '--json']);
    expect(code).toBe(0);
    const r = JSON.parse(out) as DoctorReport;
    expect(r.addon.path).toMatch(/(build\/Release\/mstar\.node|prebuilds\/linux-x64\/mstar\.glibc\.node)$/);
    expect(r.addon.prebuild).toBe(r.addon.path!.includes('/prebuilds/'));
    expect(typeof r.build?.cuda).toBe('boolean');
    if (r.build?.cuda) expect(r.build.cudaArchitectures).toMatch(/^\d+a?(-real|-virtual)?(,\d+a?(-real|-virtual)?)*$/);
    expect(r.cudaDevices?.count).toBeGreaterThanOrEqual(0);
    expect(r.verdict.device).toBe(r.build?.cuda && r.cudaDevices!.count > 0 ? 'cuda' : 'cpu');
    if (r.cudaDevices!.count === 0) expect(r.cudaDevices!.error).toBeTruthy();
  });

  it('a bad flag is a usage error', async () => {
    const { code, err } = await cli(['doctor', '--bogus']);
    expect(code).toBe(2);
    expect(err).toMatch(/usage: mstar doctor/);
  });

  it('finds a library in LD_LIBRARY_PATH, and says where it looked when it does not', () => {
    writeFileSync(join(dir, 'libnccl.so.2'), '');
    const env = { LD_LIBRARY_PATH: dir };
    expect(findLibrary(['libnccl.so.2'], env).found).toBe(join(dir, 'libnccl.so.2'));
    const missing = findLibrary(['libmstar-none.so.7'], { LD_LIBRARY_PATH: dir, CUDA_HOME: '/opt/cuda-x' });
    expect(missing.found).toBeUndefined();
    expect(missing.searched.slice(0, 3)).toEqual([dir, '/opt/cuda-x/lib64', '/opt/cuda-x/lib']);
    expect(describeLookup(missing, { LD_LIBRARY_PATH: dir })).toMatch(/^libmstar-none\.so\.7 not found \(looked in .*\/opt\/cuda-x\/lib64.* and the loader cache\)$/);
  });

  it('explains a missing driver with the version this build needs', () => {
    const error = 'cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime version';
    expect(explainNoCuda(error, { cuda: false, cpuThreads: 1 })).toBe(error);
    const explained = explainNoCuda(error, { cuda: true, cpuThreads: 1, cudaVersion: '13.0.88' });
    expect(explained.startsWith(`${error} — `)).toBe(true);
    if (!findLibrary(['libcuda.so.1']).found) {
      expect(explained).toMatch(/libcuda\.so\.1 not found \(looked in .*\/usr\/lib\/x86_64-linux-gnu/);
    }
    expect(explained).toMatch(/needs:? a driver for CUDA 13\.0 or newer \(R580\+/);
  });
});

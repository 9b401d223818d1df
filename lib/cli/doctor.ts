// `mstar doctor`: what this machine and this install of mstar have — Node, the addon file in
// use and how it was built, GPUs, the NVIDIA driver, cuBLASLt — and which backend
// `device: auto` picks. The first thing to run when something is off; never fails (exit 0).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

import {
  describeLookup, describeRequirement, driverRequirement, findLibrary, nvidiaDriver, type LibraryLookup,
} from '../addon/cuda_env.js';
import { loadBinding, locateAddon, packageRoot, type AddonLocation } from '../addon/loader.js';
import type { BuildInfo, CudaLibraries } from '../addon/types.js';

export const DOCTOR_HELP = `usage: mstar doctor [--json]

Prints what mstar finds on this machine: Node.js, the native addon in use (a shipped
prebuild or one built here) and its build flags, CUDA devices, the NVIDIA driver,
cuBLASLt, and which backend \`device: auto\` will use.

options:
      --json   the same report as one JSON object
  -h, --help   show this help
`;

export interface DoctorReport {
  mstar: { version: string; root: string };
  node: { version: string; platform: string; arch: string; glibc?: string; napi: string };
  addon: AddonLocation & { error?: string };
  build?: BuildInfo;
  cudaDevices?: { count: number; error?: string };
  driver: { version?: string; source?: string; libcuda: LibraryLookup; needs?: string };
  cublasLt: CudaLibraries['cublasLt'] & { lookup?: LibraryLookup };
  verdict: { device: 'cuda' | 'cpu' | 'none'; why: string };
}

function glibcVersion(): string | undefined {
  const header = (process.report?.getReport() as { header?: { glibcVersionRuntime?: string } } | undefined)?.header;
  return header?.glibcVersionRuntime;
}

export function doctorReport(): DoctorReport {
  const root = packageRoot();
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string };
  const report: Omit<DoctorReport, 'verdict'> & { verdict?: DoctorReport['verdict'] } = {
    mstar: { version: pkg.version, root },
    node: {
      version: process.version, platform: process.platform, arch: process.arch, glibc: glibcVersion(),
      napi: process.versions.napi ?? '?',
    },
    addon: locateAddon(),
    driver: { libcuda: findLibrary(['libcuda.so.1']) },
    cublasLt: { loaded: false },
  };

  let addon: ReturnType<typeof loadBinding> | undefined;
  try {
    addon = loadBinding();
  } catch (e) {
    report.addon.error = (e as Error).message;
  }
  if (addon) {
    report.build = addon.buildInfo();
    report.cudaDevices = addon.cudaDevices();
    report.cublasLt = addon.cudaLibraries().cublasLt;
  }
  if (!report.cublasLt.loaded) report.cublasLt.lookup = findLibrary(['libcublasLt.so.13', 'libcublasLt.so.12']);

  Object.assign(report.driver, nvidiaDriver());
  const req = report.build && driverRequirement(report.build);
  if (req) report.driver.needs = describeRequirement(req);

  return { ...report, verdict: verdictOf(report) };
}

/** The same choice as the engine's device: auto (lib/engine/worker.ts): cuda when a device is usable. */
function verdictOf(r: Omit<DoctorReport, 'verdict'>): DoctorReport['verdict'] {
  if (!r.build) return { device: 'none', why: 'the native addon did not load (see addon above): nothing can run' };
  if (!r.build.cuda) {
    return { device: 'cpu', why: 'this addon was built without CUDA (nvcc was missing at build time)' };
  }
  if ((r.cudaDevices?.count ?? 0) > 0) {
    const lt = r.cublasLt.loaded ? 'with cuBLASLt' : 'without cuBLASLt (its own GEMM kernels; prefill is slower)';
    return { device: 'cuda', why: `${r.cudaDevices!.count} CUDA device(s) usable, ${lt}` };
  }
  // The short reason; the GPUs line has the runtime's error with where the driver was looked for.
  const reason = !r.driver.libcuda.found ? 'no NVIDIA driver (libcuda.so.1) found'
    : (r.cudaDevices?.error ?? 'none found').split(' — ')[0];
  return { device: 'cpu', why: `no usable CUDA device: ${reason}` };
}

export function formatDoctor(r: DoctorReport): string {
  const rows: [string, string][] = [];
  rows.push(['mstar', `${r.mstar.version} (${r.mstar.root})`]);
  rows.push(['node', `${r.node.version}, ${r.node.platform}-${r.node.arch}, ${r.node.glibc ? `glibc ${r.node.glibc}` : 'no glibc'}, N-API ${r.node.napi}`]);
  if (r.addon.path) {
    const kind = r.addon.prebuild ? 'a prebuild, from prebuilds/' : 'built from source on this machine, in build/';
    rows.push(['addon', `${r.addon.path} (${kind})`]);
  }
  if (r.addon.error) rows.push([r.addon.path ? '' : 'addon', r.addon.error]);
  if (r.build) {
    const cuda = r.build.cuda
      ? `CUDA ${r.build.cudaVersion ?? '?'} (${(r.build.cudaArchitectures ?? '?').split(',').join(', ')})`
      : 'no CUDA backend (built without nvcc)';
    rows.push(['build', `cpu backend (${r.build.cpuThreads} threads) + ${cuda}`]);
  }
  if (r.cudaDevices) {
    // The runtime's own words; what is missing, and where it was looked for, is under driver.
    const error = (r.cudaDevices.error ?? 'none found').split(' — ')[0];
    rows.push(['GPUs', r.cudaDevices.count > 0 ? `${r.cudaDevices.count} CUDA device(s)` : `none usable: ${error}`]);
  }
  const drv = r.driver.version ? `NVIDIA ${r.driver.version} (${r.driver.source})` : 'no NVIDIA kernel module loaded (no /proc/driver/nvidia/version)';
  rows.push(['driver', drv]);
  rows.push(['', `libcuda.so.1: ${describeLookup(r.driver.libcuda)}`]);
  if (r.driver.needs) rows.push(['', `this addon needs ${r.driver.needs}`]);
  if (r.cublasLt.loaded) {
    rows.push(['cuBLASLt', `${r.cublasLt.path} (version ${r.cublasLt.version})`]);
  } else {
    rows.push(['cuBLASLt', `not loaded: ${r.cublasLt.error ?? '?'}`]);
    if (r.cublasLt.lookup?.found) rows.push(['', `(a copy is at ${r.cublasLt.lookup.found})`]);
    rows.push(['', 'needs libcublasLt.so.13 or .so.12 (CUDA 13 / 12); without it linear uses its own kernels']);
  }
  rows.push(['verdict', `device: auto → ${r.verdict.device} (${r.verdict.why})`]);
  return rows.map(([k, v]) => `${k.padEnd(10)}${v}`).join('\n') + '\n';
}

export async function runDoctor(args: string[]): Promise<number> {
  let values: { json?: boolean; help?: boolean };
  try {
    ({ values } = parseArgs({ args, options: { json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } }, strict: true }));
  } catch (e) {
    process.stderr.write(`mstar doctor: ${(e as Error).message}\n\n${DOCTOR_HELP}`);
    return 2;
  }
  if (values.help) {
    process.stdout.write(DOCTOR_HELP);
    return 0;
  }
  const report = doctorReport();
  process.stdout.write(values.json ? `${JSON.stringify(report, null, 2)}\n` : formatDoctor(report));
  return 0;
}

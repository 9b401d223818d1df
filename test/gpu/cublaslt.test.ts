// The hand-written cuBLASLt ABI of native/cublaslt_abi.h against NVIDIA's header, where
// a CUDA toolkit with cublasLt.h and a C++ compiler are installed (the GPU machine).
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { expect, it } from 'vitest';

const here = dirname(fileURLToPath(import.meta.url));
const cudaHome = process.env.CUDA_HOME ?? process.env.CUDA_PATH ?? '/usr/local/cuda';
const include = join(cudaHome, 'include');
const header = join(include, 'cublasLt.h');

function compiler(): string | undefined {
  for (const cxx of [process.env.CXX, 'g++', 'c++', 'clang++']) {
    if (!cxx) continue;
    try {
      execFileSync(cxx, ['--version'], { stdio: 'ignore' });
      return cxx;
    } catch {
      // not this one
    }
  }
  return undefined;
}

it('native/cublaslt_abi.h matches cublasLt.h', (ctx) => {
  const cxx = compiler();
  if (!existsSync(header) || !cxx) {
    console.warn(`cublasLt ABI check skipped: ${existsSync(header) ? 'no C++ compiler' : `no ${header}`}`);
    ctx.skip();
    return;
  }
  const args = ['-std=c++17', '-fsyntax-only', '-I', include, '-I', join(here, '../../native'), join(here, 'cublaslt_abi.cc')];
  let output = '';
  try {
    execFileSync(cxx, args, { encoding: 'utf8', stdio: 'pipe' });
  } catch (e) {
    output = String((e as { stderr?: string }).stderr ?? e);
  }
  expect(output).toBe('');
});

// The default test run: everything but test/gpu, which needs a CUDA device and runs
// with vitest.gpu.config.ts. test/package runs last, alone: it rebuilds the addon into
// prebuilds/ (node-gyp clears build/ first), which no other test file may see half done.
import { configDefaults, defineConfig } from 'vitest/config';

const exclude = [...configDefaults.exclude, '**/node_modules/**', 'dist/**', 'test/gpu/**'];

export default defineConfig({
  test: {
    projects: [
      { extends: true, test: { name: 'unit', exclude: [...exclude, 'test/package/**'], sequence: { groupOrder: 0 } } },
      {
        extends: true,
        test: { name: 'package', include: ['test/package/**/*.test.ts'], exclude, sequence: { groupOrder: 1 }, fileParallelism: false },
      },
    ],
  },
});

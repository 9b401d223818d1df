// The default test run: everything but test/gpu, which needs a CUDA device and runs
// with vitest.gpu.config.ts.
import { configDefaults, defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    exclude: [...configDefaults.exclude, '**/node_modules/**', 'dist/**', 'test/gpu/**'],
  },
});

// test/gpu only: the CUDA backend op by op against the CPU backend. Skips itself, with a
// message, where addon.cudaDevices().count is 0.
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/gpu/**/*.test.ts'],
    testTimeout: 300_000,
    hookTimeout: 300_000,
    // One process: every file shares the GPU and the addon's one stream anyway.
    fileParallelism: false,
  },
});

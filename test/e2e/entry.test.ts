// package.json's main: the compiled entry exposes what an embedding program needs.
import { describe, expect, it } from 'vitest';

describe('the package entry (dist/lib/index.js)', () => {
  it('exports the engine, the app builder and the config loader', async () => {
    const m = await import('../../dist/lib/index.js') as Record<string, unknown>;
    for (const name of ['EngineClient', 'buildApp', 'loadServeConfig', 'engineOptionsOf', 'Tokenizer', 'readModelConfig', 'openCheckpoint']) {
      expect(typeof m[name], name).toBe('function');
    }
  });
});

// A forward pass on a preallocated Workspace (what CUDA graphs replay) computes exactly what
// a forward pass with its own buffers does, LoRA rows included, for steps smaller than the
// workspace; and the workspace refuses a step larger than it was sized for.
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

import { ALL_TARGETS } from '../../lib/lora/adapter.js';
import { LoraManager } from '../../lib/lora/manager.js';
import { KvCache, loadModel, stepTensors, type Model, type StepInput } from '../../lib/models/index.js';
import { Workspace } from '../../lib/models/workspace.js';
import { FIXTURES } from '../parity/fixture.js';

const BS = 16;

/** One prefill step over `prompts` (each in its own 4 blocks), rows running `slots`. */
function step(prompts: number[][], slots: number[], vocab: number): StepInput {
  const tokens = prompts.flat();
  const starts = [0];
  prompts.forEach((p) => starts.push(starts.at(-1)! + p.length));
  const rowSlots = Int32Array.from(prompts.flatMap((p, i) => p.map(() => slots[i])));
  return {
    tokens: Int32Array.from(tokens),
    positions: Int32Array.from(prompts.flatMap((p) => p.map((_, j) => j))),
    slots: Int32Array.from(prompts.flatMap((p, i) => p.map((_, j) => i * 4 * BS + j))),
    queryStarts: Int32Array.from(starts),
    contextLens: Int32Array.from(prompts.map((p) => p.length)),
    blockTables: Int32Array.from(prompts.flatMap((_, i) => [0, 1, 2, 3].map((b) => i * 4 + b))),
    maxBlocks: 4,
    logitRows: Int32Array.from(starts.slice(1).map((s) => s - 1)),
    lora: {
      rowSlots, logitSlots: Int32Array.from(slots),
      embedRows: Int32Array.from(tokens.map((tok, r) => rowSlots[r] * vocab + tok)),
    },
  };
}

function logits(model: Model, s: StepInput, ws?: Workspace): Float32Array {
  const kv = new KvCache(model.config, 16, BS);
  const t = stepTensors(s);
  const out = model.forward(t, kv, ws);
  const values = out.toArray() as Float32Array;
  [t, out, kv].forEach((x) => x.dispose());
  return values;
}

describe('forward on a workspace', () => {
  for (const name of ['tiny-qwen3', 'tiny-llama']) {
    it(`${name}: the same logits as with fresh buffers, base and adapter rows`, async () => {
      const model = loadModel(join(FIXTURES, 'models', name), { dtype: 'f32' });
      const lora = new LoraManager(model, { slots: 2, maxRank: 16, hostCache: 2, targets: ALL_TARGETS });
      await lora.register('a', join(FIXTURES, 'adapters', name, 'all-r8-rslora'));
      await lora.register('b', join(FIXTURES, 'adapters', name, 'embed-head'));
      const a = lora.acquire(lora.keyOf('a')!) as number;
      const b = lora.acquire(lora.keyOf('b')!) as number;
      expect(a).toBeGreaterThan(0);
      expect(b).toBeGreaterThan(0);
      model.lora = lora.weights;
      const vocab = model.config.vocabSize;
      const s = step([[5, 9, 200, 31, 7], [100, 3, 3, 4], [42]], [a, 0, b], vocab);
      const ws = new Workspace(model.config, model.placement, 16, 4, lora.weights.widths);
      const want = logits(model, s);
      expect(logits(model, s, ws)).toEqual(want);
      // Again on the same (now dirty) buffers.
      expect(logits(model, s, ws)).toEqual(want);
      // Without LoRA rows (no plan), too.
      const base = { ...s, lora: undefined };
      expect(logits(model, base, ws)).toEqual(logits(model, base));
      ws.dispose();
      model.lora = undefined;
      model.dispose();
    });
  }

  it('refuses a step larger than the workspace', () => {
    const model = loadModel(join(FIXTURES, 'models', 'tiny-qwen3'), { dtype: 'f32' });
    const ws = new Workspace(model.config, model.placement, 4, 2);
    const s = step([[1, 2, 3], [4, 5]], [0, 0], model.config.vocabSize);
    expect(() => logits(model, { ...s, lora: undefined }, ws)).toThrow(/workspace: residual holds/);
    ws.dispose();
    model.dispose();
  });

  it('hands out one view a shape, remakes one a caller disposed, and frees past views over a bound', () => {
    const model = loadModel(join(FIXTURES, 'models', 'tiny-qwen3'), { dtype: 'f32' });
    const ws = new Workspace(model.config, model.placement, 8, 2);
    const a = ws.take('x', 4, 8);
    expect(ws.take('x', 4, 8)).toBe(a);
    expect(a.shape).toEqual([4, 8]);
    const b = ws.take('x', 2, 8);
    expect(b).not.toBe(a);
    expect(a.disposed).toBe(false);  // views of one buffer in other shapes live side by side
    a.dispose();
    const again = ws.take('x', 4, 8);
    expect(again).not.toBe(a);
    expect(again.disposed).toBe(false);
    // Past the bound, a step's start frees them all; under it, none.
    ws.trimViews();
    expect(again.disposed).toBe(false);
    for (let rows = 1; rows <= 8; rows++) for (let cols = 1; cols <= 9; cols++) ws.take('x', rows, cols);
    ws.trimViews();
    expect(again.disposed).toBe(true);
    expect(b.disposed).toBe(true);
    expect(ws.take('x', 4, 8).disposed).toBe(false);
    ws.dispose();
    model.dispose();
  });
});

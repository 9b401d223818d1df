// Each row's adapter delta equals serving merged weights W + s·B·A, per target, exactly
// (fp32 on both sides), and rows of other slots (or slot 0) are untouched: by the per-row
// kernels, and by GEMMs over every slot at once (what prefill-sized steps use).
import { ALL_TARGETS } from '../../lib/lora/adapter.js';
import { describe, expect, it } from 'vitest';

import { addon } from '../../lib/addon/index.js';
import { LoraManager } from '../../lib/lora/manager.js';
import { loadModel } from '../../lib/models/index.js';
import { locateModule } from '../../lib/checkpoint/locate.js';
import { FIXTURES } from '../parity/fixture.js';
import { relativeError } from '../parity/greedy_rule.js';
import { delta, writeAdapter, type ModuleSpec } from './make_adapter.js';
import { logits } from './step_logits.js';

const ALL = ALL_TARGETS;

describe('LoRA equals merged weights', () => {
  const dir = `${FIXTURES}/models/tiny-llama`;
  const base = loadModel(dir, { dtype: 'f32' });
  const c = base.config;
  const vocab = c.vocabSize;
  const prompts = [[5, 9, 200, 31, 7], [100, 3, 3, 4], [42]];

  const spec = (path: string, rank: number): ModuleSpec => {
    const loc = locateModule(c, c.family, path)!;
    return loc.kind === 'embedding'
      ? { path, rank, in: loc.rows, out: loc.cols!, embedding: true }
      : { path, rank, in: loc.cols!, out: loc.rows };
  };

  const cases: [string, ModuleSpec[], Record<string, unknown>, number][] = [
    ['k_proj only (one slice of the fused qkv)', [spec('model.layers.1.self_attn.k_proj', 4)], { r: 4, lora_alpha: 8, target_modules: ['k_proj'] }, 2],
    ['every linear, rsLoRA', ['q_proj', 'k_proj', 'v_proj', 'o_proj'].flatMap((m) => [0, 1, 2].map((l) => spec(`model.layers.${l}.self_attn.${m}`, 8)))
      .concat(['gate_proj', 'up_proj', 'down_proj'].flatMap((m) => [0, 1, 2].map((l) => spec(`model.layers.${l}.mlp.${m}`, 8)))),
      { r: 8, lora_alpha: 16, use_rslora: true, target_modules: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] }, 16 / Math.sqrt(8)],
    ['embed_tokens and lm_head', [spec('model.embed_tokens', 4), spec('lm_head', 4)], { r: 4, lora_alpha: 2, target_modules: ['embed_tokens', 'lm_head'] }, 0.5],
  ];

  for (const [label, modules, config, scale] of cases) for (const gemmRows of [Infinity, 1]) {
    it(`${label}, ${gemmRows === 1 ? 'GEMMs over every slot' : 'per-row kernels'}`, async () => {
      base.loraGemmRows = gemmRows;
      const { dir: adapterDir, modules: made } = await writeAdapter(modules, config);
      const lora = new LoraManager(base, { slots: 2, maxRank: 16, hostCache: 2, targets: ALL });
      await lora.register('a', adapterDir);
      const slot = lora.acquire(lora.keyOf('a')!) as number;
      base.lora = lora.weights;
      const withLora = logits(base, prompts, [slot, 0, slot], vocab);
      base.lora = undefined;
      lora.release(slot);

      const merged = loadModel(dir, { dtype: 'f32' });
      for (const m of made) {
        const loc = locateModule(c, c.family, m.path)!;
        const w = merged.weights.get(loc.engine)!;
        const values = w.toArray() as Float32Array;
        const d = delta(m, scale);
        const offset = loc.rowOffset * (loc.cols ?? 1);
        for (let i = 0; i < d.length; i++) values[offset + i] += d[i];
        w.copyFrom(values);
      }
      const want = logits(merged, prompts, [0, 0, 0], vocab);
      const plain = logits(base, prompts, [0, 0, 0], vocab);
      expect(relativeError(withLora[0], want[0])).toBeLessThan(1e-5);
      expect(relativeError(withLora[2], want[2])).toBeLessThan(1e-5);
      expect(relativeError(withLora[1], plain[1])).toBe(0);  // slot 0 row: exactly the base model
      expect(relativeError(withLora[0], plain[0])).toBeGreaterThan(1e-3);  // the adapter did something
      merged.dispose();
      lora.weights.dispose();
      base.loraGemmRows = 1024;
    });
  }

  // A slot load copies the adapter's image to the device unless it was staged ahead
  // (LoraManager.prepareTurn): whatever was staged, and in whichever order, each slot must
  // end up with its own adapter.
  it('images staged ahead, superseded by another load or not, land each adapter in its own slot', async () => {
    const targets = ['q_proj', 'v_proj', 'down_proj'];
    const modules = (rank: number) => [spec('model.layers.0.self_attn.q_proj', rank), spec('model.layers.2.self_attn.v_proj', rank), spec('model.layers.1.mlp.down_proj', rank)];
    const one = await writeAdapter(modules(8), { r: 8, lora_alpha: 16, target_modules: targets }, 11);
    const two = await writeAdapter(modules(4), { r: 4, lora_alpha: 4, target_modules: targets }, 12);
    const run = async (staged: boolean) => {
      const lora = new LoraManager(base, { slots: 2, maxRank: 16, hostCache: 2, targets: ALL });
      await lora.register('one', one.dir);
      await lora.register('two', two.dir);
      const [k1, k2] = [lora.keyOf('one')!, lora.keyOf('two')!];
      if (staged) lora.prepareTurn(k2);  // superseded by one's load
      const a = lora.acquire(k1) as number;
      if (staged) [k1, k2].forEach((k) => lora.prepareTurn(k));  // two's load then skips its copy
      const b = lora.acquire(k2) as number;
      base.lora = lora.weights;
      const out = logits(base, prompts, [a, 0, b], vocab);
      base.lora = undefined;
      lora.dispose();
      return out;
    };
    const [staged, plain] = [await run(true), await run(false)];
    staged.forEach((l, i) => expect(relativeError(l, plain[i])).toBe(0));
    expect(relativeError(staged[0], staged[2])).toBeGreaterThan(1e-3);  // two different adapters, both applied
  });

  // The GEMM path multiplies every slot's padding, so a slot must hold zeros wherever its
  // adapter has nothing, even after a larger adapter held it (the kernels skip by rank).
  it('a slot that held a full rank-16 adapter, then a partial rank-4 one: both paths equal merged weights', async () => {
    const layers = [0, 1, 2];
    const every = ['q_proj', 'k_proj', 'v_proj', 'o_proj'].flatMap((m) => layers.map((l) => spec(`model.layers.${l}.self_attn.${m}`, 16)))
      .concat(['gate_proj', 'up_proj', 'down_proj'].flatMap((m) => layers.map((l) => spec(`model.layers.${l}.mlp.${m}`, 16))))
      .concat([spec('model.embed_tokens', 16), spec('lm_head', 16)]);
    const full = await writeAdapter(every, { r: 16, lora_alpha: 16, target_modules: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj', 'embed_tokens', 'lm_head'] }, 3);
    const partialModules = ['model.layers.1.self_attn.q_proj', 'model.layers.1.self_attn.v_proj', 'model.layers.0.mlp.gate_proj', 'lm_head'].map((p) => spec(p, 4));
    const partial = await writeAdapter(partialModules, { r: 4, lora_alpha: 8, target_modules: ['q_proj', 'v_proj', 'gate_proj', 'lm_head'] }, 5);
    const lora = new LoraManager(base, { slots: 1, maxRank: 16, hostCache: 2, targets: ALL });
    await lora.register('full', full.dir);
    await lora.register('partial', partial.dir);
    const first = lora.acquire(lora.keyOf('full')!) as number;
    lora.settle();
    lora.release(first);
    lora.tick();
    let slot = lora.acquire(lora.keyOf('partial')!);
    for (let i = 0; i < 50 && typeof slot !== 'number'; i++) {
      await new Promise((r) => setTimeout(r, 10));
      lora.tick();
      slot = lora.acquire(lora.keyOf('partial')!);
    }
    expect(slot).toBe(first);
    base.lora = lora.weights;
    const run = (gemmRows: number) => {
      base.loraGemmRows = gemmRows;
      return logits(base, prompts, [slot as number, 0, slot as number], vocab);
    };
    const [byGemms, byKernels] = [run(1), run(Infinity)];
    base.lora = undefined;
    base.loraGemmRows = 1024;
    const merged = loadModel(dir, { dtype: 'f32' });
    for (const m of partial.modules) {
      const loc = locateModule(c, c.family, m.path)!;
      const w = merged.weights.get(loc.engine)!;
      const values = w.toArray() as Float32Array;
      const d = delta(m, 2);
      const offset = loc.rowOffset * (loc.cols ?? 1);
      for (let i = 0; i < d.length; i++) values[offset + i] += d[i];
      w.copyFrom(values);
    }
    const want = logits(merged, prompts, [0, 0, 0], vocab);
    for (const i of [0, 2]) {
      expect(relativeError(byKernels[i], want[i])).toBeLessThan(1e-5);
      expect(relativeError(byGemms[i], want[i])).toBeLessThan(1e-5);
    }
    merged.dispose();
    lora.weights.dispose();
  });
});

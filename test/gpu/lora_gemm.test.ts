// A prefill-sized step's adapters by a GEMM shrink over every slot at once (the path steps of
// many rows take) against the per-row shrink kernels, on CUDA in bf16, and both against the CPU's fp32
// logits: rows of two adapters and of none, fused q/k/v and gate/up slices. Adapter rows must
// be as close to the CPU as the kernels' (bf16 rounding differs between the two).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';

import { ALL_TARGETS } from '../../lib/lora/adapter.js';
import { LoraManager } from '../../lib/lora/manager.js';
import { cudaPlacement, KvCache, loadModel, stepTensors, type Model } from '../../lib/models/index.js';
import { FIXTURES } from '../parity/fixture.js';
import { relativeError } from '../parity/greedy_rule.js';
import { describeGpu } from './helpers.js';

const MODEL = 'tiny-qwen3';
const BS = 16, BLOCKS = 4;

/** Last-token logits of each prompt, prompt i running slots[i], in one step. */
function logits(model: Model, prompts: number[][], slots: number[]): Float32Array[] {
  const vocab = model.config.vocabSize;
  const kv = new KvCache(model.config, prompts.length * BLOCKS, BS, model.placement);
  const starts = [0];
  prompts.forEach((p) => starts.push(starts.at(-1)! + p.length));
  const tokens = prompts.flat();
  const rowSlots = Int32Array.from(prompts.flatMap((p, i) => p.map(() => slots[i])));
  const t = stepTensors({
    tokens: Int32Array.from(tokens),
    positions: Int32Array.from(prompts.flatMap((p) => p.map((_, j) => j))),
    slots: Int32Array.from(prompts.flatMap((p, i) => p.map((_, j) => i * BLOCKS * BS + j))),
    queryStarts: Int32Array.from(starts), contextLens: Int32Array.from(prompts.map((p) => p.length)),
    blockTables: Int32Array.from(prompts.flatMap((_, i) => Array.from({ length: BLOCKS }, (_, b) => i * BLOCKS + b))), maxBlocks: BLOCKS,
    logitRows: Int32Array.from(starts.slice(1).map((s) => s - 1)),
    lora: { rowSlots, logitSlots: Int32Array.from(slots), embedRows: Int32Array.from(tokens, (tok, r) => rowSlots[r] * vocab + tok) },
  }, model.placement.device);
  const out = model.forward(t, kv);
  const all = out.to('cpu');
  const values = all.toArray() as Float32Array;
  [t, out, all, kv].forEach((x) => x.dispose());
  return prompts.map((_, i) => values.slice(i * vocab, (i + 1) * vocab));
}

/** The model with two of the fixture's adapters in slots; returns their slots. */
async function withAdapters(model: Model): Promise<{ slots: number[]; close(): void }> {
  const fx = JSON.parse(readFileSync(join(FIXTURES, 'parity', `lora-${MODEL}.json`), 'utf8')) as { adapters: Record<string, { path: string }> };
  const names = Object.keys(fx.adapters).slice(0, 2);
  const lora = new LoraManager(model, { slots: 2, maxRank: 16, hostCache: 2, targets: ALL_TARGETS });
  for (const n of names) await lora.register(n, join(FIXTURES, fx.adapters[n].path));
  const slots = names.map((n) => lora.acquire(lora.keyOf(n)!) as number);
  model.lora = lora.weights;
  return { slots, close: () => { model.lora = undefined; lora.dispose(); } };
}

describeGpu('LoRA by GEMMs over every slot', () => {
  it('equals the per-row kernels (bf16) and the CPU (fp32) for two adapters and base rows', async () => {
    const prompts = [0, 1, 2, 3].map((i) => Array.from({ length: 40 + 7 * i }, (_, j) => 3 + ((i * 131 + j * 17) % 400)));
    const dir = join(FIXTURES, 'models', MODEL);
    const cuda = loadModel(dir, { placement: cudaPlacement('bf16') }), cpu = loadModel(dir, { dtype: 'f32' });
    const [onCuda, onCpu] = [await withAdapters(cuda), await withAdapters(cpu)];
    const [s1, s2] = onCuda.slots;
    const rowSlots = [s1, s1, 0, s2];
    const run = (m: Model, gemmRows: number) => {
      m.loraGemmRows = gemmRows;
      return logits(m, prompts, rowSlots);
    };
    const byGemms = run(cuda, 1), byKernels = run(cuda, Infinity), want = run(cpu, Infinity), plain = logits(cpu, prompts, [0, 0, 0, 0]);
    const errors = prompts.map((_, i) => ({
      gemms: relativeError(byGemms[i], want[i]), kernels: relativeError(byKernels[i], want[i]),
      apart: relativeError(byGemms[i], byKernels[i]), adapter: relativeError(want[i], plain[i]),
    }));
    errors.forEach((e, i) => console.log(`prompt ${i} (slot ${rowSlots[i]}): against the CPU, GEMMs ${e.gemms.toExponential(2)}, ` +
      `kernels ${e.kernels.toExponential(2)}; GEMMs against kernels ${e.apart.toExponential(2)}; the adapter moves the CPU's by ${e.adapter.toExponential(2)}`));
    errors.forEach((e, i) => {
      // Both paths add the adapter inside the projection's one GEMM; their shrinks (a GEMM, the
      // per-row kernels) sum in other orders: as close as the per-row path, within a factor.
      expect(e.gemms, `prompt ${i}`).toBeLessThan(Math.max(2 * e.kernels, 2e-2));
      // Base rows: the same ops but the norms, which the kernel path fuses with its shrink.
      if (rowSlots[i] === 0) expect(e.apart, `prompt ${i}: a base row`).toBeLessThan(1e-2);
    });
    onCuda.close();
    onCpu.close();
    cuda.dispose();
    cpu.dispose();
  });

  // B beside W takes W's dtype: with f16 weights under bf16 activations an adapter's image has
  // two parts (A in bf16, B in f16), each through its own staging tensor into the slot.
  it('f16 weights under bf16 activations: an image in two dtypes gives the CPU\'s logits as bf16 weights do', async () => {
    const prompts = [0, 1, 2].map((i) => Array.from({ length: 9 + 5 * i }, (_, j) => 3 + ((i * 97 + j * 29) % 400)));
    const dir = join(FIXTURES, 'models', MODEL);
    const cpu = loadModel(dir, { dtype: 'f32' });
    const onCpu = await withAdapters(cpu);
    const rowSlots = [onCpu.slots[0], 0, onCpu.slots[1]];
    const want = logits(cpu, prompts, rowSlots), plain = logits(cpu, prompts, [0, 0, 0]);
    const errors = (dtype: 'bf16' | 'f16') => {
      const cuda = loadModel(dir, { placement: cudaPlacement('bf16'), dtype });
      return withAdapters(cuda).then((on) => {
        const parts = [...cuda.lora!.layout.sizes.keys()].sort();
        const got = logits(cuda, prompts, rowSlots);
        on.close();
        cuda.dispose();
        return { parts, errors: got.map((g, i) => relativeError(g, want[i])) };
      });
    };
    const [f16, bf16] = [await errors('f16'), await errors('bf16')];
    expect(f16.parts).toEqual(['bf16', 'f16']);
    expect(bf16.parts).toEqual(['bf16']);
    f16.errors.forEach((e, i) => {
      console.log(`prompt ${i} (slot ${rowSlots[i]}): against the CPU, f16 weights ${e.toExponential(2)}, bf16 weights ${bf16.errors[i].toExponential(2)}`);
      expect(e, `prompt ${i}`).toBeLessThan(Math.max(2 * bf16.errors[i], 2e-2));
    });
    // The adapters did something the comparison would see.
    [0, 2].forEach((i) => expect(relativeError(want[i], plain[i])).toBeGreaterThan(5 * Math.max(f16.errors[i], 1e-3)));
    onCpu.close();
    cpu.dispose();
  });
});

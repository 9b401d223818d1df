// One forward step of several prompts, each running its own adapter slot, on a model with a
// pool: the last-token logits of each (the LoRA tests compare them across paths).
import { KvCache, stepTensors, type Model } from '../../lib/models/index.js';

/** Last-token logits of each prompt, every prompt running `slot` (one batch). */
export function logits(model: Model, prompts: number[][], slots: number[], vocab: number): Float32Array[] {
  const bs = 16;
  const kv = new KvCache(model.config, prompts.length * 8, bs);
  const tokens = prompts.flat();
  const starts = [0];
  prompts.forEach((p) => starts.push(starts.at(-1)! + p.length));
  const rowSlots = Int32Array.from(prompts.flatMap((p, i) => p.map(() => slots[i])));
  const t = stepTensors({
    tokens: Int32Array.from(tokens),
    positions: Int32Array.from(prompts.flatMap((p) => p.map((_, j) => j))),
    slots: Int32Array.from(prompts.flatMap((p, i) => p.map((_, j) => i * 8 * bs + j))),
    queryStarts: Int32Array.from(starts), contextLens: Int32Array.from(prompts.map((p) => p.length)),
    blockTables: Int32Array.from(prompts.flatMap((_, i) => Array.from({ length: 8 }, (_, b) => i * 8 + b))), maxBlocks: 8,
    logitRows: Int32Array.from(starts.slice(1).map((s) => s - 1)),
    lora: {
      rowSlots, logitSlots: Int32Array.from(slots),
      embedRows: Int32Array.from(tokens.map((tok, r) => rowSlots[r] * vocab + tok)),
    },
  });
  const out = model.forward(t, kv);
  const all = out.toArray() as Float32Array;
  [t, out, kv].forEach((x) => x.dispose());
  return prompts.map((_, i) => all.slice(i * vocab, (i + 1) * vocab));
}

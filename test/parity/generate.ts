// Greedy generation straight on a model (no scheduler): several sequences batched in one
// step, prompts prefilled in chunks over non-contiguous blocks, then decoded together.
import { addon } from '../../lib/addon/index.js';
import { KvCache, stepTensors, type Model, type StepInput } from '../../lib/models/index.js';

export interface Generation {
  ids: number[];
  top: [number, number][][];
  logits: Float32Array[];
}

interface Seq {
  tokens: number[];   // prompt + generated
  cached: number;     // tokens already in the KV cache
  blocks: number[];
  out: Generation;
}

export interface GenerateOptions {
  newTokens: number;
  blockSize: number;
  /** Prefill at most this many tokens of a sequence per step. */
  chunk: number;
  topK: number;
}

export function generateGreedy(model: Model, prompts: number[][], o: GenerateOptions): Generation[] {
  const maxLen = Math.max(...prompts.map((p) => p.length)) + o.newTokens;
  const blocksPerSeq = Math.ceil(maxLen / o.blockSize);
  const numBlocks = blocksPerSeq * prompts.length;
  // Interleave block ids across sequences so no sequence's blocks are contiguous.
  const seqs: Seq[] = prompts.map((p, s) => ({
    tokens: [...p], cached: 0, out: { ids: [], top: [], logits: [] },
    blocks: Array.from({ length: blocksPerSeq }, (_, b) => numBlocks - 1 - (b * prompts.length + s)),
  }));
  const kv = new KvCache(model.config, numBlocks, o.blockSize);
  try {
    while (seqs.some((s) => s.out.ids.length < o.newTokens)) {
      const active = seqs.filter((s) => s.out.ids.length < o.newTokens);
      const input = buildStep(active, o);
      const t = stepTensors(input);
      const logits = model.forward(t, kv);
      t.dispose();
      const rows = logits.shape[0];
      const vocab = logits.shape[1];
      const all = logits.toArray() as Float32Array;
      const chosen = addon.empty('i32', [rows]);
      const zeros = (dtype: 'f32' | 'i32', v = 0) => addon.fromArray(dtype, [rows], dtype === 'f32' ? new Float32Array(rows).fill(v) : new Int32Array(rows).fill(v));
      addon.sample(chosen, logits, zeros('f32'), zeros('i32'), zeros('f32', 1), addon.zeros('i64', [rows]), zeros('i32'));
      const lp = addon.empty('f32', [rows]), topIds = addon.empty('i32', [rows, o.topK]), topLp = addon.empty('f32', [rows, o.topK]);
      addon.logprobs(lp, topIds, topLp, logits, chosen);
      const ids = chosen.toArray() as Int32Array, ti = topIds.toArray() as Int32Array, tl = topLp.toArray() as Float32Array;
      let row = 0;
      for (const s of active) {
        s.cached = Math.min(s.tokens.length, s.cached + o.chunk);
        if (s.cached < s.tokens.length) continue;  // still prefilling: its logits row was not asked for
        s.out.logits.push(all.slice(row * vocab, (row + 1) * vocab));
        s.out.top.push(Array.from({ length: o.topK }, (_, k) => [ti[row * o.topK + k], tl[row * o.topK + k]]));
        s.out.ids.push(ids[row]);
        s.tokens.push(ids[row]);
        row++;
      }
      for (const x of [logits, chosen, lp, topIds, topLp]) x.dispose();
    }
  } finally {
    kv.dispose();
  }
  return seqs.map((s) => s.out);
}

function buildStep(active: Seq[], o: GenerateOptions): StepInput {
  const tokens: number[] = [], positions: number[] = [], slots: number[] = [], logitRows: number[] = [];
  const queryStarts = [0], contextLens: number[] = [], tables: number[] = [];
  for (const s of active) {
    const end = Math.min(s.tokens.length, s.cached + o.chunk);
    for (let p = s.cached; p < end; p++) {
      tokens.push(s.tokens[p]);
      positions.push(p);
      slots.push(s.blocks[Math.floor(p / o.blockSize)] * o.blockSize + (p % o.blockSize));
    }
    if (end === s.tokens.length) logitRows.push(tokens.length - 1);
    queryStarts.push(tokens.length);
    contextLens.push(end);
    tables.push(...s.blocks);
  }
  const maxBlocks = active[0].blocks.length;
  return {
    tokens: Int32Array.from(tokens), positions: Int32Array.from(positions), slots: Int32Array.from(slots),
    queryStarts: Int32Array.from(queryStarts), contextLens: Int32Array.from(contextLens),
    blockTables: Int32Array.from(tables), maxBlocks, logitRows: Int32Array.from(logitRows),
  };
}

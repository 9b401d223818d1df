// What bench/decode_step.mjs and bench/stamps.mjs share: the model on CUDA with its adapter
// pool (bench/one_adapter.mjs), a cache and workspaces for decode steps, and a decode step's
// inputs: C sequences each one token past a context of `len` (16-token cache blocks, sequence
// s in blocks s·⌈len/16⌉ ..), block tables `tableWidth` blocks wide (-1 past each sequence's
// blocks).
import { join } from 'node:path';

import { cudaPlacement, KvCache, loadModel, stepTensors } from '../dist/lib/models/index.js';
import { Workspace } from '../dist/lib/models/workspace.js';
import { poolWithOneAdapter } from './one_adapter.mjs';

export const BLOCK = 16;

/** Cache blocks a sequence of `len` tokens holds. */
export const blocksFor = (len) => Math.ceil(len / BLOCK);

/**
 * DIR's model with its pool, a cache of maxSeqs sequences of `len` tokens, tables `width`
 * tokens wide (default: max_position_embeddings, as the engine's graphs take them), and the
 * modes named in `modes` as [name, the rows' slot (undefined: no LoRA plan), workspace]: off
 * (no pool), base (the pool on, no row on an adapter: the engine then runs its steps without
 * a LoRA plan), one (every row on one adapter). dispose() frees them.
 */
export async function decodeSetup(dir, { len, maxSeqs, width, modes }) {
  const model = loadModel(dir, { placement: cudaPlacement() });
  const { lora, pool, slot } = await poolWithOneAdapter(model, join(dir, 'adapters'));
  const blocksPer = blocksFor(len);
  const tableWidth = Math.max(blocksPer, blocksFor(width ?? model.config.maxPositionEmbeddings));
  const kv = new KvCache(model.config, maxSeqs * blocksPer, BLOCK, model.placement);
  const wsOff = new Workspace(model.config, model.placement, maxSeqs, maxSeqs);
  const wsOn = new Workspace(model.config, model.placement, maxSeqs, maxSeqs, pool.widths);
  const all = [['off', undefined, wsOff], ['base', undefined, wsOn], ['one', slot, wsOn]];
  return {
    model, pool, kv, tableWidth,
    modes: all.filter(([mode]) => modes.includes(mode)),
    dispose() {
      model.lora = pool;
      [wsOff, wsOn, kv].forEach((t) => t.dispose());
      lora.dispose();
    },
  };
}

/** The step tensors of C sequences' next tokens at position len - 1, rows on `rowSlot` (undefined: no LoRA plan). */
export function decodeStep(model, C, len, tableWidth, rowSlot) {
  const vocab = model.config.vocabSize, blocksPer = blocksFor(len);
  const tokens = Int32Array.from({ length: C }, (_, i) => 3 + ((i * 7919) % (vocab - 3)));
  const rows = new Int32Array(C).fill(rowSlot ?? 0);
  return stepTensors({
    tokens,
    positions: new Int32Array(C).fill(len - 1),
    slots: Int32Array.from({ length: C }, (_, s) => s * blocksPer * BLOCK + len - 1),
    queryStarts: Int32Array.from({ length: C + 1 }, (_, s) => s),
    contextLens: new Int32Array(C).fill(len),
    blockTables: Int32Array.from({ length: C * tableWidth }, (_, i) => (i % tableWidth < blocksPer ? Math.floor(i / tableWidth) * blocksPer + (i % tableWidth) : -1)),
    maxBlocks: tableWidth,
    logitRows: Int32Array.from({ length: C }, (_, s) => s),
    lora: rowSlot === undefined ? undefined : { rowSlots: rows, logitSlots: rows, embedRows: Int32Array.from(tokens, (t) => rowSlot * vocab + t) },
  }, model.placement.device);
}

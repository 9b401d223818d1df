// What bench/decode_step.mjs and bench/stamps.mjs share: a decode step's inputs, C sequences
// each one token past a context of `len` (16-token cache blocks, sequence s in blocks
// s·⌈len/16⌉ ..), block tables `tableWidth` blocks wide (-1 past each sequence's blocks).
import { stepTensors } from '../dist/lib/models/index.js';

export const BLOCK = 16;

/** Cache blocks a sequence of `len` tokens holds. */
export const blocksFor = (len) => Math.ceil(len / BLOCK);

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

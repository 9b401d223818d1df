// What one forward step runs: the new tokens of every scheduled sequence, where their
// keys and values go in the paged cache, and which rows need logits.
import { addon, type DeviceName, type Tensor } from '../addon/index.js';

export interface StepInput {
  /** New tokens of all sequences, concatenated. */
  tokens: Int32Array;
  /** Position of each token in its sequence. */
  positions: Int32Array;
  /** Cache slot of each token: block * blockSize + offset. */
  slots: Int32Array;
  /** Sequence s owns token rows [queryStarts[s], queryStarts[s + 1]). */
  queryStarts: Int32Array;
  /** Tokens of sequence s in the cache after this step (its new ones included). */
  contextLens: Int32Array;
  /** Row-major [sequences, maxBlocks]: the blocks holding each sequence's context. */
  blockTables: Int32Array;
  maxBlocks: number;
  /** Token rows whose logits are wanted (usually each sequence's last token). */
  logitRows: Int32Array;
  /** Present when some row runs an adapter: the LoRA plan of the step. */
  lora?: LoraPlan;
}

/** Which adapter slot each row runs (0 = none), in buffers whose shape only the batch sets. */
export interface LoraPlan {
  /** Slot of each token row. */
  rowSlots: Int32Array;
  /** Slot of each logit row. */
  logitSlots: Int32Array;
  /** Row of each token in the embedding adapters' stacked Aᵀ: slot * vocab + token. */
  embedRows: Int32Array;
}

/** The step's index arrays as addon tensors. */
export interface StepTensors {
  numTokens: number;
  tokens: Tensor;
  positions: Tensor;
  slots: Tensor;
  queryStarts: Tensor;
  contextLens: Tensor;
  blockTables: Tensor;
  logitRows: Tensor;
  lora?: { rowSlots: Tensor; logitSlots: Tensor; embedRows: Tensor };
  dispose(): void;
}

export function stepTensors(s: StepInput, device: DeviceName = 'cpu'): StepTensors {
  const seqs = s.contextLens.length;
  const i32 = (shape: number[], data: Int32Array) => addon.fromArray('i32', shape, data, device);
  const all = {
    tokens: i32([s.tokens.length], s.tokens),
    positions: i32([s.positions.length], s.positions),
    slots: i32([s.slots.length], s.slots),
    queryStarts: i32([seqs + 1], s.queryStarts),
    contextLens: i32([seqs], s.contextLens),
    blockTables: i32([seqs, s.maxBlocks], s.blockTables),
    logitRows: i32([s.logitRows.length], s.logitRows),
  };
  const lora = s.lora && {
    rowSlots: i32([s.lora.rowSlots.length], s.lora.rowSlots),
    logitSlots: i32([s.lora.logitSlots.length], s.lora.logitSlots),
    embedRows: i32([s.lora.embedRows.length], s.lora.embedRows),
  };
  return {
    ...all,
    lora,
    numTokens: s.tokens.length,
    dispose: () => [...Object.values(all), ...Object.values(lora ?? {})].forEach((t) => t.dispose()),
  };
}

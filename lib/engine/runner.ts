// Turns a scheduled step into model inputs, runs the forward pass, and samples: the only
// part of the engine that calls into the addon.
import { addon, type Tensor } from '../addon/index.js';
import { KvCache, stepTensors, type Model, type StepInput } from '../models/index.js';
import type { ScheduledSeq } from './scheduler.js';
import type { TokenLogprob } from './types.js';

export interface Sampled {
  tokenId: number;
  logprob?: TokenLogprob;
}

export class ModelRunner {
  constructor(readonly model: Model, readonly kv: KvCache) {}

  /** Runs the step; returns one sample per entry whose chunk ends its sequence, in order. */
  run(batch: readonly ScheduledSeq[]): Sampled[] {
    const input = this.inputs(batch);
    const tensors = stepTensors(input, this.model.placement.device);
    let logits: Tensor | undefined;
    try {
      logits = this.model.forward(tensors, this.kv);
      return this.sample(batch.filter((e) => e.samples), logits);
    } finally {
      tensors.dispose();
      logits?.dispose();
    }
  }

  private inputs(batch: readonly ScheduledSeq[]): StepInput {
    const bs = this.kv.blockSize;
    const numTokens = batch.reduce((n, e) => n + e.count, 0);
    const maxBlocks = Math.max(1, ...batch.map((e) => e.seq.blocks.length));
    const s: StepInput = {
      tokens: new Int32Array(numTokens), positions: new Int32Array(numTokens), slots: new Int32Array(numTokens),
      queryStarts: new Int32Array(batch.length + 1), contextLens: new Int32Array(batch.length),
      blockTables: new Int32Array(batch.length * maxBlocks), maxBlocks,
      logitRows: new Int32Array(batch.filter((e) => e.samples).length),
    };
    let t = 0, rows = 0;
    batch.forEach((e, i) => {
      for (let p = e.start; p < e.start + e.count; p++, t++) {
        s.tokens[t] = e.seq.tokenAt(p);
        s.positions[t] = p;
        s.slots[t] = e.seq.blocks[Math.floor(p / bs)] * bs + (p % bs);
      }
      s.queryStarts[i + 1] = t;
      s.contextLens[i] = e.start + e.count;
      s.blockTables.set(e.seq.blocks, i * maxBlocks);
      if (e.samples) s.logitRows[rows++] = t - 1;
    });
    if (batch.some((e) => e.seq.slot > 0)) s.lora = this.loraPlan(batch, s);
    return s;
  }

  /** Each row's adapter slot; built only when some row runs an adapter. */
  private loraPlan(batch: readonly ScheduledSeq[], s: StepInput): NonNullable<StepInput['lora']> {
    const vocab = this.model.config.vocabSize;
    const rowSlots = new Int32Array(s.tokens.length);
    let t = 0;
    for (const e of batch) rowSlots.fill(e.seq.slot, t, (t += e.count));
    return {
      rowSlots,
      logitSlots: Int32Array.from(batch.filter((e) => e.samples), (e) => e.seq.slot),
      embedRows: Int32Array.from(s.tokens, (tok, r) => rowSlots[r] * vocab + tok),
    };
  }

  private sample(entries: readonly ScheduledSeq[], logits: Tensor): Sampled[] {
    const n = entries.length;
    if (n === 0) return [];
    const p = entries.map((e) => e.seq.params);
    const owned: Tensor[] = [];
    const t = <T extends Tensor>(x: T): T => (owned.push(x), x);
    try {
      const device = this.model.placement.device;
      const ids = t(addon.empty('i32', [n], device));
      addon.sample(
        ids, logits,
        t(addon.fromArray('f32', [n], Float32Array.from(p, (x) => x.temperature), device)),
        t(addon.fromArray('i32', [n], Int32Array.from(p, (x) => x.topK), device)),
        t(addon.fromArray('f32', [n], Float32Array.from(p, (x) => x.topP), device)),
        t(addon.fromArray('i64', [n], BigInt64Array.from(entries, (e) => e.seq.seed), device)),
        t(addon.fromArray('i32', [n], Int32Array.from(entries, (e) => e.seq.outputIds.length), device)),
      );
      const chosen = ids.toArray() as Int32Array;
      const k = Math.max(-1, ...p.map((x) => x.logprobs ?? -1));
      if (k < 0) return Array.from(chosen, (tokenId) => ({ tokenId }));
      const lp = t(addon.empty('f32', [n], device)), topIds = t(addon.empty('i32', [n, k], device)), topLp = t(addon.empty('f32', [n, k], device));
      addon.logprobs(lp, topIds, topLp, logits, ids);
      const lpa = lp.toArray() as Float32Array, tia = topIds.toArray() as Int32Array, tla = topLp.toArray() as Float32Array;
      return Array.from(chosen, (tokenId, r) => {
        const want = p[r].logprobs;
        if (want === null) return { tokenId };
        const top = Array.from({ length: want }, (_, j): [number, number] => [tia[r * k + j], tla[r * k + j]]);
        return { tokenId, logprob: { tokenId, logprob: lpa[r], top } };
      });
    } finally {
      owned.forEach((x) => x.dispose());
    }
  }
}

// Turns a scheduled step into model inputs, runs the forward pass, and samples: the only
// part of the engine that calls into the addon.
import { performance } from 'node:perf_hooks';

import { addon, type Tensor } from '../addon/index.js';
import { KvCache, stepTensors, type Model, type StepInput } from '../models/index.js';
import { Workspace } from '../models/workspace.js';
import type { SlotWeights } from '../lora/slot_weights.js';
import { GraphRunner, type GraphRunnerOptions, type GraphStats } from './graph_runner.js';
import { tokensOf, type Launched, type Sampled } from './launched.js';
import type { ScheduledSeq } from './scheduler.js';
import type { Sequence } from './sequence.js';

export type { Launched, Sampled };

export interface RunnerOptions extends GraphRunnerOptions {
  /** Decode steps as replayed CUDA graphs (only where the model is on cuda). */
  cudaGraphs: boolean;
  /** Time every step and print a summary (MSTAR_PROFILE=1). */
  profile?: boolean;
}

/** Host wall time per step, by path (the graph path's waits for ids are GraphStats.waitMs). */
interface Timing {
  steps: number;
  ms: number;
}

export class ModelRunner {
  /** Present when decode steps may replay CUDA graphs. */
  readonly graphs?: GraphRunner;
  /**
   * Activations of eager steps (prefill, and decode where no graph runs), allocated on the
   * first one for the largest step the scheduler can make: an eager step then allocates
   * nothing (it took about 200 allocations with an adapter, one per target and layer).
   */
  private eagerWs?: Workspace;
  private eagerWsLora?: SlotWeights;
  private readonly timing = { graph: { steps: 0, ms: 0 } as Timing, eager: { steps: 0, ms: 0 } as Timing };

  constructor(readonly model: Model, readonly kv: KvCache, readonly options?: RunnerOptions) {
    if (options?.cudaGraphs && model.placement.device === 'cuda') this.graphs = new GraphRunner(model, kv, options);
  }

  /** Runs the step; returns one sample per entry whose chunk ends its sequence, in order. */
  run(batch: readonly ScheduledSeq[]): Sampled[] {
    return this.launch(batch).sampled();
  }

  /**
   * Starts the step and returns at once where it replays a graph (its samples are read
   * when asked for); otherwise runs it. Entries whose token is unread (Sequence.unread)
   * take it from `prev`, the step launched just before.
   */
  launch(batch: readonly ScheduledSeq[], prev?: Launched): Launched {
    const t0 = this.options?.profile ? performance.now() : 0;
    const graph = this.graphs !== undefined && this.graphs.ineligible(batch) === undefined;
    const launched = graph ? this.graphs!.launch(batch, prev) : this.runEager(batch, prev);
    if (this.options?.profile) {
      const t = graph ? this.timing.graph : this.timing.eager;
      t.steps++;
      t.ms += performance.now() - t0;
      if ((this.timing.graph.steps + this.timing.eager.steps) % 1000 === 0) console.error(this.profileLine());
    }
    return launched;
  }

  graphStats(): GraphStats | undefined {
    return this.graphs && { ...this.graphs.stats, captured: [...this.graphs.stats.captured] };
  }

  /** One line of MSTAR_PROFILE numbers: steps and mean host ms per step, by path. */
  profileLine(): string {
    const g = this.graphs?.stats;
    const mean = (t: Timing) => (t.steps ? ((t.ms + (t === this.timing.graph ? g?.waitMs ?? 0 : 0)) / t.steps).toFixed(3) : '-');
    const perReplay = (ms: number) => (g && g.replays ? (ms / g.replays).toFixed(3) : '-');
    return `mstar profile: ${this.timing.graph.steps} graph steps (${mean(this.timing.graph)} ms each), ` +
      `${this.timing.eager.steps} eager steps (${mean(this.timing.eager)} ms each)` +
      (g ? `; graphs: ${g.captures} captured, ${g.replays} replays (host ${perReplay(g.hostMs)} + waiting ${perReplay(g.waitMs)} ms each), ` +
        `${g.warmups} warm-up steps, ${g.failures} failed captures` : '; cuda graphs off');
  }

  close(): void {
    if (this.options?.profile) console.error(this.profileLine());
    this.graphs?.dispose();
    this.eagerWs?.dispose();
  }

  private runEager(batch: readonly ScheduledSeq[], prev?: Launched): Launched {
    const input = this.inputs(batch, unreadTokens(batch, prev));
    const tensors = stepTensors(input, this.model.placement.device);
    let logits: Tensor | undefined;
    try {
      logits = this.model.forward(tensors, this.kv, this.eagerWorkspace());
      const sampled = this.sample(batch.filter((e) => e.samples), logits);
      return { batch, sampled: () => sampled };
    } finally {
      tensors.dispose();
      logits?.dispose();
    }
  }

  /**
   * Undefined without limits to size it (a runner made without options allocates per
   * step). Made again if the model's adapter pool changed (its rank-space buffer's width).
   */
  private eagerWorkspace(): Workspace | undefined {
    const o = this.options;
    if (!o) return undefined;
    if (this.eagerWs && this.eagerWsLora !== this.model.lora) {
      this.eagerWs.dispose();
      this.eagerWs = undefined;
    }
    if (!this.eagerWs) {
      this.eagerWs = new Workspace(this.model.config, this.model.placement, o.maxNumBatchedTokens, o.maxBatchSize, this.model.lora);
      this.eagerWsLora = this.model.lora;
    }
    return this.eagerWs;
  }

  /** unread: the value of each unread token of the batch. */
  private inputs(batch: readonly ScheduledSeq[], unread?: ReadonlyMap<Sequence, number>): StepInput {
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
        s.tokens[t] = p < e.seq.length - e.seq.unread ? e.seq.tokenAt(p) : unread!.get(e.seq)!;
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

  /** Whether a row is still under min_tokens, so its EOS and stop tokens are masked. */
  private masks(e: ScheduledSeq): boolean {
    return e.seq.numOutputs < e.seq.params.minTokens;
  }

  /**
   * Before min_tokens, EOS and stop tokens cannot be drawn (as vLLM): their logits become -inf.
   * Only rows under min_tokens pay for it, a fill per banned token.
   */
  private maskStopTokens(entries: readonly ScheduledSeq[], logits: Tensor): void {
    const vocab = logits.shape[1];
    entries.forEach((e, r) => {
      const p = e.seq.params;
      if (!this.masks(e)) return;
      const banned = new Set([...p.stopTokenIds, ...(p.ignoreEos ? [] : this.model.config.eosTokenIds)]);
      for (const id of banned) {
        if (id < 0 || id >= vocab) continue;
        const row = logits.narrow(r, 1);
        const column = row.view([vocab, 1]);
        const cell = column.narrow(id, 1);
        addon.fill(cell, -Infinity);
        [cell, column, row].forEach((x) => x.dispose());
      }
    });
  }

  private sample(entries: readonly ScheduledSeq[], logits: Tensor): Sampled[] {
    const n = entries.length;
    if (n === 0) return [];
    const p = entries.map((e) => e.seq.params);
    const owned: Tensor[] = [];
    const t = <T extends Tensor>(x: T): T => (owned.push(x), x);
    try {
      const device = this.model.placement.device;
      const k = Math.max(-1, ...p.map((x) => x.logprobs ?? -1));
      // Logprobs are the model's, before the min_tokens mask (as vLLM's default raw logprobs):
      // where a row both masks and wants them, they come from a copy taken first.
      const raw = k >= 0 && entries.some((e) => this.masks(e)) ? t(logits.to(device)) : logits;
      this.maskStopTokens(entries, logits);
      const ids = t(addon.empty('i32', [n], device));
      addon.sample(
        ids, logits,
        t(addon.fromArray('f32', [n], Float32Array.from(p, (x) => x.temperature), device)),
        t(addon.fromArray('i32', [n], Int32Array.from(p, (x) => x.topK), device)),
        t(addon.fromArray('f32', [n], Float32Array.from(p, (x) => x.topP), device)),
        t(addon.fromArray('i64', [n], BigInt64Array.from(entries, (e) => e.seq.seed), device)),
        t(addon.fromArray('i32', [n], Int32Array.from(entries, (e) => e.seq.numOutputs), device)),
      );
      const chosen = ids.toArray() as Int32Array;
      if (k < 0) return Array.from(chosen, (tokenId) => ({ tokenId }));
      const lp = t(addon.empty('f32', [n], device)), topIds = t(addon.empty('i32', [n, k], device)), topLp = t(addon.empty('f32', [n, k], device));
      addon.logprobs(lp, topIds, topLp, raw, ids);
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

/** The value of each unread token of the batch, from prev's samples (every unread token is one of prev's). */
function unreadTokens(batch: readonly ScheduledSeq[], prev?: Launched): Map<Sequence, number> | undefined {
  if (!batch.some((e) => e.seq.unread > 0)) return undefined;
  if (!prev) throw new Error('model runner: a token is unread but no previous step was given');
  return tokensOf(prev);
}

// Turns a scheduled step into model inputs, runs the forward pass, and samples: the only
// part of the engine that calls into the addon. Every step only enqueues (on cuda): its
// inputs go up without waiting, its samples land in one id buffer that every step shares
// (the next step reads its unread tokens from there, on the device) and come back to the
// host through a readback that waits only when they are read.
import { performance } from 'node:perf_hooks';

import { addon, type Tensor } from '../addon/index.js';
import { stepTensors, type KvCache, type Model, type StepInput, type StepTensors } from '../models/index.js';
import { Workspace } from '../models/workspace.js';
import type { SlotWeights } from '../lora/slot_weights.js';
import { warmUpStep } from './eager_warmup.js';
import { GraphRunner, type GraphRunnerOptions, type GraphStats } from './graph_runner.js';
import { unreadRows, type Launched, type Sampled } from './launched.js';
import { Readback } from './readback.js';
import type { ScheduledSeq } from './scheduler.js';
import type { Sequence } from './sequence.js';
import { StagedUploads, type IntoDevice } from './staged_uploads.js';

export type { Launched, Sampled };

export interface RunnerOptions extends GraphRunnerOptions {
  /** Decode steps as replayed CUDA graphs (only where the model is on cuda). */
  cudaGraphs: boolean;
  /** Time every step and print a summary (MSTAR_PROFILE=1). */
  profile?: boolean;
}

/**
 * Host wall time per step, by path (eager: its wait for ids included where the engine reads
 * them before they are made, without overlap; graph: that wait is GraphStats.waitMs).
 */
interface Timing {
  steps: number;
  ms: number;
}

/**
 * Eager steps kept one by one for MSTAR_PROFILE's median: the first one pays for the eager
 * workspace and the GEMM plans of its shapes, which the mean of a short run carries.
 */
const KEPT_EAGER_STEPS = 4096;

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
  /** Each eager step's host ms (its launch, then its read), the first KEPT_EAGER_STEPS of them. */
  private readonly eagerMs: number[] = [];
  /** Every step's sampled ids, row i the batch's i-th sampling entry: one row per sequence a step may hold. */
  private readonly ids: Tensor;
  private readonly readback: Readback;
  private readonly uploads: StagedUploads;

  constructor(readonly model: Model, readonly kv: KvCache, readonly options: RunnerOptions) {
    const device = model.placement.device;
    this.ids = addon.zeros('i32', [Math.max(1, options.maxBatchSize)], device);
    this.readback = new Readback(device);
    this.uploads = new StagedUploads(device);
    if (options.cudaGraphs && device === 'cuda') this.graphs = new GraphRunner(model, kv, options, this.ids, this.readback);
  }

  /**
   * Starts the step and returns at once where it replays a graph (its samples are read
   * when asked for); otherwise runs it. Entries whose token is unread (Sequence.unread)
   * take it from `prev`, the step launched just before.
   */
  launch(batch: readonly ScheduledSeq[], prev?: Launched): Launched {
    const t0 = this.options.profile ? performance.now() : 0;
    const graph = this.graphs !== undefined && this.graphs.ineligible(batch) === undefined;
    const kept = this.options.profile && !graph && this.eagerMs.length < KEPT_EAGER_STEPS ? this.eagerMs.push(0) - 1 : -1;
    const launched = graph ? this.graphs!.launch(batch, prev) : this.runEager(batch, prev, kept);
    if (this.options.profile) {
      const t = graph ? this.timing.graph : this.timing.eager;
      const ms = performance.now() - t0;
      t.steps++;
      t.ms += ms;
      if (kept >= 0) this.eagerMs[kept] += ms;
      if ((this.timing.graph.steps + this.timing.eager.steps) % 1000 === 0) console.error(this.profileLine());
    }
    return launched;
  }

  /**
   * One padding step (eager_warmup.ts) of each row count in `sizes` on the eager workspace,
   * without a LoRA plan and, where the model has an adapter pool, with one: the GEMM plans and
   * kernels of the eager steps to come, met now. No sequence's cache changes. Returns the steps
   * run, once they have all run.
   */
  warmUpEager(sizes: readonly number[]): number {
    const o = this.options;
    let steps = 0;
    for (const lora of this.model.lora ? [false, true] : [false]) {
      for (const n of sizes) {
        if (n > o.maxNumBatchedTokens) continue;
        const step = stepTensors(warmUpStep(n, o.maxBatchSize, this.kv.blockSize, lora), this.model.placement.device);
        try {
          this.model.forward(step, this.kv, this.eagerWorkspace()).dispose();
        } finally {
          step.dispose();
        }
        steps++;
      }
    }
    addon.synchronize();
    return steps;
  }

  graphStats(): GraphStats | undefined {
    return this.graphs && { ...this.graphs.stats, captured: [...this.graphs.stats.captured] };
  }

  /** One line of MSTAR_PROFILE numbers: steps and mean host ms per step, by path. */
  profileLine(): string {
    const g = this.graphs?.stats;
    const mean = (t: Timing) => (t.steps ? ((t.ms + (t === this.timing.graph ? g?.waitMs ?? 0 : 0)) / t.steps).toFixed(3) : '-');
    const perReplay = (ms: number) => (g && g.replays ? (ms / g.replays).toFixed(3) : '-');
    const sorted = [...this.eagerMs].sort((a, b) => a - b);
    const eagerMedian = sorted.length ? `, p50 ${sorted[sorted.length >> 1].toFixed(3)}, first ${this.eagerMs[0].toFixed(3)}` : '';
    return `mstar profile: ${this.timing.graph.steps} graph steps (${mean(this.timing.graph)} ms each), ` +
      `${this.timing.eager.steps} eager steps (${mean(this.timing.eager)} ms each${eagerMedian})` +
      (g ? `; graphs: ${g.captures} captured, ${g.replays} replays (host ${perReplay(g.hostMs)} + waiting ${perReplay(g.waitMs)} ms each), ` +
        `${g.warmups} warm-up steps, ${g.failures} failed captures` : '; cuda graphs off');
  }

  close(): void {
    if (this.options.profile) console.error(this.profileLine());
    this.graphs?.dispose();
    this.readback.dispose();  // waits for the copies in flight, so the last step has run
    this.uploads.dispose();
    this.ids.dispose();
    this.eagerWs?.dispose();
  }

  /**
   * Enqueues the step's ops and returns at once on cuda: inputs through staged uploads, the
   * rows whose token is unread fed from the id buffer prev left (feedTokens), samples into
   * that buffer and back through the readback. kept: the step's entry in eagerMs, if any
   * (its read adds there).
   */
  private runEager(batch: readonly ScheduledSeq[], prev: Launched | undefined, kept: number): Launched {
    const sampling = batch.filter((e) => e.samples);
    if (sampling.length > this.ids.shape[0]) {
      throw new Error(`model runner: ${sampling.length} rows sample, the id buffer holds ${this.ids.shape[0]}`);
    }
    const tensors = this.upload(this.inputs(batch, unreadRows(batch, prev)), sampling);
    let logits: Tensor | undefined;
    try {
      logits = this.model.forward(tensors.step, this.kv, this.eagerWorkspace());
      const samples = this.sample(sampling, logits, tensors);
      return {
        batch,
        ready: samples.ready,
        sampled: () => {
          const t0 = performance.now();
          const out = samples.read();
          const ms = performance.now() - t0;
          this.timing.eager.ms += ms;
          if (kept >= 0) this.eagerMs[kept] += ms;
          return out;
        },
      };
    } finally {
      tensors.step.dispose();
      logits?.dispose();
    }
  }

  /**
   * The step's inputs on the device (three uploads that do not wait) and, where a row's
   * token is unread, that token fed in from the id buffer.
   */
  private upload(s: EagerInput, sampling: readonly ScheduledSeq[]): EagerTensors {
    const n = s.tokens.length, p = sampling.map((e) => e.seq.params);
    // feedTokens writes a fed row's embedding-adapter row too: scratch where no adapter runs.
    const rowSlots = s.lora?.rowSlots ?? (s.fromRows && new Int32Array(n));
    const embedRows = s.lora?.embedRows ?? (s.fromRows && new Int32Array(n));
    const arrays: Record<string, IntoDevice | undefined> = {
      tokens: i32(s.tokens), positions: i32(s.positions), slots: i32(s.slots), queryStarts: i32(s.queryStarts),
      contextLens: i32(s.contextLens), blockTables: i32(s.blockTables, [s.contextLens.length, s.maxBlocks]),
      logitRows: i32(s.logitRows), rowSlots: rowSlots && i32(rowSlots), embedRows: embedRows && i32(embedRows),
      logitSlots: s.lora && i32(s.lora.logitSlots), fromRows: s.fromRows && i32(s.fromRows),
      topK: i32(Int32Array.from(p, (x) => x.topK)), steps: i32(Int32Array.from(sampling, (e) => e.seq.numOutputs)),
      temperature: { dtype: 'f32', data: Float32Array.from(p, (x) => x.temperature) },
      topP: { dtype: 'f32', data: Float32Array.from(p, (x) => x.topP) },
      seeds: { dtype: 'i64', data: BigInt64Array.from(sampling, (e) => e.seq.seed) },
    };
    const names = Object.keys(arrays).filter((k) => arrays[k] !== undefined);
    const views = this.uploads.upload(names.map((k) => arrays[k]!));
    const v = Object.fromEntries(names.map((k, i) => [k, views[i]]));
    if (v.fromRows) addon.feedTokens(v.tokens, v.embedRows, this.ids, v.fromRows, v.rowSlots, this.model.config.vocabSize);
    const step: StepTensors = {
      numTokens: n, tokens: v.tokens, positions: v.positions, slots: v.slots, queryStarts: v.queryStarts,
      contextLens: v.contextLens, blockTables: v.blockTables, logitRows: v.logitRows,
      lora: s.lora && { rowSlots: v.rowSlots, logitSlots: v.logitSlots, embedRows: v.embedRows },
      dispose: () => views.forEach((t) => t.dispose()),
    };
    return { step, topK: v.topK, steps: v.steps, temperature: v.temperature, topP: v.topP, seeds: v.seeds };
  }

  /**
   * Made again if the model's adapter pool changed (its rank-space buffer's width); the old
   * one is freed in stream order, after the steps still running on it.
   */
  private eagerWorkspace(): Workspace {
    const o = this.options;
    if (this.eagerWs && this.eagerWsLora !== this.model.lora) {
      this.eagerWs.dispose();
      this.eagerWs = undefined;
    }
    if (!this.eagerWs) {
      this.eagerWs = new Workspace(this.model.config, this.model.placement, o.maxNumBatchedTokens, o.maxBatchSize, this.model.lora?.widths);
      this.eagerWsLora = this.model.lora;
    }
    return this.eagerWs;
  }

  /**
   * The step's host arrays. unread: for each sequence whose token is unread, its row in the
   * id buffer (the previous step's samples); that token is fed in on the device (fromRows).
   */
  private inputs(batch: readonly ScheduledSeq[], unread?: ReadonlyMap<Sequence, number>): EagerInput {
    const bs = this.kv.blockSize;
    const numTokens = batch.reduce((n, e) => n + e.count, 0);
    const maxBlocks = Math.max(1, ...batch.map((e) => e.seq.blocks.length));
    const s: EagerInput = {
      tokens: new Int32Array(numTokens), positions: new Int32Array(numTokens), slots: new Int32Array(numTokens),
      queryStarts: new Int32Array(batch.length + 1), contextLens: new Int32Array(batch.length),
      blockTables: new Int32Array(batch.length * maxBlocks), maxBlocks,
      logitRows: new Int32Array(batch.filter((e) => e.samples).length),
    };
    if (unread) s.fromRows = new Int32Array(numTokens).fill(-1);
    let t = 0, rows = 0;
    batch.forEach((e, i) => {
      for (let p = e.start; p < e.start + e.count; p++, t++) {
        if (p < e.seq.length - e.seq.unread) s.tokens[t] = e.seq.tokenAt(p);
        else s.fromRows![t] = rowOf(unread!, e.seq);
        s.positions[t] = p;
        s.slots[t] = e.seq.blocks[Math.floor(p / bs)] * bs + (p % bs);
      }
      s.queryStarts[i + 1] = t;
      s.contextLens[i] = e.start + e.count;
      s.blockTables.set(e.seq.blocks, i * maxBlocks);
      if (e.samples) s.logitRows[rows++] = t - 1;
    });
    if (batch.some((e) => this.slotOf(e.seq) > 0)) s.lora = this.loraPlan(batch, s);
    return s;
  }

  /** Each row's adapter slot; built only when some row runs an adapter. */
  private loraPlan(batch: readonly ScheduledSeq[], s: StepInput): NonNullable<StepInput['lora']> {
    const vocab = this.model.config.vocabSize;
    const rowSlots = new Int32Array(s.tokens.length);
    let t = 0;
    for (const e of batch) rowSlots.fill(this.slotOf(e.seq), t, (t += e.count));
    return {
      rowSlots,
      logitSlots: Int32Array.from(batch.filter((e) => e.samples), (e) => this.slotOf(e.seq)),
      embedRows: Int32Array.from(s.tokens, (tok, r) => rowSlots[r] * vocab + tok),
    };
  }

  /** The adapter slot a sequence's rows run: none (0) where its adapter is merged into the weights. */
  private slotOf(seq: Sequence): number {
    return this.model.lora?.runSlot(seq.slot) ?? seq.slot;
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

  /**
   * Enqueues sampling (and the logprobs asked for) into the id buffer and their copy to the
   * host; returns what reads them.
   */
  private sample(entries: readonly ScheduledSeq[], logits: Tensor, inputs: EagerTensors): { ready(): boolean; read(): Sampled[] } {
    const n = entries.length;
    if (n === 0) return { ready: () => true, read: () => [] };
    const owned: Tensor[] = [];
    const t = <T extends Tensor>(x: T): T => (owned.push(x), x);
    try {
      const device = this.model.placement.device;
      const p = entries.map((e) => e.seq.params);
      const k = Math.max(-1, ...p.map((x) => x.logprobs ?? -1));
      // Logprobs are the model's, before the min_tokens mask (as vLLM's default raw logprobs):
      // where a row both masks and wants them, they come from a copy taken first.
      const raw = k >= 0 && entries.some((e) => this.masks(e)) ? t(logits.to(device)) : logits;
      this.maskStopTokens(entries, logits);
      const ids = t(this.ids.narrow(0, n));
      addon.sample(ids, logits, inputs.temperature, inputs.topK, inputs.topP, inputs.seeds, inputs.steps);
      if (k < 0) {
        const pending = this.readback.send([ids]);
        return { ready: pending.ready, read: () => Array.from(pending.read()[0] as Int32Array, (tokenId) => ({ tokenId })) };
      }
      const lp = t(addon.empty('f32', [n], device)), topIds = t(addon.empty('i32', [n, k], device)), topLp = t(addon.empty('f32', [n, k], device));
      addon.logprobs(lp, topIds, topLp, raw, ids);
      const pending = this.readback.send([ids, lp, topIds, topLp]);
      const read = (): Sampled[] => {
        const [chosen, lpa, tia, tla] = pending.read() as [Int32Array, Float32Array, Int32Array, Float32Array];
        return Array.from(chosen, (tokenId, r) => {
          const want = p[r].logprobs;
          if (want === null) return { tokenId };
          const top = Array.from({ length: want }, (_, j): [number, number] => [tia[r * k + j], tla[r * k + j]]);
          return { tokenId, logprob: { tokenId, logprob: lpa[r], top } };
        });
      };
      return { ready: pending.ready, read };
    } finally {
      owned.forEach((x) => x.dispose());
    }
  }
}

/** An eager step's host arrays; fromRows: each token row's row in the id buffer where its token is unread, else -1. */
type EagerInput = StepInput & { fromRows?: Int32Array };

/** The device side of an eager step's inputs: the forward pass's and the sampler's. */
interface EagerTensors {
  step: StepTensors;
  topK: Tensor;
  steps: Tensor;
  temperature: Tensor;
  topP: Tensor;
  seeds: Tensor;
}

const i32 = (data: Int32Array, shape?: number[]): IntoDevice => ({ dtype: 'i32', data, shape });

/** The row of seq's unread token among the previous step's samples. */
function rowOf(unread: ReadonlyMap<Sequence, number>, seq: Sequence): number {
  const row = unread.get(seq);
  if (row === undefined) throw new Error(`model runner: the token of sequence ${seq.id} is not read and has no row`);
  return row;
}

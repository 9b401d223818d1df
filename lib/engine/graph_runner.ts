// Decode steps on CUDA as replayed graphs. Per batch-size bucket (graph_inputs.ts) one graph
// runs the whole step: forward on a preallocated Workspace, then sampling into the model
// runner's id buffer. Every input lives in static device buffers written before the replay (five
// asynchronous uploads through pinned memory), the adapter mix included: a row's slot and
// its embedding row are data, so one capture serves every mix. Steps without adapter rows
// replay a second graph per bucket without the LoRA ops (fewer launches). The only wait of
// a step is reading back its sampled ids.
//
// First use of a (bucket, LoRA) pair: the step runs eagerly on the static buffers (that
// warm-up fills cuBLASLt's algorithm cache, choosing by timing, and its workspace, which
// must not be allocated while capturing), then the graph is captured (nothing runs) and
// later steps replay it.
// A capture that fails is reported once and that pair stays eager.
//
// Steps overlap (launch): a step's ids come back through the runner's readback (pinned
// memory behind a fence), and the engine enqueues step N+1 before it reads step N's ids. A
// sequence of step N whose token the host has not read takes it on the device: the step's
// first op (feedTokens) copies it from the id buffer, which step N (graph or eager) left
// there, into the token inputs.
import { performance } from 'node:perf_hooks';

import { addon, type Graph, type Tensor } from '../addon/index.js';
import type { KvCache, Model, StepTensors } from '../models/index.js';
import { Workspace } from '../models/workspace.js';
import type { SlotWeights } from '../lora/slot_weights.js';
import { bucketFor, DecodeInputs, graphBuckets, graphIneligible, tableWidth } from './graph_inputs.js';
import { unreadRows, type Launched, type Sampled } from './launched.js';
import type { Pending, Readback } from './readback.js';
import type { ScheduledSeq } from './scheduler.js';

export interface GraphRunnerOptions {
  maxBatchSize: number;
  maxNumBatchedTokens: number;
  maxModelLen: number;
  blockSize: number;
  /** One line per capture (and per failed capture). */
  onProgress?: (message: string) => void;
}

export interface GraphStats {
  /** Graphs captured (each bucket at most twice: with and without LoRA ops). */
  captures: number;
  /** Steps that replayed a graph. */
  replays: number;
  /** Steps that ran eagerly on the static buffers (first use of a bucket, failed capture). */
  warmups: number;
  /** Captures that failed (those buckets stay eager). */
  failures: number;
  /** The graphs captured, as `${bucket}/lora` or `${bucket}/base`, in capture order. */
  captured: string[];
  /** Host ms over the replayed steps: preparing and enqueuing them, then waiting for their ids. */
  hostMs: number;
  waitMs: number;
}

/** The device side: static inputs and outputs for the largest bucket, and the workspace. */
interface Statics {
  lora: SlotWeights | undefined;
  ints: Tensor;
  tables: Tensor;
  temperature: Tensor;
  topP: Tensor;
  seeds: Tensor;
  ws: Workspace;
  /** Views for each bucket size, made on first use. */
  views: Map<number, BucketViews>;
}

interface BucketViews {
  step: StepTensors;
  temperature: Tensor;
  topK: Tensor;
  topP: Tensor;
  seeds: Tensor;
  steps: Tensor;
  ids: Tensor;
  fromRows: Tensor;
  tables: Tensor;
  owned: Tensor[];
}

/** A captured graph's name: `${bucket}/lora` or `${bucket}/base` (GraphStats.captured). */
function graphKey(bucket: number, withLora: boolean): string {
  return `${bucket}/${withLora ? 'lora' : 'base'}`;
}

/** A step this runner enqueued: its ids are read from the readback on first ask. */
class GraphLaunch implements Launched {
  private ids?: Sampled[];

  constructor(readonly runner: GraphRunner, readonly batch: readonly ScheduledSeq[], private readonly pending: Pending) {}

  ready(): boolean {
    return this.ids !== undefined || this.pending.ready();
  }

  sampled(): Sampled[] {
    if (this.ids) return this.ids;
    const t0 = performance.now();
    const all = this.pending.read()[0] as Int32Array;
    this.ids = Array.from(all.subarray(0, this.batch.length), (tokenId) => ({ tokenId }));
    this.runner.stats.waitMs += performance.now() - t0;
    return this.ids;
  }
}

export class GraphRunner {
  readonly buckets: number[];
  readonly width: number;
  readonly stats: GraphStats = { captures: 0, replays: 0, warmups: 0, failures: 0, captured: [], hostMs: 0, waitMs: 0 };
  private readonly host: DecodeInputs;
  private statics?: Statics;
  /** Key `${bucket}/${lora|base}`: the graph, or the reason its capture failed. */
  private readonly graphs = new Map<string, Graph | { failed: string }>();

  /**
   * ids: where every step's samples go (at least the largest bucket's rows; its address is
   * captured); readback: how they come back.
   */
  constructor(
    readonly model: Model, readonly kv: KvCache, readonly options: GraphRunnerOptions, private readonly ids: Tensor,
    private readonly readback: Readback,
  ) {
    this.buckets = graphBuckets(options.maxBatchSize, options.maxNumBatchedTokens);
    this.width = tableWidth(options.maxModelLen, options.blockSize);
    this.host = new DecodeInputs(this.buckets[this.buckets.length - 1] ?? 1, this.width);
    if (model.placement.device !== 'cuda') throw new Error('CUDA graphs need a model on cuda');
    if (ids.shape[0] < this.host.maxBucket) throw new Error(`graph runner: the id buffer holds ${ids.shape[0]} rows, the largest bucket ${this.host.maxBucket}`);
  }

  /** Why this step runs eagerly instead (undefined: run() takes it). */
  ineligible(batch: readonly ScheduledSeq[]): string | undefined {
    if (this.buckets.length === 0) return 'no graph buckets';
    // The graphs hold the LoRA pool's pointers: a model given another pool (another engine
    // on the same model) must not replay them.
    if (this.statics && this.statics.lora !== this.model.lora) return "the model's LoRA pool changed";
    return graphIneligible(batch, this.host.maxBucket, this.width, this.options.blockSize);
  }

  /**
   * Enqueues an eligible decode step and returns at once. Its rows whose token is unread
   * take it on the device from `prev`'s samples, `prev` being the step launched just before.
   */
  launch(batch: readonly ScheduledSeq[], prev?: Launched): Launched {
    const started = performance.now();
    const why = this.ineligible(batch);
    if (why !== undefined) throw new Error(`graph runner: this step cannot replay a graph (${why})`);
    const s = this.ensureStatics();
    const bucket = bucketFor(this.buckets, batch.length)!;
    const pool = this.model.lora;
    const adapters = this.host.fill(
      batch, bucket, this.options.blockSize, this.model.config.vocabSize, unreadRows(batch, prev), (seq) => pool?.runSlot(seq.slot) ?? seq.slot,
    );
    const withLora = adapters && s.lora !== undefined;
    const v = this.viewsFor(bucket);
    this.upload(v, bucket);
    const key = graphKey(bucket, withLora);
    const graph = this.graphs.get(key);
    const replay = graph !== undefined && 'replay' in graph;
    if (replay) graph.replay();
    else if (graph === undefined) this.warmUp(v, withLora);
    else this.enqueueStep(v, withLora);
    const launched = new GraphLaunch(this, batch, this.readback.send([v.ids]));
    if (replay) {
      this.stats.replays++;
      this.stats.hostMs += performance.now() - started;
    } else {
      this.stats.warmups++;
      if (graph === undefined) this.capture(key, v, withLora, bucket);
    }
    return launched;
  }

  /**
   * Captures every bucket's graphs now, with and without the LoRA ops where there is a
   * pool (as vLLM captures at start), so that no request waits for a capture. Each warm-up
   * step runs padding rows only, which touch no sequence's cache. Returns how many it captured.
   */
  captureAll(): number {
    const s = this.ensureStatics();
    const before = this.stats.captures;
    for (const bucket of this.buckets) {
      for (const withLora of s.lora ? [true, false] : [false]) {
        const key = graphKey(bucket, withLora);
        if (this.graphs.has(key)) continue;
        this.host.fill([], bucket, this.options.blockSize, this.model.config.vocabSize);
        const v = this.viewsFor(bucket);
        this.upload(v, bucket);
        this.warmUp(v, withLora);
        this.stats.warmups++;
        this.capture(key, v, withLora, bucket);
      }
    }
    return this.stats.captures - before;
  }

  dispose(): void {
    for (const g of this.graphs.values()) if ('dispose' in g) g.dispose();
    this.graphs.clear();
    const s = this.statics;
    if (!s) return;
    for (const v of s.views.values()) v.owned.forEach((t) => t.dispose());
    for (const t of [s.ints, s.tables, s.temperature, s.topP, s.seeds]) t.dispose();
    s.ws.dispose();
    this.statics = undefined;
  }

  /** The step's ops, enqueued on the static buffers: unread tokens in, forward, then sampling. */
  private enqueueStep(v: BucketViews, withLora: boolean): void {
    const s = this.statics!;
    const lora = v.step.lora!;
    addon.feedTokens(v.step.tokens, lora.embedRows, this.ids, v.fromRows, lora.rowSlots, this.model.config.vocabSize);
    const step = withLora ? v.step : { ...v.step, lora: undefined };
    const logits = this.model.forward(step, this.kv, s.ws);
    try {
      addon.sample(v.ids, logits, v.temperature, v.topK, v.topP, v.seeds, v.steps);
    } finally {
      logits.dispose();
    }
  }

  /**
   * A bucket's eager step before its capture. cuBLASLt times its algorithm choices for the
   * step's GEMM shapes here (the shapes the graph will replay), never in a step that serves
   * requests, which a timing would stall.
   */
  private warmUp(v: BucketViews, withLora: boolean): void {
    addon.gemmTuning(true);
    try {
      this.enqueueStep(v, withLora);
    } finally {
      addon.gemmTuning(false);
    }
  }

  private capture(key: string, v: BucketViews, withLora: boolean, bucket: number): void {
    const what = `batch ${bucket}${this.statics!.lora ? (withLora ? ' with LoRA' : ' without LoRA') : ''}`;
    const t0 = performance.now();
    try {
      const g = addon.captureGraph(() => this.enqueueStep(v, withLora));
      this.graphs.set(key, g);
      this.stats.captures++;
      this.stats.captured.push(key);
      const ms = (performance.now() - t0).toFixed(1);
      this.options.onProgress?.(`cuda graph: captured ${what} (${g.nodes} nodes, ${ms} ms; ${this.stats.captures} so far)`);
    } catch (e) {
      const reason = (e as Error).message;
      this.graphs.set(key, { failed: reason });
      this.stats.failures++;
      this.options.onProgress?.(`cuda graph: capturing ${what} failed, those steps run eagerly: ${reason}`);
    }
  }

  /** Uploads the step's inputs (asynchronous; the replay or eager ops come after in stream order). */
  private upload(v: BucketViews, bucket: number): void {
    const s = this.statics!;
    s.ints.copyFromAsync(this.host.ints);
    v.tables.copyFromAsync(this.host.tables.subarray(0, bucket * this.width));
    s.temperature.copyFromAsync(this.host.temperature);
    s.topP.copyFromAsync(this.host.topP);
    s.seeds.copyFromAsync(this.host.seeds);
  }

  private ensureStatics(): Statics {
    if (this.statics) return this.statics;
    const M = this.host.maxBucket, W = this.width;
    const lora = this.model.lora;
    const made: Tensor[] = [];
    const make = (t: Tensor) => (made.push(t), t);
    try {
      const ints = make(addon.empty('i32', [this.host.ints.length], 'cuda'));
      const tables = make(addon.empty('i32', [M, W], 'cuda'));
      const temperature = make(addon.empty('f32', [M], 'cuda'));
      const topP = make(addon.empty('f32', [M], 'cuda'));
      const seeds = make(addon.empty('i64', [M], 'cuda'));
      const ws = new Workspace(this.model.config, this.model.placement, M, M, lora?.widths);
      this.statics = { lora, ints, tables, temperature, topP, seeds, ws, views: new Map() };
      return this.statics;
    } catch (e) {
      made.forEach((t) => t.dispose());
      throw e;
    }
  }

  private viewsFor(bucket: number): BucketViews {
    const s = this.statics!;
    const cached = s.views.get(bucket);
    if (cached) return cached;
    const owned: Tensor[] = [];
    const own = (t: Tensor) => (owned.push(t), t);
    const B = bucket;
    const field = (name: (typeof DecodeInputs.FIELDS)[number]) => own(s.ints.narrow(this.host.offset(name), B));
    const rowSlots = field('rowSlots');
    const step: StepTensors = {
      numTokens: B,
      tokens: field('tokens'),
      positions: field('positions'),
      slots: field('slots'),
      queryStarts: own(s.ints.narrow(this.host.queryStartsOffset(), B + 1)),
      contextLens: field('contextLens'),
      blockTables: own(s.tables.narrow(0, B)),
      logitRows: field('logitRows'),
      // Decode: one token per sequence, so logit row r is token row r and has its slot.
      lora: { rowSlots, logitSlots: rowSlots, embedRows: field('embedRows') },
      dispose: () => {},  // the views are the runner's
    };
    const v: BucketViews = {
      step,
      temperature: own(s.temperature.narrow(0, B)),
      topK: field('topK'),
      topP: own(s.topP.narrow(0, B)),
      seeds: own(s.seeds.narrow(0, B)),
      steps: field('steps'),
      ids: own(this.ids.narrow(0, B)),
      fromRows: field('fromRows'),
      tables: step.blockTables,
      owned,
    };
    s.views.set(bucket, v);
    return v;
  }
}

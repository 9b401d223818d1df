// The engine: requests in, one scheduled step at a time, token outputs out. It runs on the
// engine thread (worker.ts); nothing here waits on I/O.
import { BlockManager } from './block_manager.js';
import { warmUpSizes } from './eager_warmup.js';
import type { GraphStats } from './graph_runner.js';
import { cudaGraphsSetting, loraGemmRowsSetting, overlapSetting, profileSetting } from './options.js';
import { ModelRunner, type Launched, type Sampled } from './runner.js';
import { Scheduler, type ScheduledSeq } from './scheduler.js';
import { Sequence } from './sequence.js';
import { StepPhases, type StepPhase } from './step_phases.js';
import type { EngineStats, GenerateRequest, ModelInfo, RequestOutput } from './types.js';
import { addon, opTimes } from '../addon/index.js';
import { KvCache, type Model } from '../models/index.js';
import { LoraManager, type LoraOptions } from '../lora/manager.js';

export interface EngineLimits {
  maxModelLen: number;
  maxBatchSize: number;
  maxNumBatchedTokens: number;
  blockSize: number;
  numBlocks: number;
  prefixCache: boolean;
  /** Present: LoRA on, with this pool. Absent: no adapter code runs at all. */
  lora?: LoraOptions;
  /**
   * Decode steps as replayed CUDA graphs where the model is on cuda (default true).
   * MSTAR_CUDA_GRAPHS=0 in the environment turns them off whatever this says.
   */
  cudaGraphs?: boolean;
  /**
   * Each decode step is enqueued before the previous one's samples are read, so the GPU
   * never waits for the host between decode steps (default: where the model is on cuda).
   * MSTAR_OVERLAP=0 in the environment turns it off whatever this says.
   */
  overlapSteps?: boolean;
}

export interface EngineHooks {
  /** Occasional lines worth a log: CUDA graph captures (at captureGraphs, or on a bucket's first use). */
  onProgress?: (message: string) => void;
}

export class EngineError extends Error {
  override name = 'EngineError';
}

export class Engine {
  readonly info: ModelInfo;
  private readonly blocks: BlockManager;
  private readonly scheduler: Scheduler;
  private readonly runner: ModelRunner;
  private readonly seqs = new Map<string, Sequence>();
  private steps = 0;
  private readonly overlap: boolean;
  /** The decode step launched last, whose samples are read during the next step. */
  private inFlight?: Launched;
  /**
   * A launched step whose samples the host reads before it schedules again (with overlapped
   * steps: read once its fence passed, the engine thread never blocking on it).
   */
  private due?: Launched;
  /** A scheduled batch with prefill chunks, launched once `due` (the step before it) is read. */
  private planned?: readonly ScheduledSeq[];
  readonly lora?: LoraManager;
  /** MSTAR_PROFILE: host time of step()'s parts. */
  private readonly phases = profileSetting() ? new StepPhases() : undefined;
  /** Waiting requests whose adapter could no longer be read from disk: ended by this step. */
  private unreadable: Sequence[] = [];

  constructor(readonly model: Model, readonly limits: EngineLimits, callbacks: EngineHooks = {}) {
    const c = model.config;
    this.info = { family: c.family, maxModelLen: limits.maxModelLen, vocabSize: c.vocabSize, eosTokenIds: c.eosTokenIds };
    this.blocks = new BlockManager(limits.numBlocks, limits.blockSize, limits.prefixCache);
    if (limits.lora) {
      this.lora = new LoraManager(model, limits.lora);
      model.lora = this.lora.weights;
      model.loraGemmRows = loraGemmRowsSetting(c.hiddenSize);
    }
    const lora = this.lora;
    const hooks = lora && {
      acquire: (seq: Sequence): boolean => {
        if (seq.adapterKey === null) return true;
        const slot = lora.acquire(seq.adapterKey);
        if (slot === 'failed') {
          this.unreadable.push(seq);
          return false;
        }
        if (slot === null) return false;
        seq.slot = slot;
        return true;
      },
      release: (seq: Sequence): void => {
        if (seq.slot > 0) lora.release(seq.slot);
        seq.slot = 0;
      },
    };
    this.scheduler = new Scheduler(this.blocks, limits, (seq) => this.salt(seq), hooks);
    const cudaGraphs = cudaGraphsSetting(limits.cudaGraphs);
    this.overlap = overlapSetting(limits.overlapSteps, model.placement.device === 'cuda');
    this.runner = new ModelRunner(model, new KvCache(c, limits.numBlocks, limits.blockSize, model.placement), {
      cudaGraphs,
      profile: profileSetting(),
      maxBatchSize: limits.maxBatchSize,
      maxNumBatchedTokens: limits.maxNumBatchedTokens,
      maxModelLen: limits.maxModelLen,
      blockSize: limits.blockSize,
      onProgress: callbacks.onProgress,
    });
  }

  /** CUDA graph counters; undefined when graphs are off (or the model is not on cuda). */
  graphStats(): GraphStats | undefined {
    return this.runner.graphStats();
  }

  /**
   * Captures every decode graph now (each batch-size bucket, with and without the LoRA
   * ops), reporting each through onProgress, instead of on each bucket's first use, where a
   * request would wait for it. Returns how many it captured (0 where graphs are off).
   */
  captureGraphs(): number {
    // Its warm-up steps overwrite the id buffer a launched step's successor reads.
    if (this.inFlight || this.due) throw new EngineError('captureGraphs: a step is in flight; capture before the first step');
    return this.runner.graphs?.captureAll() ?? 0;
  }

  /**
   * On cuda, runs each eager step shape once (ModelRunner.warmUpEager: every row count up to
   * addon.gemmTunedRows and each cuBLASLt row bucket up to max_num_batched_tokens), so that no
   * request's step meets a GEMM shape first. After captureGraphs: its warm-ups time the decode
   * shapes' algorithms, which a plan made here first would keep untimed. Returns the steps run.
   */
  warmUpEagerSteps(): number {
    if (this.inFlight || this.due) throw new EngineError('warmUpEagerSteps: a step is in flight; warm up before the first step');
    if (this.model.placement.device !== 'cuda') return 0;
    const max = this.limits.maxNumBatchedTokens;
    return this.runner.warmUpEager(warmUpSizes(max, addon.gemmRowBuckets(max)));
  }

  /** Frees the graphs, the KV cache and the adapter pool (printing MSTAR_PROFILE's summary); no step may follow. */
  close(): void {
    // Their steps have run before their buffers go.
    this.inFlight?.sampled();
    this.due?.sampled();
    this.inFlight = this.due = this.planned = undefined;
    if (this.phases) console.error(this.phases.line());
    if (opTimes) console.error(opTimes.line(this.steps ? 'from the first step on' : 'no step ran'));
    this.runner.close();
    this.runner.kv.dispose();
    if (this.lora) {
      if (this.model.lora === this.lora.weights) this.model.lora = undefined;  // a later engine on the model makes its own
      this.lora.dispose();
    }
  }

  /** Queues a request; throws EngineError (changing nothing) if it can never run. */
  add(req: GenerateRequest): void {
    const { promptIds, params } = req;
    const fail = (msg: string): never => { throw new EngineError(`request ${req.id}: ${msg}`); };
    if (this.seqs.has(req.id)) fail('a request with this id is already running');
    if (promptIds.length === 0) fail('the prompt is empty');
    const bad = promptIds.findIndex((t) => !Number.isInteger(t) || t < 0 || t >= this.info.vocabSize);
    if (bad >= 0) fail(`prompt token ${bad} (${promptIds[bad]}) is not in the vocabulary [0, ${this.info.vocabSize})`);
    const total = promptIds.length + params.maxTokens;
    if (total > this.limits.maxModelLen) {
      fail(`prompt (${promptIds.length} tokens) + max_tokens (${params.maxTokens}) exceeds the model's ${this.limits.maxModelLen}-token limit`);
    }
    if (this.blocks.blocksFor(total) > this.limits.numBlocks) {
      fail(`needs ${this.blocks.blocksFor(total)} KV blocks but the cache has only ${this.limits.numBlocks}`);
    }
    if (params.seed !== null && !Number.isSafeInteger(params.seed)) fail(`seed ${params.seed} is not an integer`);
    // The sampler trusts these (a NaN temperature made the CUDA one read scratch it never wrote).
    if (!(params.temperature >= 0 && params.temperature < Infinity)) fail(`temperature ${params.temperature} is not a number >= 0`);
    if (!(params.topP > 0 && params.topP <= 1)) fail(`top_p ${params.topP} is not in (0, 1]`);
    if (!Number.isInteger(params.topK) || params.topK < 0) fail(`top_k ${params.topK} is not an integer >= 0`);
    if (req.adapter !== undefined && !this.lora) fail(`names adapter ${req.adapter} but LoRA is not enabled`);
    // Everything that can throw comes before the adapter is retained: a refused request holds nothing.
    const seq = new Sequence(req.id, [...promptIds], params, Date.now());
    seq.adapterKey = req.adapter === undefined ? null : this.lora!.retain(req.adapter) ?? fail(`unknown adapter ${req.adapter}`);
    this.seqs.set(req.id, seq);
    this.scheduler.add(seq);
  }

  /** Stops a request now and frees its blocks; returns its final output, if it was known. */
  abort(id: string): RequestOutput | undefined {
    const seq = this.seqs.get(id);
    if (!seq) return undefined;
    this.finish(seq);
    return this.output(seq, [], undefined, 'abort');
  }

  hasWork(): boolean {
    return this.scheduler.running.length + this.scheduler.waiting.length > 0;
  }

  /** Whether the next step() waits for samples the GPU is still making (call it again soon: it does not block). */
  awaitingGpu(): boolean {
    return this.due !== undefined && !this.due.ready();
  }

  /** Whether a launched step's samples are still to be read, made or not (the next step() reads them). */
  hasDue(): boolean {
    return this.due !== undefined;
  }

  /**
   * Schedules and launches one step; returns the outputs read meanwhile. With overlapped
   * steps, a decode step is enqueued first, then the samples of the step before are read
   * (their outputs are the ones returned), so each sequence has a token the host has not
   * read (Sequence.unread) while its next step is scheduled: the step takes it on the
   * device. A sequence that stops on that token has run one row too many, which is dropped.
   * A step with prefill chunks reads the step before first, and its own samples are read
   * before the next step is scheduled (as every step's are without overlap): its hundreds
   * of ops take the host milliseconds to enqueue, and its tokens, first tokens mostly, read
   * one step later waited for the next step's launch (TTFT p50 at 64 requests rose by a
   * fifth to a third).
   * With overlap the thread never blocks on the GPU: samples not made yet end the call
   * (awaitingGpu() says so) and the next call goes on from there. Samples read at the start
   * of a call are returned at once, and the next call schedules: a prefill's first tokens
   * then wait for no other step's host work (returned after the next launch, TTFT p50 at
   * 64 churned requests measured 54 / 45 ms against 49 / 42 ms for the blocking engine, on
   * one machine; returned at once, 42 ms in the final run, bench/RESULTS.md).
   */
  step(): RequestOutput[] {
    const outputs: RequestOutput[] = [];
    if (this.due && (!this.readDue(outputs) || outputs.length > 0)) return outputs;
    let batch = this.planned;
    const fromPlan = batch !== undefined;
    this.planned = undefined;
    if (!batch) {
      batch = this.timed('schedule', () => {
        if (this.lora) this.takeTurns(this.lora);
        const scheduled = this.scheduler.schedule();
        this.lora?.settle();
        return scheduled;
      });
      outputs.push(...this.endUnreadable());
    }
    const prev = this.inFlight;
    this.inFlight = undefined;
    const overlapped = this.overlap && batch.length > 0 && batch.every((e) => e.count === 1 && e.samples);
    if (prev && !overlapped) {
      this.due = prev;
      this.planned = batch.length > 0 ? batch : undefined;  // (an empty one left behind would stand for a later schedule)
      return this.readDue(outputs) ? [...outputs, ...this.step()] : outputs;
    }
    batch = batch.filter((e) => e.seq.status !== 'finished');  // (aborted while planned)
    if (batch.length === 0) return fromPlan ? [...outputs, ...this.step()] : outputs;
    if (opTimes && this.steps === 0) {
      // What loading and graph capture cost, apart from what serving does.
      console.error(opTimes.line('before the first step'));
      opTimes.reset();
    }
    // (Without merge_after_steps, no step pays for the rows' slots and the waiting queue's scan.)
    const slots = this.lora?.canMerge ? batch.map((e) => e.seq.slot) : undefined;
    if (slots) this.mergeOrNot(this.lora!, batch, slots);
    // merge_after_steps 'auto' weighs decode steps' GPU times.
    const watch = slots && this.lora!.timesSteps ? this.lora!.timeStep(slots, batch.every((e) => e.count === 1)) : undefined;
    let launched: Launched;
    try {
      launched = this.timed('launch', () => this.runner.launch(batch, prev));
    } finally {
      watch?.stop();
    }
    this.advance(batch);
    this.register(batch);
    if (overlapped) this.inFlight = launched;
    this.due = overlapped ? prev : launched;
    this.readDue(outputs);
    return outputs;
  }

  /**
   * Reads the due step's samples into outputs; false (nothing read) where they are not made
   * yet and steps overlap. Without overlap it waits for them.
   */
  private readDue(outputs: RequestOutput[]): boolean {
    if (!this.due) return true;
    if (this.overlap && !this.due.ready()) return false;
    const due = this.due;
    this.due = undefined;
    outputs.push(...this.timed('read', () => this.read(due)));
    return true;
  }

  /** f(), its host time counted towards `phase` when profiling. */
  private timed<T>(phase: StepPhase, f: () => T): T {
    return this.phases ? this.phases.time(phase, f) : f();
  }

  /** After a step is enqueued: its tokens count as computed; its samples are unread. */
  private advance(batch: readonly ScheduledSeq[]): void {
    this.steps++;
    for (const e of batch) {
      e.seq.numComputed = e.start + e.count;
      if (e.samples) e.seq.unread++;
    }
  }

  /** Offers the sequences' newly full blocks to the prefix cache (those whose tokens are read). */
  private register(batch: readonly ScheduledSeq[]): void {
    for (const e of batch) if (e.seq.status !== 'finished') this.blocks.registerFull(e.seq, this.salt(e.seq));
  }

  /** Reads a launched step's samples into its sequences (whose blocks they may complete). */
  private read(launched: Launched): RequestOutput[] {
    const outputs = this.take(launched.batch, launched.sampled());
    this.register(launched.batch);
    return outputs;
  }

  /**
   * Each sampling entry's token, in order: appended to its sequence (unless it finished
   * meanwhile: aborted, or stopped on its previous token), which stops if it should.
   */
  private take(batch: readonly ScheduledSeq[], sampled: Sampled[]): RequestOutput[] {
    const outputs: RequestOutput[] = [];
    let i = 0;
    for (const e of batch) {
      if (!e.samples) continue;
      const s = sampled[i++];
      const seq = e.seq;
      seq.unread--;
      if (seq.status === 'finished') continue;
      seq.outputIds.push(s.tokenId);
      const reason = this.stopReason(seq, s.tokenId);
      if (reason) this.finish(seq);
      const stopToken = reason === 'stop' ? s.tokenId : undefined;
      outputs.push(this.output(seq, [s.tokenId], s.logprob ? [s.logprob] : undefined, reason, stopToken));
    }
    return outputs;
  }

  /**
   * Time slices of the adapter slots: when every slot is pinned and the longest-held
   * slot's slice is over, that slot's requests pause (keeping their KV) and the slot goes
   * to the adapter of the oldest request waiting for one (whose host copy is read), kept
   * for it until its requests come in. Until the slice is over, that adapter's copy to the
   * device starts ahead, beside the steps.
   */
  private takeTurns(lora: LoraManager): void {
    lora.tick();
    const waiter = this.scheduler.waiting.find((s) => s.adapterKey !== null && lora.canTakeTurn(s.adapterKey));
    if (!waiter) return;
    const slot = lora.turnReady();
    if (slot === undefined) {
      lora.prepareTurn(waiter.adapterKey!);
      return;
    }
    this.scheduler.pause((s) => s.slot === slot);
    lora.handOver(slot, waiter.adapterKey!);
  }

  /** Merges the adapter that the steps have run alone for a while, or unmerges (LoraManager.beforeStep). */
  private mergeOrNot(lora: LoraManager, batch: readonly ScheduledSeq[], slots: readonly number[]): void {
    const key = batch[0].seq.adapterKey, left = Math.max(...batch.map((e) => e.seq.tokensLeft(this.limits.maxModelLen)));
    lora.beforeStep(slots, this.scheduler.waiting.some((s) => s.adapterKey !== key), left);
  }

  stats(): EngineStats {
    return {
      running: this.scheduler.running.length,
      waiting: this.scheduler.waiting.length,
      kvBlocksTotal: this.blocks.numBlocks,
      kvBlocksUsed: this.blocks.usedBlocks,
      preemptions: this.scheduler.preemptions,
      prefixCacheQueries: this.blocks.queries,
      prefixCacheHits: this.blocks.hits,
      steps: this.steps,
      lora: this.lora && {
        ...this.lora.stats(),
        waitingForSlot: this.scheduler.waiting.filter((s) => s.adapterKey !== null && !this.lora!.isResident(s.adapterKey)).length,
      },
    };
  }

  /** Prefix-cache salt: what besides the tokens changes a sequence's KV — its adapter. */
  private salt(seq: Sequence): string {
    return seq.adapterKey ?? '';
  }

  private stopReason(seq: Sequence, token: number): 'stop' | 'length' | undefined {
    const p = seq.params;
    const n = seq.outputIds.length;
    if (n >= p.minTokens) {
      if (!p.ignoreEos && this.info.eosTokenIds.includes(token)) return 'stop';
      if (p.stopTokenIds.includes(token)) return 'stop';
    }
    if (n >= p.maxTokens || seq.promptIds.length + n >= this.limits.maxModelLen) return 'length';
    return undefined;
  }

  private finish(seq: Sequence): void {
    this.scheduler.remove(seq);
    seq.status = 'finished';
    this.seqs.delete(seq.id);
    if (seq.adapterKey !== null) this.lora!.unretain(seq.adapterKey);
  }

  /** Registers a PEFT adapter under `name`; rejects with AdapterError, changing nothing, if refused. */
  async loadAdapter(name: string, path: string): Promise<void> {
    if (!this.lora) throw new EngineError('LoRA is not enabled (add resources.lora to the config)');
    await this.lora.register(name, path);
  }

  /** Ends, with the reason, the requests whose adapter could not be read back or loaded. */
  private endUnreadable(): RequestOutput[] {
    const seqs = [...new Set(this.unreadable)].filter((s) => this.seqs.has(s.id));
    this.unreadable = [];
    const why = new Map<string, string>();
    for (const s of seqs) if (!why.has(s.adapterKey!)) why.set(s.adapterKey!, this.lora!.takeFailure(s.adapterKey!) ?? 'adapter unavailable');
    return seqs.map((seq) => {
      this.finish(seq);
      return { ...this.output(seq, [], undefined, 'abort'), error: why.get(seq.adapterKey!) };
    });
  }

  /** New requests can no longer name it; queued and running ones finish on it first. */
  unloadAdapter(name: string): boolean {
    return this.lora?.unregister(name) ?? false;
  }

  private output(
    seq: Sequence, newTokenIds: number[], logprobs: RequestOutput['logprobs'], finishReason?: RequestOutput['finishReason'],
    stopTokenId?: number,
  ): RequestOutput {
    return {
      id: seq.id, newTokenIds, logprobs, finishReason, stopTokenId,
      promptTokens: seq.promptIds.length, cachedPromptTokens: seq.cachedPromptTokens, outputTokens: seq.outputIds.length,
    };
  }
}

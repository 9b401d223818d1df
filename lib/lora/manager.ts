// The adapter pool as the engine sees it: registered adapters (name → path, checked once),
// a host cache of read adapters (LRU), and the GPU slots (SlotTable + SlotWeights).
import { performance } from 'node:perf_hooks';

import type { Model } from '../models/index.js';
import { readAdapter, type AdapterLimits } from './adapter.js';
import { AdapterError } from './errors.js';
import { HostAdapter } from './host_adapter.js';
import { MergeCosts, type Stopwatch } from './merge_costs.js';
import { MergedWeights } from './merged_weights.js';
import { MergePolicy } from './merge_policy.js';
import { SlotTable } from './slots.js';
import { SlotWeights } from './slot_weights.js';

export interface LoraOptions {
  slots: number;
  maxRank: number;
  hostCache: number;
  targets: string[];
  /**
   * Engine steps an adapter keeps a pinned slot before a waiting adapter may take it over
   * (serve.yaml's slice_steps, default 16). Shorter slices cut the waiting requests' stalls
   * (churn's ITL p99 is about a slice) and cost throughput: on 8B, 8 steps halved ITL p99 for
   * ~2 points of churn retention, 4 steps added 1.3 ms to every step (bench/RESULTS.md).
   */
  sliceSteps?: number;
  /**
   * Steps in a row that run one adapter alone before it is merged into the weights, so that
   * its steps cost what steps without adapters do (serve.yaml's merge_after_steps; absent:
   * never merged, and no copy of the adapted weights is kept for it). 'auto': once the run
   * has paid in adapter overhead what a merge and an unmerge cost, both measured as it runs.
   */
  mergeAfterSteps?: number | 'auto';
}

const SLICE_STEPS = 16;

export interface LoraStats {
  registered: number;
  resident: number;
  loads: number;
  evictions: number;
  loadSeconds: number;
  /** Pinned slots handed to a waiting adapter at the end of a time slice (their requests paused). */
  turns: number;
  /** Adapters merged into the weights (each for a run of steps that ran it alone). */
  merges: number;
  /** Steps launched with an adapter merged. */
  mergedSteps: number;
  /** merge_after_steps 'auto': what a merge and its unmerge of every adapted weight take (ms), as measured. */
  mergeMs?: number;
  /** merge_after_steps 'auto': ms a decode step of one adapter's rows, unmerged, takes over one without adapter work, by row bucket, where known. */
  stepOverheadMs?: { rows: number; ms: number }[];
}

interface Registered {
  name: string;
  path: string;
  /** Unique per registration: a re-registered name never reuses stale slot contents. */
  key: string;
}

export class LoraManager {
  readonly weights: SlotWeights;
  /** Present where adapters may be merged into the weights (mergeAfterSteps). */
  private readonly merged?: MergedWeights;
  private readonly mergePolicy?: MergePolicy;
  /** Present where merge_after_steps is 'auto': the step and merge times it weighs. */
  private readonly costs?: MergeCosts;
  private readonly table: SlotTable;
  private readonly limits: AdapterLimits;
  private readonly byName = new Map<string, Registered>();
  private readonly byKey = new Map<string, Registered>();
  private readonly host = new Map<string, HostAdapter>();  // insertion order = LRU order
  /** Requests (waiting or running) per adapter key: an unloaded adapter stays until they end. */
  private readonly users = new Map<string, number>();
  /** Keys being read back from disk, and keys whose read-back failed (with why). */
  private readonly reading = new Set<string>();
  private readonly failed = new Map<string, string>();
  private generation = 0;
  /** The engine's step count: time slices are measured in steps. */
  private step = 0;
  loads = 0;
  loadSeconds = 0;
  turns = 0;
  mergedSteps = 0;

  constructor(private readonly model: Model, readonly options: LoraOptions) {
    this.limits = { maxRank: options.maxRank, targets: new Set(options.targets) };
    this.table = new SlotTable(options.slots);
    this.weights = new SlotWeights(model.config, options.slots + 1, options.maxRank, this.limits.targets, model.weights, model.placement);
    if (options.mergeAfterSteps === undefined) return;
    try {
      const merged = this.merged = new MergedWeights(this.weights);
      if (options.mergeAfterSteps !== 'auto') {
        this.mergePolicy = new MergePolicy(options.mergeAfterSteps);
        return;
      }
      const costs = this.costs = new MergeCosts(model.placement.device);
      this.mergePolicy = new MergePolicy('auto', {
        overhead: (rows) => costs.overhead(rows),
        mergeCost: (slot) => costs.mergeCost(merged.bytesOf(slot)),
      });
      // What a merge costs, known from the start: no run has to merge only to learn it. The
      // first rehearsal is untimed: it takes the kernels' first launches (their code loading,
      // a shared-memory attribute set once), which later merges do not pay.
      merged.rehearse((_kind, _bytes, f) => f());
      merged.rehearse((kind, bytes, f) => this.timed(kind, bytes, f));
    } catch (e) {
      this.costs?.dispose();
      this.merged?.dispose();
      this.weights.dispose();
      throw e;
    }
  }

  /**
   * ms a merge and its unmerge of every adapted weight take, as measured (merge_after_steps
   * 'auto', once the GPU has run the rehearsal); undefined otherwise.
   */
  mergeCostMs(): number | undefined {
    this.costs?.collect();
    return this.mergeMs();
  }

  private mergeMs(): number | undefined {
    const cost = this.merged && this.costs?.mergeCost(this.merged.bytes);
    return cost && cost.merge + cost.unmerge;
  }

  /** Frees the slots and the host copies (the engine closes); reads still in flight dispose what they bring. */
  dispose(): void {
    this.costs?.dispose();
    this.merged?.dispose();
    this.weights.dispose();
    for (const h of this.host.values()) h.dispose();
    this.host.clear();
    this.byKey.clear();
    this.byName.clear();
  }

  /** Reads and checks an adapter (the tensor bytes on libuv threads); on any error nothing changes. */
  async register(name: string, path: string): Promise<void> {
    const taken = () => new AdapterError(`adapter ${name} is already loaded (from ${this.byName.get(name)!.path})`);
    if (this.byName.has(name)) throw taken();
    const host = await HostAdapter.read(readAdapter(name, path, this.model.config, this.limits), this.weights);
    if (this.byName.has(name)) {  // registered by a concurrent call while this one read
      host.dispose();
      throw taken();
    }
    const reg = { name, path, key: `${name}#${++this.generation}` };
    this.byName.set(name, reg);
    this.byKey.set(reg.key, reg);
    this.cache(reg.key, host);
  }

  /** Forgets an adapter by name at once; requests already queued or running on it finish first. */
  unregister(name: string): boolean {
    const reg = this.byName.get(name);
    if (!reg) return false;
    this.byName.delete(name);
    if (!this.users.has(reg.key)) this.forget(reg.key);
    return true;
  }

  /** A request starts using the adapter registered under `name`; returns its key. */
  retain(name: string): string | undefined {
    const key = this.byName.get(name)?.key;
    if (key !== undefined) this.users.set(key, (this.users.get(key) ?? 0) + 1);
    return key;
  }

  /** A request on `key` ended. */
  unretain(key: string): void {
    const n = (this.users.get(key) ?? 0) - 1;
    if (n > 0) {
      this.users.set(key, n);
      return;
    }
    this.users.delete(key);
    const reg = this.byKey.get(key);
    if (reg && this.byName.get(reg.name) !== reg) this.forget(key);
  }

  /** Whether a request on `key` could take a slot now without waiting. */
  isResident(key: string): boolean {
    return this.table.slotOf(key) !== undefined;
  }

  private forget(key: string): void {
    this.failed.delete(key);
    this.byKey.delete(key);
    this.table.drop(key);
    this.host.get(key)?.dispose();
    this.host.delete(key);
  }

  keyOf(name: string): string | undefined {
    return this.byName.get(name)?.key;
  }

  list(): { name: string; path: string }[] {
    return [...this.byName.values()].map(({ name, path }) => ({ name, path }));
  }

  /**
   * A pinned slot with the adapter in it; null when the request must wait (for a slot, or
   * for the adapter to come back from disk into the host cache); 'failed' when it cannot
   * be read any more.
   */
  acquire(key: string): number | null | 'failed' {
    if (this.failed.has(key)) return 'failed';
    if (!this.isResident(key) && !this.host.has(key)) {
      this.readBack(key);
      return null;
    }
    const got = this.table.acquire(key, this.step);
    if (!got) return null;
    if (got.load && !this.loadInto(got.slot, key, () => this.table.release(got.slot))) return 'failed';
    return got.slot;
  }

  /** Called once per engine step, before scheduling. */
  tick(): void {
    this.step++;
  }

  /** Whether adapters may be merged into the weights (mergeAfterSteps): only then is beforeStep called. */
  get canMerge(): boolean {
    return this.merged !== undefined;
  }

  /**
   * Before a step is launched, with each of its rows' slots: merges the adapter that has run
   * alone long enough, or unmerges the one merged where the step runs anything else (in
   * stream order, before the step). othersWaiting: a waiting request runs something else.
   * left: the most steps the rows may still take (their max_tokens left), which 'auto' weighs.
   */
  beforeStep(slots: readonly number[], othersWaiting: boolean, left?: number): void {
    if (!this.merged || slots.length === 0) return;
    this.costs?.collect();
    const merged = this.merged, only = slots.every((s) => s === slots[0]) ? slots[0] : 0;
    const act = this.mergePolicy!.next(only, merged.slot, othersWaiting, slots.length, left);
    // A slot that cannot merge (an adapter on the embedding or lm_head) must not run on another's merge.
    if (act !== undefined && act > 0 && merged.mergeable(act)) this.timed('merge', merged.bytesOf(act), () => merged.merge(act));
    else if (act !== undefined && merged.slot > 0) this.timed('unmerge', merged.bytesOf(merged.slot), () => merged.unmerge());
    if (merged.slot > 0) this.mergedSteps++;
  }

  /** Whether steps are timed (merge_after_steps 'auto': timeStep). */
  get timesSteps(): boolean {
    return this.costs !== undefined;
  }

  /**
   * With merge_after_steps 'auto', a stopwatch for the decode step about to be launched with
   * these rows' slots, where it runs one kind of rows (none adapted, or one adapter's
   * unmerged); the caller stops it once the step is enqueued. Else undefined.
   */
  timeStep(slots: readonly number[], decode: boolean): Stopwatch | undefined {
    if (!this.costs || !decode || slots.length === 0) return undefined;
    const run = slots.map((s) => this.weights.runSlot(s));
    if (!run.every((s) => s === run[0])) return undefined;
    return this.costs.start(run[0] === 0 ? 'plain' : 'adapted', slots.length);
  }

  /** f() (a merge or unmerge of `bytes`), timed where merge_after_steps is 'auto'. */
  private timed(kind: 'merge' | 'unmerge', bytes: number, f: () => void): void {
    const watch = this.costs?.start(kind, bytes);
    try {
      f();
    } finally {
      watch?.stop();
    }
  }

  /** Called once per engine step, after scheduling: slots now running their adapter keep no reservation. */
  settle(): void {
    this.table.settle();
  }

  /**
   * The pinned slot whose time slice is over, which a waiting adapter may take now, or
   * undefined. The engine pauses the slot's requests, then hands it over.
   */
  turnReady(): number | undefined {
    return this.table.turnOver(this.step, this.sliceSteps);
  }

  /** Whether requests waiting on `key` could take a slot turn now (starts reading it back if it must). */
  canTakeTurn(key: string): boolean {
    if (this.failed.has(key) || this.isResident(key)) return false;
    if (this.host.has(key)) return true;
    this.readBack(key);
    return false;
  }

  /**
   * Starts copying `key`'s host copy towards the device ahead of its hand-over (it waits for
   * a slot whose time slice runs on), so that the copy overlaps the steps until then.
   */
  prepareTurn(key: string): void {
    const h = this.host.get(key);
    if (h) this.weights.stage(h);
  }

  /** Puts `key` into `slot`, which no request pins any more; false if the copy failed. */
  handOver(slot: number, key: string): boolean {
    this.table.replace(slot, key, this.step, this.sliceSteps);
    if (!this.loadInto(slot, key)) return false;
    this.turns++;
    return true;
  }

  private get sliceSteps(): number {
    return this.options.sliceSteps ?? SLICE_STEPS;
  }

  /**
   * Copies the host copy of `key` into `slot` (just given to it). On failure the slot is
   * given back empty (`unpin` first undoes the caller's pin) and the adapter fails.
   */
  private loadInto(slot: number, key: string, unpin = () => {}): boolean {
    const t0 = performance.now();
    if (this.merged?.slot === slot) this.merged.unmerge();
    this.mergePolicy?.forget(slot);
    try {
      this.weights.load(slot, this.hostAdapter(key));
    } catch (e) {
      unpin();
      this.table.drop(key);
      this.weights.clear(slot);
      this.failed.set(key, `adapter ${this.byKey.get(key)?.name} could not be copied into slot ${slot}: ${(e as Error).message}`);
      return false;
    }
    this.loadSeconds += (performance.now() - t0) / 1000;
    this.loads++;
    return true;
  }

  /**
   * Why an adapter could not be read back or loaded; reading it forgets the failure, so a
   * later request tries again (the disk may have recovered).
   */
  takeFailure(key: string): string | undefined {
    const why = this.failed.get(key);
    this.failed.delete(key);
    return why;
  }

  release(slot: number): void {
    this.table.release(slot);
  }

  stats(): LoraStats {
    return {
      registered: this.byName.size, resident: this.table.resident, loads: this.loads, evictions: this.table.evictions,
      loadSeconds: this.loadSeconds, turns: this.turns, merges: this.merged?.merges ?? 0, mergedSteps: this.mergedSteps,
      ...(this.costs && { mergeMs: this.mergeMs(), stepOverheadMs: this.costs.overheads() }),
    };
  }

  /** The host copy of a key (present: acquire checked), moved to the LRU's young end. */
  private hostAdapter(key: string): HostAdapter {
    const h = this.host.get(key)!;
    this.host.delete(key);
    this.cache(key, h);
    return h;
  }

  /** Starts reading an evicted adapter back from disk (once); acquire succeeds when it lands. */
  private readBack(key: string): void {
    if (this.reading.has(key)) return;
    const reg = this.byKey.get(key)!;
    this.reading.add(key);
    // readAdapter throws synchronously (folder gone, header changed): chain it so that
    // failure, too, ends only the requests on this adapter, never the engine.
    Promise.resolve().then(() => readAdapter(reg.name, reg.path, this.model.config, this.limits))
      .then((adapter) => HostAdapter.read(adapter, this.weights)).then(
      (h) => {
        this.reading.delete(key);
        if (this.byKey.has(key)) this.cache(key, h);
        else h.dispose();
      },
      (e: Error) => {
        this.reading.delete(key);
        this.failed.set(key, `adapter ${reg.name} could not be read back from ${reg.path}: ${e.message}`);
      },
    );
  }

  private cache(key: string, h: HostAdapter): void {
    this.host.set(key, h);
    // Oldest first; the one just cached stays (a waiting request is about to take it).
    for (const [k, old] of this.host) {
      if (this.host.size <= Math.max(1, this.options.hostCache)) break;
      if (k === key) continue;
      old.dispose();
      this.host.delete(k);
    }
  }
}

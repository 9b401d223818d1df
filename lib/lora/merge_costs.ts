// What merge_after_steps: auto decides by (merge_policy.ts), measured as the engine runs: the
// GPU time of decode steps by their number of rows (a power-of-two bucket), those whose rows
// all run one adapter unmerged against those with no adapter work (base rows, or an adapter
// merged: the same kernels), and what a merge and an unmerge take a byte of the weights they
// rewrite. Steps are timed on the GPU (a timer's two marks around the launch) and read once it
// has passed them, a step or two later; on the CPU, whose ops run as they are called, by the
// host clock.
import { performance } from 'node:perf_hooks';

import { addon, type DeviceName, type GpuTimer } from '../addon/index.js';

/** A running measurement: stop() after the work it times is enqueued; ms() once done(). */
export interface Stopwatch {
  stop(): void;
  done(): boolean;
  ms(): number;
}

/** Each new observation's weight in a running mean: a few steps' noise averages out, a change of load shows within ~10. */
const WEIGHT = 0.2;

/**
 * Step times of a bucket count once this many were seen: the first ones (a fresh server's
 * warm-up, a graph's first replay) run slow, and a stale plain mean above the adapted one
 * read as no overhead, so a run never merged and no plain step came to correct it (0.8^16:
 * 3% of the first sample's weight is left).
 */
export const TRUSTED_AFTER = 16;

const bucket = (rows: number) => 2 ** Math.ceil(Math.log2(Math.max(1, rows)));

class Means {
  private readonly m = new Map<number, { mean: number; n: number }>();
  constructor(private readonly trustedAfter = 1) {}
  add(key: number, v: number): void {
    const old = this.m.get(key);
    this.m.set(key, old === undefined ? { mean: v, n: 1 } : { mean: old.mean + WEIGHT * (v - old.mean), n: old.n + 1 });
  }
  get(key: number): number | undefined {
    const e = this.m.get(key);
    return e && e.n >= this.trustedAfter ? e.mean : undefined;
  }
  keys(): number[] {
    return [...this.m.keys()].sort((a, b) => a - b);
  }
}

type Kind = 'plain' | 'adapted' | 'merge' | 'unmerge';

/** ms a merge of an adapter's weights takes, and their unmerge. */
export interface MergeCost {
  merge: number;
  unmerge: number;
}

export class MergeCosts {
  /** Steps: ms by row bucket. Merges and unmerges: ms a byte of the weights they rewrite (key 0). */
  private readonly means: Record<Kind, Means> = {
    plain: new Means(TRUSTED_AFTER), adapted: new Means(TRUSTED_AFTER), merge: new Means(), unmerge: new Means(),
  };
  private readonly pending: { watch: Stopwatch; kind: Kind; size: number }[] = [];
  private readonly idle: GpuTimer[] = [];

  constructor(private readonly device: DeviceName) {}

  /** Starts timing what is enqueued next: a decode step of `rows` rows (adapted: one adapter's, unmerged), or a merge or unmerge of `bytes`. */
  start(kind: Kind, size: number): Stopwatch {
    const watch = this.device === 'cuda' ? this.gpuWatch() : hostWatch();
    this.pending.push({ watch, kind, size });
    return watch;
  }

  /** Takes in the measurements the GPU has finished (the engine calls it once a step). */
  collect(): void {
    while (this.pending.length > 0 && this.pending[0].watch.done()) {
      const { watch, kind, size } = this.pending.shift()!;
      const step = kind === 'plain' || kind === 'adapted';
      this.means[kind].add(step ? bucket(size) : 0, step ? watch.ms() : watch.ms() / size);
      if (this.device === 'cuda') this.idle.push(watch as GpuTimer);
    }
  }

  /** ms a step of `rows` rows of one adapter, unmerged, takes over one without adapter work; undefined until both are trusted. */
  overhead(rows: number): number | undefined {
    const plain = this.means.plain.get(bucket(rows)), adapted = this.means.adapted.get(bucket(rows));
    return plain === undefined || adapted === undefined ? undefined : Math.max(0, adapted - plain);
  }

  /** overhead() of every row bucket where it is known, fewest rows first. */
  overheads(): { rows: number; ms: number }[] {
    return this.means.adapted.keys().flatMap((rows) => {
      const ms = this.overhead(rows);
      return ms === undefined ? [] : [{ rows, ms }];
    });
  }

  /** ms a merge and an unmerge of `bytes` of weights take; undefined until both were seen. */
  mergeCost(bytes: number): MergeCost | undefined {
    const merge = this.means.merge.get(0), unmerge = this.means.unmerge.get(0);
    return merge === undefined || unmerge === undefined ? undefined : { merge: merge * bytes, unmerge: unmerge * bytes };
  }

  dispose(): void {
    for (const p of this.pending) if (this.device === 'cuda') (p.watch as GpuTimer).dispose();
    this.pending.length = 0;
    this.idle.forEach((t) => t.dispose());
    this.idle.length = 0;
  }

  private gpuWatch(): GpuTimer {
    const t = this.idle.pop() ?? addon.timer();
    t.start();
    return t;
  }
}

function hostWatch(): Stopwatch {
  const t0 = performance.now();
  let t1: number | undefined;
  return { stop: () => void (t1 = performance.now()), done: () => t1 !== undefined, ms: () => t1! - t0 };
}

// Continuous batching: each step, running sequences go first (decode, or the next chunk of
// their prefill), then waiting ones join in arrival order while the token budget, the
// batch size and the KV blocks allow. When blocks run out, the newest running sequence is
// preempted (its blocks freed, recomputed later), so the step never fails for lack of memory.
import type { BlockManager } from './block_manager.js';
import type { Sequence } from './sequence.js';

export interface SchedulerLimits {
  maxBatchSize: number;
  maxNumBatchedTokens: number;
  maxModelLen: number;
}

export interface ScheduledSeq {
  seq: Sequence;
  /** Tokens [start, start + count) run this step. */
  start: number;
  count: number;
  /** True when this chunk reaches the end of the sequence, so a token is sampled. */
  samples: boolean;
}

/** Per-sequence resources besides KV blocks (the adapter slot), taken at admission. */
export interface AdmissionHooks {
  /** Takes what the sequence needs to run; false if it must keep waiting (others go on). */
  acquire(seq: Sequence): boolean;
  release(seq: Sequence): void;
}

const NO_HOOKS: AdmissionHooks = { acquire: () => true, release: () => {} };

export class Scheduler {
  readonly waiting: Sequence[] = [];
  readonly running: Sequence[] = [];
  preemptions = 0;

  constructor(
    private readonly blocks: BlockManager,
    private readonly limits: SchedulerLimits,
    /** Prefix-cache salt of a sequence: everything besides tokens that changes its KV. */
    private readonly saltOf: (seq: Sequence) => string = () => '',
    private readonly hooks: AdmissionHooks = NO_HOOKS,
  ) {}

  add(seq: Sequence): void {
    this.waiting.push(seq);
  }

  /** Removes a sequence wherever it is and frees its blocks (and slot). */
  remove(seq: Sequence): void {
    const r = this.running.indexOf(seq);
    if (r >= 0) {
      this.running.splice(r, 1);
      this.hooks.release(seq);
    }
    const w = this.waiting.indexOf(seq);
    if (w >= 0) this.waiting.splice(w, 1);
    this.blocks.release(seq);
  }

  /**
   * Takes the running sequences `which` picks out of the batch, keeping their KV: they
   * wait behind everything queued and resume where they stopped. Returns how many.
   */
  pause(which: (seq: Sequence) => boolean): number {
    const paused = this.running.filter(which);
    for (const seq of paused) {
      this.running.splice(this.running.indexOf(seq), 1);
      this.hooks.release(seq);
      seq.status = 'waiting';
      this.waiting.push(seq);
    }
    return paused.length;
  }

  schedule(): ScheduledSeq[] {
    const out: ScheduledSeq[] = [];
    let budget = this.limits.maxNumBatchedTokens;
    const preemptionsBefore = this.preemptions;

    // Rows after a token not read yet (overlapped steps) may follow a stop token: they come
    // second and only take free blocks, never preempting for one (such a row waits a step,
    // until its token is read); the other running sequences come first.
    for (const speculative of [false, true]) {
      for (let i = 0; i < this.running.length && budget > 0; ) {
        const seq = this.running[i];
        // Not this pass's; or its last token is still on the GPU: it finishes once that is read.
        if (seq.unread > 0 !== speculative || seq.endsWithUnread(this.limits.maxModelLen)) {
          i++;
          continue;
        }
        const count = Math.min(seq.pending, budget);
        if (speculative && !this.blocks.reserve(seq, seq.numComputed + count)) {
          i++;  // no free block: it waits
          continue;
        }
        if (!speculative && !this.reserveOrPreempt(seq, count)) continue;  // seq itself was preempted
        out.push(this.entry(seq, count));
        budget -= count;
        i++;
      }
    }

    // After a preemption memory is short: admit nobody until the running ones have moved on.
    if (this.preemptions > preemptionsBefore) return out;
    // Arrival order; a request whose adapter has no slot yet waits without holding up the rest.
    for (let i = 0; i < this.waiting.length && budget > 0 && this.running.length < this.limits.maxBatchSize; ) {
      const seq = this.waiting[i];
      // Paused or preempted with a token still on the GPU: it rejoins once that is read.
      if (seq.unread > 0 || !this.hooks.acquire(seq)) {
        i++;
        continue;
      }
      if (seq.blocks.length === 0) {
        seq.numComputed = this.blocks.attachPrefix(seq, this.saltOf(seq));
        if (seq.outputIds.length === 0) seq.cachedPromptTokens = seq.numComputed;
      }
      const count = Math.min(seq.pending, budget);
      // Paused sequences (their adapter's slot turn is over) wait holding their KV: when
      // blocks run out, they give it up first, newest first, and recompute later.
      let reserved = this.blocks.reserve(seq, seq.numComputed + count);
      while (!reserved && this.dropPausedKv(seq)) reserved = this.blocks.reserve(seq, seq.numComputed + count);
      if (!reserved) {
        // Out of KV blocks: first come, first served. A waiting sequence holds nothing, not
        // even its cached prefix, or waiters could fill the cache between them and stall.
        this.hooks.release(seq);
        this.blocks.release(seq);
        seq.numComputed = 0;
        break;
      }
      this.waiting.splice(i, 1);
      if (!seq.lookupCounted) {
        seq.lookupCounted = true;
        this.blocks.countLookup(seq.promptIds.length, seq.cachedPromptTokens);
      }
      seq.status = 'running';
      this.running.push(seq);
      out.push(this.entry(seq, count));
      budget -= count;
    }
    return out;
  }

  /** Frees the KV of the newest waiting sequence besides `seq` that holds some; false if none does. */
  private dropPausedKv(seq: Sequence): boolean {
    for (let i = this.waiting.length - 1; i >= 0; i--) {
      const s = this.waiting[i];
      if (s === seq || s.blocks.length === 0) continue;
      this.blocks.release(s);
      s.numComputed = 0;
      this.preemptions++;
      return true;
    }
    return false;
  }

  private entry(seq: Sequence, count: number): ScheduledSeq {
    return { seq, start: seq.numComputed, count, samples: seq.numComputed + count === seq.length };
  }

  /**
   * Reserves blocks for seq's next `count` tokens: paused sequences give up their KV first
   * (newest first), then the newest runners are preempted. (Without the first, a long
   * prefill that paused KV left no room for preempted itself at every try, forever.)
   */
  private reserveOrPreempt(seq: Sequence, count: number): boolean {
    while (!this.blocks.reserve(seq, seq.numComputed + count)) {
      if (this.dropPausedKv(seq)) continue;
      const victim = this.running[this.running.length - 1];
      this.preempt(victim);
      if (victim === seq) return false;
    }
    return true;
  }

  private preempt(seq: Sequence): void {
    this.running.splice(this.running.indexOf(seq), 1);
    this.hooks.release(seq);
    this.blocks.release(seq);
    seq.numComputed = 0;
    seq.status = 'waiting';
    this.waiting.unshift(seq);
    this.preemptions++;
  }
}

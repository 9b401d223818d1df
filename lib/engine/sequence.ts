// One request's state inside the engine: its tokens, its KV blocks, how far it is computed.
import type { SamplingParams } from './types.js';

export type SequenceStatus = 'waiting' | 'running' | 'finished';

export class Sequence {
  status: SequenceStatus = 'waiting';
  readonly outputIds: number[] = [];
  /** KV blocks holding tokens [0, numComputed), in order. */
  blocks: number[] = [];
  /** Tokens whose keys and values are in the cache. */
  numComputed = 0;
  /** Prompt tokens that came from the prefix cache at admission. */
  cachedPromptTokens = 0;
  /** Prefix-cache hashes of this sequence's full blocks (computed lazily, kept across preemption). */
  blockHashes: string[] = [];
  /** Leading blocks already offered to the prefix cache. */
  registeredBlocks = 0;
  /** Whether the prompt's prefix-cache lookup was counted (once per request). */
  lookupCounted = false;
  /** The seed the sampler uses (the request's, or a random one). */
  readonly seed: bigint;
  /** The adapter's registration key (null: base model) and the slot pinned while running. */
  adapterKey: string | null = null;
  slot = 0;
  /**
   * Tokens sampled that the host has not read yet: with overlapped steps, the last step's
   * (2 for a moment while the next one is enqueued). They count in length; the next step
   * takes them on the device.
   */
  unread = 0;

  constructor(
    readonly id: string,
    readonly promptIds: readonly number[],
    readonly params: SamplingParams,
    readonly arrival: number,
  ) {
    this.seed = BigInt(params.seed ?? Math.floor(Math.random() * Number.MAX_SAFE_INTEGER));
  }

  get length(): number {
    return this.promptIds.length + this.outputIds.length + this.unread;
  }

  /** Tokens generated so far, read or not: the sampler's step for the next one. */
  get numOutputs(): number {
    return this.outputIds.length + this.unread;
  }

  /** Whether the unread token is surely the last (max_tokens or the model's length reached): no step follows it. */
  endsWithUnread(maxModelLen: number): boolean {
    return this.unread > 0 && (this.numOutputs >= this.params.maxTokens || this.length >= maxModelLen);
  }

  /** The most tokens it may still sample: max_tokens or the model's length ends it there, or EOS before. */
  tokensLeft(maxModelLen: number): number {
    return Math.max(0, Math.min(this.params.maxTokens - this.numOutputs, maxModelLen - this.length));
  }

  tokenAt(i: number): number {
    if (i >= this.promptIds.length + this.outputIds.length) throw new Error(`sequence ${this.id}: token ${i} is not read yet`);
    return i < this.promptIds.length ? this.promptIds[i] : this.outputIds[i - this.promptIds.length];
  }

  tokens(start: number, end: number): number[] {
    const out: number[] = [];
    for (let i = start; i < end; i++) out.push(this.tokenAt(i));
    return out;
  }

  /** Tokens still to run through the model before the next sample. */
  get pending(): number {
    return this.length - this.numComputed;
  }
}

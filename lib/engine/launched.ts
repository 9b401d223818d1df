// A step handed to the model runner whose samples the host may not have read yet: with
// overlapped steps the engine enqueues the next step first, then reads this one's.
import type { ScheduledSeq } from './scheduler.js';
import type { Sequence } from './sequence.js';
import type { TokenLogprob } from './types.js';

export interface Sampled {
  tokenId: number;
  logprob?: TokenLogprob;
}

export interface Launched {
  readonly batch: readonly ScheduledSeq[];
  /** Whether sampled() would return without waiting for the GPU. */
  ready(): boolean;
  /** One sample per entry of the batch that samples, in order; waits for the GPU the first time. */
  sampled(): Sampled[];
}

/**
 * Where each unread token of the batch is: its sequence's row among the samples of `prev`,
 * the step launched just before (every unread token is one of its), in the id buffer that
 * step leaves on the device. Undefined when the batch has no unread token.
 */
export function unreadRows(batch: readonly ScheduledSeq[], prev?: Launched): Map<Sequence, number> | undefined {
  if (!batch.some((e) => e.seq.unread > 0)) return undefined;
  if (!prev) throw new Error('a token is unread but no previous step was given');
  return new Map(prev.batch.filter((e) => e.samples).map((e, row) => [e.seq, row]));
}

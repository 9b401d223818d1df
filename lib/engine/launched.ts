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
  /** One sample per entry of the batch that samples, in order; waits for the GPU the first time. */
  sampled(): Sampled[];
}

/**
 * Each sampling sequence's row among a launched step's samples: where its token is in the
 * id buffer the step leaves on the device (the host need not have read it).
 */
export function sampleRows(launched: Launched): Map<Sequence, number> {
  return new Map(launched.batch.filter((e) => e.samples).map((e, row) => [e.seq, row]));
}

// vLLM's rule for comparing two greedy runs: walk both token lists; at the first position
// where they differ, it is still a match if each side's token is among the other side's
// top-k logprobs there, and the comparison stops (the sequences have diverged).

export interface GreedyRun {
  ids: number[];
  /** Per step: [tokenId, logprob] of the top-k tokens. */
  top: [number, number][][];
}

export interface GreedyComparison {
  /** Index of the first differing token, or -1 if the runs agree over their common length. */
  divergedAt: number;
  /** True when a divergence broke the rule (a token missing from the other's top-k). */
  failed: boolean;
  identical: number;
}

export function compareGreedy(ours: GreedyRun, ref: GreedyRun): GreedyComparison {
  const n = Math.min(ours.ids.length, ref.ids.length);
  for (let i = 0; i < n; i++) {
    if (ours.ids[i] === ref.ids[i]) continue;
    const inRef = ref.top[i].some(([id]) => id === ours.ids[i]);
    const inOurs = ours.top[i].some(([id]) => id === ref.ids[i]);
    return { divergedAt: i, failed: !(inRef && inOurs), identical: i };
  }
  return { divergedAt: -1, failed: false, identical: n };
}

/** max |a - b| / max |b|: the relative error of a logits vector. */
export function relativeError(a: Float32Array, b: Float32Array): number {
  let diff = 0, scale = 0;
  for (let i = 0; i < b.length; i++) {
    diff = Math.max(diff, Math.abs(a[i] - b[i]));
    scale = Math.max(scale, Math.abs(b[i]));
  }
  return diff / scale;
}

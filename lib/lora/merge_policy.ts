// When the engine merges an adapter into the weights (merged_weights.ts) and when it unmerges:
// merged once `afterSteps` steps in a row have run only that adapter's rows with no request
// for anything else waiting, unmerged before the first step that runs anything else (a base
// row, another adapter). A merge and its unmerge each rewrite the adapted weights once (on an
// H200 1.6 ms together at Qwen3-0.6B, 15.6 ms at Qwen3-8B), so only a run of one adapter that
// has lasted is merged: at 16 steps, 8B requests of 64 tokens taking turns lost 4% where 0.6B's
// gained 12% (bench/RESULTS.md).
export class MergePolicy {
  /** The adapter slot the last steps ran alone (0: none), and for how many steps in a row. */
  private slot = 0;
  private steps = 0;

  constructor(readonly afterSteps: number) {}

  /**
   * Before a step whose rows all run slot `only` (0: base rows, several adapters, or no
   * adapter), with `merged` merged now: the slot to merge, 0 to unmerge, or undefined to
   * leave the weights as they are. othersWaiting: a waiting request runs something else.
   */
  next(only: number, merged: number, othersWaiting: boolean): number | undefined {
    this.steps = only === 0 ? 0 : only === this.slot ? this.steps + 1 : 1;
    this.slot = only;
    if (merged > 0) return only === merged ? undefined : 0;
    return only > 0 && this.steps >= this.afterSteps && !othersWaiting ? only : undefined;
  }

  /** A slot got another adapter: its run so far does not count. */
  forget(slot: number): void {
    if (slot === this.slot) this.steps = 0;
  }
}

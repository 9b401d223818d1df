// When the engine merges an adapter into the weights (merged_weights.ts) and when it unmerges:
// merged once a run of steps has run only that adapter's rows with no request for anything
// else waiting, unmerged before the first step that runs anything else (a base row, another
// adapter). A merge and its unmerge each rewrite the adapted weights once (on an H200 1.6 ms
// together at Qwen3-0.6B, 15.6 ms at Qwen3-8B), so only a run that has lasted is merged.
// How long: `afterSteps` steps; or, with 'auto', ski rental: the run is merged once the
// overhead it has paid by running the adapter unmerged (measured: merge_costs.ts) reaches what
// a merge and an unmerge cost, which pays at most twice what the best choice in hindsight
// would have. Where the run's length is predicted (its requests' max_tokens left, an upper
// bound that EOS may cut), the threshold follows the prediction: a fraction of the cost where
// the run is predicted to pay for a merge, a multiple where not; and a run of another adapter
// than the one merged takes the weights over at once where predicted to pay for a merge alone
// (a merge writes W from the loaded copy: no unmerge before it). The overhead is ~13% of a step
// at 0.6B's one row, ~1% at 8B's: at 16 steps, 8B requests of 64 tokens taking turns lost 4%
// where 0.6B's gained 12% (bench/RESULTS.md).

import type { MergeCost } from './merge_costs.js';

/** What the 'auto' rule weighs (merge_costs.ts measures both). */
export interface RunCosts {
  /** ms a step of `rows` rows of one adapter, unmerged, takes over one without adapter work (undefined: not known yet). */
  overhead(rows: number): number | undefined;
  /** ms merging the adapter in `slot` takes, and unmerging it (undefined: not known yet). */
  mergeCost(slot: number): MergeCost | undefined;
}

/**
 * 'auto': steps of a run after which the adapter is merged anyway where what the rule weighs
 * is not known yet (no merge was timed, or no step of as many rows without adapter work was
 * seen), so that it is learnt.
 */
export const EXPLORE_STEPS = 16;

/**
 * How far 'auto' trusts a run's predicted length: where the steps its rows may still take would
 * pay for a merge, it is merged once the run has paid LAMBDA of the merge's cost, else only once
 * it has paid cost / LAMBDA (learning-augmented ski rental: Purohit, Svitkina and Kumar, NeurIPS
 * 2018: at most (1 + λ) / λ = 3 times the best choice in hindsight whatever the prediction,
 * 1 + λ = 1.5 times where it is right).
 */
export const LAMBDA = 0.5;

export class MergePolicy {
  /** The adapter slot the last steps ran alone (0: none), for how many steps in a row, and (auto) the overhead they paid. */
  private slot = 0;
  private steps = 0;
  private paid = 0;
  private unknown = 0;
  /** (auto) The overhead of the last step of the run, where known: what each step still to come will pay. */
  private last: number | undefined;
  /** (auto) What merging the run's adapter costs, looked up once a run (it counts the weights the adapter changes). */
  private cost: MergeCost | undefined;

  constructor(readonly afterSteps: number | 'auto', private readonly costs?: RunCosts) {
    if (afterSteps === 'auto' && !costs) throw new Error("merge_after_steps 'auto' needs the run's costs");
  }

  /**
   * Before a step of `rows` rows that all run slot `only` (0: base rows, several adapters, or
   * no adapter), with `merged` merged now: the slot to merge, 0 to unmerge, or undefined to
   * leave the weights as they are. othersWaiting: a waiting request runs something else.
   * left: the most steps the run's rows may still take (undefined: not predicted).
   */
  next(only: number, merged: number, othersWaiting: boolean, rows = 1, left?: number): number | undefined {
    if (only !== this.slot || only === 0) this.restart();
    this.slot = only;
    if (only > 0 && only !== merged) this.count(rows);
    if (merged > 0 && only === merged) return undefined;
    if (only === 0 || othersWaiting) return merged > 0 ? 0 : undefined;
    if (merged > 0) return this.switchDue(only, left) ? only : 0;
    return this.due(only, left) ? only : undefined;
  }

  /** A slot got another adapter: its run so far does not count. */
  forget(slot: number): void {
    if (slot === this.slot) this.restart();
  }

  private restart(): void {
    this.steps = this.paid = this.unknown = 0;
    this.cost = undefined;
  }

  /** One more step of the run, unmerged: and (auto) the overhead it paid, where known. */
  private count(rows: number): void {
    this.steps++;
    const o = this.last = this.costs?.overhead(rows);
    if (o !== undefined) this.paid += o;
    else if (this.costs) this.unknown++;
  }

  private due(slot: number, left: number | undefined): boolean {
    if (this.afterSteps !== 'auto') return this.steps >= this.afterSteps;
    const cost = this.cost ??= this.costs!.mergeCost(slot);
    if (cost === undefined) return this.steps >= EXPLORE_STEPS;
    if (this.unknown >= EXPLORE_STEPS) return true;
    const both = cost.merge + cost.unmerge;
    if (left === undefined || this.last === undefined) return this.paid >= both;
    // What staying unmerged would still pay, were the prediction right.
    const ahead = left * this.last;
    return this.paid >= (ahead >= both ? LAMBDA * both : both / LAMBDA);
  }

  /**
   * (auto) Whether a run of another adapter than the one merged takes the weights over at once:
   * a merge writes W from the loaded copy, so the unmerge it would otherwise wait behind is
   * spared, and the run is merged from its first step. Worth it where the steps ahead (predicted)
   * would pay more, unmerged, than the merge costs; the unmerge at the run's end is paid either way.
   */
  private switchDue(slot: number, left: number | undefined): boolean {
    if (this.afterSteps !== 'auto' || left === undefined || this.last === undefined) return false;
    const cost = this.cost ??= this.costs!.mergeCost(slot);
    return cost !== undefined && left * this.last >= cost.merge;
  }
}

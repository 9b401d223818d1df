// One adapter merged into the model's weights, so that a step whose rows all run it costs
// what a step without adapters costs (dLoRA, OSDI 2024, switches between merged and unmerged
// inference the same way). Each adapted projection's W (the first columns of the pool's
// widened weight) becomes base + b · a for the slot, computed from a copy of the loaded W
// kept on the device, summed in f32 and rounded once; unmerging copies that W back, so
// merging and unmerging never drift from the checkpoint. Only projections whose b sits beside
// W merge: an adapter on the embedding or lm_head (which may share the embedding's tensor)
// stays unmerged.
import { addon, type FloatDType, type Tensor } from '../addon/index.js';
import { floatBytes } from '../models/placement.js';
import type { LoraTarget, SlotWeights } from './slot_weights.js';

/**
 * While an adapter is merged: each widened weight it changed, to its copy as loaded. A pool
 * made meanwhile on the same model (an engine that was not closed) widens that, not the sum.
 */
const AS_LOADED = new WeakMap<Tensor, Tensor>();

/** The weight as loaded: `w` itself unless an adapter is merged into it. */
export function asLoaded(w: Tensor): Tensor {
  return AS_LOADED.get(w) ?? w;
}

export class MergedWeights {
  /** Per projection whose b sits beside W: W as loaded, [out, in], in the widened weight's dtype. */
  private readonly loaded = new Map<string, Tensor>();
  /**
   * Device bytes of each loaded copy, and of them all, counted once: a tensor's dtype and
   * shape are addon calls, and 'auto' weighs a merge's cost every step (counting them each
   * time took ~70 µs a step at Qwen3-0.6B, a tenth of its step at one row).
   */
  private readonly sizes = new Map<string, number>();
  readonly bytes: number;
  /** The projections the merged slot changed (those its adapter targets). */
  private changed: LoraTarget[] = [];
  merges = 0;

  constructor(private readonly pool: SlotWeights) {
    try {
      for (const t of pool.targets.values()) {
        if (t.bCol === 0) continue;
        const w = addon.empty(t.bAll.dtype as FloatDType, [t.bAll.shape[0], t.bCol], t.bAll.device);
        this.loaded.set(t.name, w);
        this.sizes.set(t.name, floatBytes(w.dtype as FloatDType) * w.shape[0] * w.shape[1]);
        addon.copyRegion(w, t.bAll, 0, 0, 1, false, t.bCol);
      }
    } catch (e) {
      this.dispose();
      throw e;
    }
    this.bytes = [...this.sizes.values()].reduce((n, b) => n + b, 0);
  }

  /** The slot merged into the weights (0: none). */
  get slot(): number {
    return this.pool.merged;
  }

  /** Device bytes of the weights that merging the adapter in `slot` (or unmerging it) rewrites. */
  bytesOf(slot: number): number {
    return this.changedBy(slot).reduce((n, t) => n + this.sizes.get(t.name)!, 0);
  }

  /** The projections a merge of the adapter in `slot` changes: those it adapts, b beside W. */
  private changedBy(slot: number): LoraTarget[] {
    return [...this.pool.targets.values()].filter((t) => this.loaded.has(t.name) && this.pool.holds(t, slot));
  }

  /** Whether the adapter in `slot` adapts only projections whose b sits beside W. */
  mergeable(slot: number): boolean {
    return slot > 0 && [...this.pool.targets.values()].every((t) => t.bCol > 0 || !this.pool.holds(t, slot));
  }

  /**
   * Merges the adapter in `slot` (mergeable) into the weights, unmerging any other first; in
   * stream order. The kernels that read W may start loading it before their wait (no op of a
   * step writes weights: cuda/common.cuh), which is safe here because the engine merges only
   * between steps, and a step begins with its inputs' upload, a copy that no kernel after it
   * overtakes. A merge that fails partway puts every weight back.
   */
  merge(slot: number): void {
    if (!this.mergeable(slot)) throw new Error(`LoRA pool: the adapter in slot ${slot} cannot be merged`);
    const next = this.changedBy(slot);
    // Over another adapter's merge: what the new one rewrites (from the loaded copy) needs no copy back first.
    this.restore(this.changed.filter((t) => !next.includes(t)));
    this.write(next, slot);
    this.merges++;
  }

  /**
   * A merge and an unmerge of every projection, rehearsed with slot 0, whose b and a are zeros:
   * each W is written as loaded, exactly. `around` wraps each (the manager times them), so what
   * they cost is known before any adapter has run.
   */
  rehearse(around: (kind: 'merge' | 'unmerge', bytes: number, f: () => void) => void): void {
    if (this.pool.merged !== 0) throw new Error('LoRA pool: a merge is rehearsed only while no adapter is merged');
    const every = [...this.pool.targets.values()].filter((t) => this.loaded.has(t.name));
    around('merge', this.bytes, () => this.write(every, 0));
    around('unmerge', this.bytes, () => this.unmerge());
  }

  /** W = base + b · a for `slot` in each of `targets`; a failure partway puts every weight back. */
  private write(targets: LoraTarget[], slot: number): void {
    this.changed = targets;
    try {
      for (const t of targets) {
        const k = t.bCols / this.pool.numSlots;
        AS_LOADED.set(t.bAll, this.loaded.get(t.name)!);
        addon.loraMerge(t.bAll, this.loaded.get(t.name)!, t.bAll, t.bCol + slot * k, t.aAll, slot * k, k);
      }
    } catch (e) {
      this.unmerge();
      throw e;
    }
    this.pool.merged = slot;
  }

  /** Puts back the loaded weights (nothing where no slot is merged); in stream order. */
  unmerge(): void {
    this.restore(this.changed);
    this.changed = [];
    this.pool.merged = 0;
  }

  private restore(targets: readonly LoraTarget[]): void {
    for (const t of targets) {
      addon.copyRegion(t.bAll, this.loaded.get(t.name)!, 0, 0, 1, false);
      AS_LOADED.delete(t.bAll);
    }
  }

  /** Unmerges, then frees the copies (before the pool is disposed). */
  dispose(): void {
    this.unmerge();
    this.loaded.forEach((t) => t.dispose());
    this.loaded.clear();
  }
}

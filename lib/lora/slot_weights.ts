// The pool's device-side storage: for every LoRA target weight, A and B stacked over slots.
// Linear targets: a [slots, slices * R, in], b [out, slots, slices * R], where b[o, slot] holds
// o's slice's R entries at that slice's place (zeros at the other slices'). Viewed 2-D, a is
// [slots * slices * R, in] and b [out, slots * slices * R]: a prefill-sized step shrinks by every
// slot at once (x · aᵀ, one GEMM), keeps each row's own slot (loraMask) and expands by every
// slot at once (t · bᵀ, one GEMM). Embedding: a holds Aᵀ as [slots, vocab, R] so a row gather
// does the shrink; b is [hidden, slots, R]. Scales are folded into b at load; ranks below R
// are zero-padded (the GEMMs multiply the zeros), and `ranks` tells the kernels each slot's
// rank per slice, so they neither read nor multiply the padding.
import { addon, type Tensor, type UploadRegion } from '../addon/index.js';
import type { ModelConfig } from '../checkpoint/config.js';
import { rulesFor } from '../checkpoint/families/index.js';
import { engineWeights } from '../checkpoint/rules.js';
import { moduleName } from './adapter.js';
import type { HostAdapter } from './host_adapter.js';
import { CPU, floatBytes, type Placement } from '../models/placement.js';

export interface LoraTarget {
  name: string;
  embedding: boolean;
  /** Row offset of each slice (q, k, v / gate, up) in the fused weight. */
  sliceOffsets: number[];
  sliceStarts: Tensor;
  a: Tensor;
  b: Tensor;
  /** a as [slots * slices * R, in] and b as [out, slots * slices * R]: every slot's pair at once. */
  aAll: Tensor;
  bAll: Tensor;
  /** i32 [slots, slices]: each slot's rank in each slice (0: nothing there), and its host copy. */
  ranks: Tensor;
  hostRanks: Int32Array;
}

/** A target weight of the pool: the engine weight it adapts, and its a and b shapes. */
interface TargetShape {
  weight: ReturnType<typeof engineWeights>[number];
  embedding: boolean;
  slices: number;
  a: number[];
  b: number[];
}

/** The pool's targets and their shapes: a fused weight gets slots if any of its parts is a target. */
function targetShapes(config: ModelConfig, numSlots: number, rank: number, targets: ReadonlySet<string>): TargetShape[] {
  return engineWeights(config, rulesFor(config.family))
    .filter((w) => w.rule.kind !== 'norm' && w.parts.some((p) => targets.has(moduleName(p.hf))))
    .map((weight) => {
      const embedding = weight.rule.kind === 'embedding';
      const [rows, cols] = weight.shape;
      return {
        weight, embedding, slices: embedding ? 1 : weight.parts.length,
        a: embedding ? [numSlots, rows, rank] : [numSlots, weight.parts.length * rank, cols],
        b: [embedding ? cols : rows, numSlots, embedding ? rank : weight.parts.length * rank],
      };
    });
}

/** Device bytes a pool of these slots (slot 0 included) takes: a and b of every target, in the activation dtype. */
export function slotWeightsBytes(
  config: ModelConfig, numSlots: number, rank: number, targets: ReadonlySet<string>, placement: Placement,
): number {
  const elements = (shape: number[]) => shape.reduce((n, d) => n * d, 1);
  return targetShapes(config, numSlots, rank, targets).reduce((n, t) => n + floatBytes(placement.act) * (elements(t.a) + elements(t.b)), 0);
}

/** Widest rank-space row the pool's targets need, every slot's at once: slots * slices * rank (linear), slots * rank (embedding). */
export function rankColumns(config: ModelConfig, numSlots: number, rank: number, targets: ReadonlySet<string>): number {
  return columnsOf(targetShapes(config, numSlots, rank, targets), numSlots, rank);
}

function columnsOf(shapes: readonly TargetShape[], numSlots: number, rank: number): number {
  return numSlots * Math.max(1, ...shapes.map((t) => t.slices * rank));
}

export class SlotWeights {
  readonly targets = new Map<string, LoraTarget>();
  /** Widest rank-space row its targets need (rankColumns): the width of a step's shrink buffer. */
  readonly columns: number;
  /** Every target's ranks, one after the other: a slot load sends them in one copy. */
  private readonly ranks: Tensor;
  private readonly hostRanks: Int32Array;
  /** Per target, each slot's [rows, cols] view of a (made once: loads are frequent). */
  private readonly slotViews = new Map<LoraTarget, Tensor[]>();

  /** `targets`: HF module names; a fused weight gets slots if any of its parts is a target. */
  constructor(
    readonly config: ModelConfig, readonly numSlots: number, readonly rank: number, targets: ReadonlySet<string>,
    readonly placement: Placement = CPU,
  ) {
    const { act, device } = placement;
    const shapes = targetShapes(config, numSlots, rank, targets);
    this.columns = columnsOf(shapes, numSlots, rank);
    const total = shapes.reduce((n, t) => n + numSlots * t.slices, 0);
    this.ranks = addon.zeros('i32', [Math.max(1, total)], device);
    this.hostRanks = new Int32Array(Math.max(1, total));
    let at = 0;
    for (const { weight: w, embedding, slices, a, b } of shapes) {
      const [rows, cols] = w.shape;
      const offsets = w.parts.map((p) => p.rowOffset);
      const span = this.ranks.narrow(at, numSlots * slices);
      // An embedding's delta covers the whole hidden vector: one slice.
      const starts = embedding ? [0, cols] : [...offsets, rows];
      const aStack = addon.zeros(act, a, device), bStack = addon.zeros(act, b, device);
      const t: LoraTarget = {
        name: w.name, embedding, sliceOffsets: offsets,
        sliceStarts: addon.fromArray('i32', [starts.length], Int32Array.from(starts), device),
        a: aStack, b: bStack,
        aAll: aStack.view([a[0] * a[1], a[2]]), bAll: bStack.view([b[0], b[1] * b[2]]),
        ranks: span.view([numSlots, slices]),
        hostRanks: this.hostRanks.subarray(at, at + numSlots * slices),
      };
      span.dispose();
      at += numSlots * slices;
      this.targets.set(w.name, t);
      this.slotViews.set(t, Array.from({ length: numSlots }, (_, slot) => slice(t.a, slot)));
    }
  }

  /**
   * Copies an adapter into a slot (everything it does not target is zero): region copies
   * from its host copy that the GPU runs beside the steps already queued; the next step
   * waits for them on the GPU, the host does not.
   */
  load(slot: number, host: HostAdapter): void {
    for (const t of this.targets.values()) this.slotRanks(t, slot).fill(0);
    const regions: UploadRegion[] = [];
    for (const { module: m, a, b } of host.modules) {
      const t = this.targets.get(m.location.engine)!;
      const j = t.embedding ? 0 : t.sliceOffsets.indexOf(m.location.rowOffset);
      regions.push(
        { dst: this.slotViews.get(t)![slot], src: a, row: j * this.rank },
        { dst: t.bAll, src: b, row: t.embedding ? 0 : m.location.rowOffset, col: slot * t.b.shape[2] + j * this.rank },
      );
      this.slotRanks(t, slot)[j] = m.rank;
    }
    // A target the adapter covers only in part keeps zeros elsewhere: zero it first (the
    // kernels skip padding by rank, but stale rows of an earlier adapter must not linger).
    const partial = [...this.targets.values()].filter((t) => !this.slotRanks(t, slot).every((k) => k === this.rank));
    addon.upload([...this.zeroRegions(partial, slot), ...regions]);
    this.ranks.copyFromAsync(this.hostRanks);
  }

  clear(slot: number): void {
    for (const t of this.targets.values()) this.slotRanks(t, slot).fill(0);
    addon.upload(this.zeroRegions([...this.targets.values()], slot));
    this.ranks.copyFromAsync(this.hostRanks);
  }

  /** The host copy of one slot's ranks in target t, one entry per slice. */
  private slotRanks(t: LoraTarget, slot: number): Int32Array {
    const slices = t.ranks.shape[1];
    return t.hostRanks.subarray(slot * slices, (slot + 1) * slices);
  }

  /** The slot's a, and its columns of every row of b (a window: zeroed on the device). */
  private zeroRegions(targets: LoraTarget[], slot: number): UploadRegion[] {
    return targets.flatMap((t) => {
      const width = t.b.shape[2];
      return [{ dst: this.slotViews.get(t)![slot] }, { dst: t.bAll, col: slot * width, cols: width }];
    });
  }

  dispose(): void {
    for (const t of this.targets.values()) {
      this.slotViews.get(t)!.forEach((x) => x.dispose());
      [t.a, t.b, t.aAll, t.bAll, t.sliceStarts, t.ranks].forEach((x) => x.dispose());
    }
    this.ranks.dispose();
  }
}

/** Slot `slot` of a [slots, rows, cols] stack, as a 2-D [rows, cols] view. */
function slice(stack: Tensor, slot: number): Tensor {
  const s = stack.narrow(slot, 1);
  const v = s.view(stack.shape.slice(1));
  s.dispose();
  return v;
}

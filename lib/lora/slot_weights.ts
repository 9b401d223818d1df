// The pool's device-side storage: for every LoRA target weight, A and B stacked over slots.
// A is [slots, slices * R, in]; viewed 2-D, [slots * slices * R, in]. B of a projection lives
// beside its W: the model's weight [out, in] is widened to [out, in + slots * slices * R] (and
// padded, see wideWidth), and b[o, slot] (o's slice's R entries at that slice's place, zeros at
// the other slices') sits in columns in + slot * slices * R. A step makes each projection's input a wide row [x | t
// spread over every slot, zeros but the row's own], and one GEMM by the whole widened weight is
// the projection plus its adapter, summed in f32 and rounded once: no expand launch. A
// prefill-sized step makes those rows by shrinking by every slot at once (x · aᵀ, one GEMM;
// loraJoin keeps each row's own). At decode sizes the widened weight also holds every slot's A
// beneath W (`ext`, where it is in the activation dtype): one GEMM by it gives the projection
// and, after it in each row, the input shrunk by every slot, and the op that takes the
// projection's output adds the row's own slot's t · b (LoraDelta in lib/addon/types.ts): the
// adapter costs no launch of its own. The embedding (a holds Aᵀ as
// [slots, vocab, R] so a row gather does the shrink) and lm_head (whose weight may be the
// embedding's) keep a b of their own, [out, slots, slices * R], for the per-row kernels.
// Scales are folded into b at load; ranks below R are zero-padded (the GEMMs multiply the
// zeros), and `ranks` tells the kernels each slot's rank per slice, so they neither read nor
// multiply the padding.
import { addon, type FloatDType, type Tensor, type UploadRegion } from '../addon/index.js';
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
  /** Each slice's first output, then the weight's width (the delta ops' and expand's sliceStarts). */
  sliceStarts: Int32Array;
  a: Tensor;
  /** a as [slots * slices * R, in]: every slot's A at once. */
  aAll: Tensor;
  /**
   * Every slot's b as [out, ...]: its columns bCol .. bCol + bCols (bCols = slots * slices * R).
   * Beside W (bCol = in): the model's widened weight itself (rows padded to whole 128-byte
   * lines, see wideWidth); the embedding and lm_head: b of their own (bCol 0).
   */
  bAll: Tensor;
  bCol: number;
  bCols: number;
  /** The embedding's and lm_head's own b as [out, slots, slices * R] (the per-row kernels' view); beside W: none. */
  b?: Tensor;
  /**
   * Beside W, where the widened weight is in the activation dtype: that weight with every
   * slot's A beneath W, [out + bCols, width] (its first out rows are bAll; A's rows in slot,
   * slice, rank order, their first in columns), and bT, every slot's b transposed, [bCols,
   * out]: a decode step's GEMM and LoraDelta.
   */
  ext?: Tensor;
  bT?: Tensor;
  /** i32 [slots, slices]: each slot's rank in each slice (0: nothing there), and its host copy. */
  ranks: Tensor;
  hostRanks: Int32Array;
}

/** A target weight of the pool: the engine weight it adapts, and its a and b shapes. */
interface TargetShape {
  weight: ReturnType<typeof engineWeights>[number];
  embedding: boolean;
  /** b sits beside W in the widened weight (every projection but lm_head). */
  beside: boolean;
  slices: number;
  a: number[];
  b: number[];
}

/**
 * Columns of a weight of `cols` widened by `bCols`, rounded up to 64 (whole 128-byte lines in
 * bf16), so that every row of W starts on a line as it did: rows that began mid-line made
 * LoRA-on base rows ~2% slower at decode. The padding stays zero and no step reads it.
 */
function wideWidth(cols: number, bCols: number): number {
  return Math.ceil((cols + bCols) / 64) * 64;
}

/** The pool's targets and their shapes: a fused weight gets slots if any of its parts is a target. */
function targetShapes(config: ModelConfig, numSlots: number, rank: number, targets: ReadonlySet<string>): TargetShape[] {
  return engineWeights(config, rulesFor(config.family))
    .filter((w) => w.rule.kind !== 'norm' && w.parts.some((p) => targets.has(moduleName(p.hf))))
    .map((weight) => {
      const embedding = weight.rule.kind === 'embedding';
      const [rows, cols] = weight.shape;
      return {
        weight, embedding, beside: !embedding && weight.name !== 'lm_head', slices: embedding ? 1 : weight.parts.length,
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
  const bElements = (t: TargetShape) => {
    if (!t.beside) return elements(t.b);
    const [rows, cols] = t.weight.shape, bCols = t.b[1] * t.b[2];
    return rows * (wideWidth(cols, bCols) - cols) + bCols * wideWidth(cols, bCols) + bCols * rows;  // b beside W, A beneath, bT
  };
  return targetShapes(config, numSlots, rank, targets).reduce((n, t) => n + floatBytes(placement.act) * (elements(t.a) + bElements(t)), 0);
}

/**
 * The widths of a step's rows that the pool adds (Workspace sizes its buffers by them): `lora`,
 * the shrink by every slot at once (slots * slices * rank; an embedding: slots * rank); `wide`,
 * the widest wide row (in + slots * slices * rank), which the x and act buffers both hold (0:
 * the pool adapts no projection).
 */
export interface PoolWidths {
  lora: number;
  wide: number;
}

export function poolWidths(config: ModelConfig, numSlots: number, rank: number, targets: ReadonlySet<string>): PoolWidths {
  return widthsOf(targetShapes(config, numSlots, rank, targets), numSlots, rank);
}

function widthsOf(shapes: readonly TargetShape[], numSlots: number, rank: number): PoolWidths {
  const wide = Math.max(0, ...shapes.filter((t) => t.beside).map((t) => t.weight.shape[1] + numSlots * t.slices * rank));
  return { lora: numSlots * Math.max(1, ...shapes.map((t) => t.slices * rank)), wide };
}

/** The dtype a widened weight had as the model loaded it, however many pools widened it since. */
const LOADED_DTYPE = new WeakMap<Tensor, FloatDType>();
/** A widened weight's whole tensor, A's rows beneath W included (see widen). */
const EXT = new WeakMap<Tensor, Tensor>();

export class SlotWeights {
  readonly targets = new Map<string, LoraTarget>();
  /** The widths of a step's rows it adds (poolWidths). */
  readonly widths: PoolWidths;
  /** Every target's ranks, one after the other: a slot load sends them in one copy. */
  private readonly ranks: Tensor;
  private readonly hostRanks: Int32Array;
  /** Per target, each slot's [rows, cols] view of a (made once: loads are frequent). */
  private readonly slotViews = new Map<LoraTarget, Tensor[]>();

  /**
   * `targets`: HF module names; a fused weight gets slots if any of its parts is a target.
   * `base`: the model's weights; the pool widens each projection it adapts there (b beside W)
   * for as long as it lives, and narrows them back when disposed.
   */
  constructor(
    readonly config: ModelConfig, readonly numSlots: number, readonly rank: number, targets: ReadonlySet<string>,
    readonly base: Map<string, Tensor>, readonly placement: Placement = CPU,
  ) {
    const { act, device } = placement;
    const shapes = targetShapes(config, numSlots, rank, targets);
    this.widths = widthsOf(shapes, numSlots, rank);
    const total = shapes.reduce((n, t) => n + numSlots * t.slices, 0);
    this.ranks = addon.zeros('i32', [Math.max(1, total)], device);
    this.hostRanks = new Int32Array(Math.max(1, total));
    let at = 0;
    try {
      for (const shape of shapes) {
        this.addTarget(shape, at);
        at += numSlots * shape.slices;
      }
    } catch (e) {
      this.dispose();
      throw e;
    }
  }

  /** Makes target `shape`'s tensors (its ranks from entry `at` of the shared ranks); on a failure, frees what it made. */
  private addTarget(shape: TargetShape, at: number): void {
    const { act, device } = this.placement;
    const { weight: w, embedding, slices, a, b } = shape;
    const [rows, cols] = w.shape;
    const offsets = w.parts.map((p) => p.rowOffset);
    // An embedding's delta covers the whole hidden vector: one slice.
    const starts = embedding ? [0, cols] : [...offsets, rows];
    const made: Tensor[] = [];
    const make = (t: Tensor) => (made.push(t), t);
    try {
      const aStack = make(addon.zeros(act, a, device));
      const own = shape.beside ? undefined : make(addon.zeros(act, b, device));
      const span = make(this.ranks.narrow(at, this.numSlots * slices));
      const t: LoraTarget = {
        name: w.name, embedding, sliceOffsets: offsets,
        sliceStarts: Int32Array.from(starts),
        a: aStack, aAll: make(aStack.view([a[0] * a[1], a[2]])),
        bAll: make(own ? own.view([b[0], b[1] * b[2]]) : this.widen(w.name, cols, wideWidth(cols, b[1] * b[2]), b[1] * b[2])),
        bCol: own ? 0 : cols, bCols: b[1] * b[2], b: own,
        ranks: make(span.view([this.numSlots, slices])),
        hostRanks: this.hostRanks.subarray(at, at + this.numSlots * slices),
      };
      span.dispose();
      const ext = own ? undefined : EXT.get(t.bAll);
      if (ext && ext.dtype === act) {
        t.ext = make(ext);
        t.bT = make(addon.zeros(act, [t.bCols, rows], device));
      } else {
        ext?.dispose();
      }
      const views = Array.from({ length: this.numSlots }, (_, slot) => make(slice(t.a, slot)));
      this.targets.set(w.name, t);
      this.slotViews.set(t, views);
    } catch (e) {
      const wide = made.find((t) => this.base.get(w.name) === t);
      if (wide) this.base.set(w.name, this.narrowed(wide, cols));
      made.forEach((t) => t.dispose());
      throw e;
    }
  }

  /**
   * The model's weight `name` ([out, cols]) widened to `width` columns (zeros past its own),
   * in its place in the model's weights, as the first rows of a tensor with `below` zero rows
   * more for A (EXT gives the whole; widen's caller takes that reference). A weight another
   * pool widened (an engine that was not closed) gives its first cols columns and stays that
   * pool's. Its dtype: the weight's, or f32 where either the weight or the activations are (the
   * CPU computes in f32 with bf16 weights: W is widened exactly, and b keeps f32 as the
   * kernels' b would).
   */
  private widen(name: string, cols: number, width: number, below: number): Tensor {
    const w = this.base.get(name);
    if (!w) throw new Error(`LoRA pool: the model has no weight ${name}`);
    const dtype = w.dtype === 'f32' || this.placement.act === 'f32' ? 'f32' : w.dtype as FloatDType;
    const ext = addon.zeros(dtype, [w.shape[0] + below, width], w.device);
    const wide = ext.narrow(0, w.shape[0]);
    EXT.set(wide, ext);
    addon.copyRegion(wide, w, 0, 0, 1, false, cols);
    this.base.set(name, wide);
    LOADED_DTYPE.set(wide, LOADED_DTYPE.get(w) ?? w.dtype as FloatDType);
    if (w.shape[1] === cols) w.dispose();
    return wide;
  }

  /** The model's weight `name` as [out, in]: a copy of its first columns where b sits beside it (dispose that). */
  baseWeight(name: string): Tensor {
    const w = this.base.get(name)!, t = this.targets.get(name);
    return t && t.bCol > 0 ? this.narrowed(w, t.bCol) : w;
  }

  /** A copy of a widened weight's first `cols` columns, in the dtype the model loaded it in. */
  private narrowed(wide: Tensor, cols: number): Tensor {
    const own = addon.empty(LOADED_DTYPE.get(wide) ?? wide.dtype as FloatDType, [wide.shape[0], cols], wide.device);
    addon.copyRegion(own, wide, 0, 0, 1, false, cols);
    return own;
  }

  /** Device bytes it added: a, the embedding's and lm_head's own b, and the columns beside W (not W's own upcast, see widen). */
  get bytes(): number {
    let n = 0;
    for (const t of this.targets.values()) {
      n += floatBytes(t.a.dtype as FloatDType) * t.a.shape.reduce((x, d) => x * d, 1);
      n += floatBytes(t.bAll.dtype as FloatDType) * t.bAll.shape[0] * (t.bAll.shape[1] - t.bCol);
      if (t.bCol > 0) n += floatBytes(t.bAll.dtype as FloatDType) * t.bCols * t.bAll.shape[1];  // A beneath W
      if (t.bT) n += floatBytes(t.bT.dtype as FloatDType) * t.bCols * t.bT.shape[1];
    }
    return n;
  }

  /**
   * Copies an adapter into a slot (everything it does not target is zero): region copies
   * from its host copy that the GPU runs beside the steps already queued; the next step
   * waits for them on the GPU, the host does not.
   */
  load(slot: number, host: HostAdapter): void {
    for (const t of this.targets.values()) this.slotRanks(t, slot).fill(0);
    const regions: UploadRegion[] = [];
    for (const { module: m, a, b, bT } of host.modules) {
      const t = this.targets.get(m.location.engine)!;
      const j = t.embedding ? 0 : t.sliceOffsets.indexOf(m.location.rowOffset);
      regions.push(
        { dst: this.slotViews.get(t)![slot], src: a, row: j * this.rank },
        ...(t.ext ? [{ dst: t.ext, src: a, row: this.aRow(t, slot) + j * this.rank }] : []),
        ...(t.bT && bT ? [{ dst: t.bT, src: bT, row: slot * this.slotWidth(t) + j * this.rank, col: m.location.rowOffset }] : []),
        { dst: t.bAll, src: b, row: t.embedding ? 0 : m.location.rowOffset, col: t.bCol + slot * this.slotWidth(t) + j * this.rank },
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
      const width = this.slotWidth(t);
      return [
        { dst: this.slotViews.get(t)![slot] }, { dst: t.bAll, col: t.bCol + slot * width, cols: width },
        ...(t.ext ? [{ dst: t.ext, row: this.aRow(t, slot), rows: width }] : []),
        ...(t.bT ? [{ dst: t.bT, row: slot * width, rows: width }] : []),
      ];
    });
  }

  /** The first of a slot's rows of A in a target's ext. */
  private aRow(t: LoraTarget, slot: number): number {
    return t.bAll.shape[0] + slot * this.slotWidth(t);
  }

  /** Columns of b per slot: slices * R (an embedding: R). */
  private slotWidth(t: LoraTarget): number {
    return t.bCols / this.numSlots;
  }

  /** Frees the slots; the model's widened weights go back to [out, in]. */
  dispose(): void {
    for (const t of this.targets.values()) {
      this.slotViews.get(t)!.forEach((x) => x.dispose());
      [t.a, t.b, t.aAll, t.ranks, t.ext, t.bT].forEach((x) => x?.dispose());
      if (t.bCol > 0 && !t.bAll.disposed) this.narrow(t);
      else t.bAll.dispose();
    }
    this.targets.clear();
    this.ranks.dispose();
  }

  /** The model's weight of a target beside W back to [out, in]: its first bCol columns. */
  private narrow(t: LoraTarget): void {
    const wide = t.bAll;
    if (this.base.get(t.name) === wide) this.base.set(t.name, this.baseWeight(t.name));
    wide.dispose();
  }
}

/** Slot `slot` of a [slots, rows, cols] stack, as a 2-D [rows, cols] view. */
function slice(stack: Tensor, slot: number): Tensor {
  const s = stack.narrow(slot, 1);
  const v = s.view(stack.shape.slice(1));
  s.dispose();
  return v;
}

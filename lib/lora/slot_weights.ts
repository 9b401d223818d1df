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
// zeros), and `ranks` tells the shrink and expand kernels each slot's rank per slice, so they
// neither read nor multiply the padding (the delta ops after an extended GEMM sum the pool's
// whole rank instead: a read of the slot's rank would be a round trip on their path). A load
// copies the adapter's host image (slot_image.ts) into a staging tensor and runs the slot's
// scatter plan: one copy and one kernel.
import { addon, type FloatDType, type ScatterPlan, type ScatterRegion, type Tensor } from '../addon/index.js';
import type { ModelConfig } from '../checkpoint/config.js';
import { rulesFor } from '../checkpoint/families/index.js';
import { engineWeights } from '../checkpoint/rules.js';
import { moduleName } from './adapter.js';
import type { HostAdapter } from './host_adapter.js';
import { ImageLayout } from './slot_image.js';
import { asLoaded } from './merged_weights.js';
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

/** Where each slice's A and B sit in an adapter's image: A in `act`, B in bDtype(its target). */
function imageLayout(
  shapes: readonly TargetShape[], rank: number, act: FloatDType, bDtype: (t: TargetShape) => FloatDType,
): ImageLayout {
  const layout = new ImageLayout();
  for (const t of shapes) {
    const [rows, cols] = t.weight.shape, name = t.weight.name, dtype = bDtype(t);
    if (t.embedding) {
      layout.add(name, 0, { dtype: act, rows, cols: rank }, { dtype, rows: cols, cols: rank });
      continue;
    }
    for (const p of t.weight.parts) layout.add(name, p.rowOffset, { dtype: act, rows: rank, cols }, { dtype, rows: p.rows, cols: rank });
  }
  return layout;
}

/** A widened weight's dtype: the weights', or f32 where the weights or the activations are (see widen). */
function widenedDtype(weights: FloatDType, placement: Placement): FloatDType {
  return weights === 'f32' || placement.act === 'f32' ? 'f32' : weights;
}

/** The dtype each weight (by engine name) is stored in, as the model loaded it. */
export type WeightDtypes = (name: string) => FloatDType;

/**
 * Device bytes a pool of these slots (slot 0 included) takes: a and b of every target, and
 * the staging tensors an image goes through, in the activation dtype, but b beside W and A
 * beneath it in the widened weight's (f32 weights on CUDA: 4 bytes, not the activations' 2).
 */
export function slotWeightsBytes(
  config: ModelConfig, numSlots: number, rank: number, targets: ReadonlySet<string>, placement: Placement,
  weights: WeightDtypes = () => placement.act,
): number {
  const elements = (shape: number[]) => shape.reduce((n, d) => n * d, 1);
  const act = floatBytes(placement.act);
  const wideDtype = (t: TargetShape) => widenedDtype(weights(t.weight.name), placement);
  const bytes = (t: TargetShape) => {
    if (!t.beside) return act * (elements(t.a) + elements(t.b));
    const [rows, cols] = t.weight.shape, bCols = t.b[1] * t.b[2], width = wideWidth(cols, bCols), dtype = wideDtype(t);
    // bT (the decode kernels' copy of b) only where the widened weight is in the activations' dtype.
    const bT = dtype === placement.act ? bCols * rows : 0;
    return floatBytes(dtype) * (rows * (width - cols) + bCols * width) + act * (elements(t.a) + bT);
  };
  const shapes = targetShapes(config, numSlots, rank, targets);
  const staging = imageLayout(shapes, rank, placement.act, (t) => t.beside ? wideDtype(t) : placement.act).bytes;
  return shapes.reduce((n, t) => n + bytes(t), staging);
}

/**
 * Device bytes of the loaded W that merging keeps (merged_weights.ts): every projection whose b
 * sits beside W, in the widened weight's dtype.
 */
export function mergeCopyBytes(
  config: ModelConfig, rank: number, targets: ReadonlySet<string>, placement: Placement, weights: WeightDtypes,
): number {
  return targetShapes(config, 1, rank, targets).filter((t) => t.beside)
    .reduce((n, t) => n + floatBytes(widenedDtype(weights(t.weight.name), placement)) * t.weight.shape[0] * t.weight.shape[1], 0);
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
  /**
   * The slot whose adapter is merged into W (merged_weights.ts), 0 for none: its rows run as
   * base rows (runSlot), and no load may write it until it is unmerged.
   */
  merged = 0;
  /** The widths of a step's rows it adds (poolWidths). */
  readonly widths: PoolWidths;
  /** Every target's ranks, one after the other: a slot load sends them in one copy. */
  private readonly ranks: Tensor;
  private readonly hostRanks: Int32Array;
  /** Where an adapter's host image holds each slice's A and B (HostAdapter reads into it). */
  readonly layout: ImageLayout;
  /** Per dtype of the layout, the device tensor [1, size] a load copies the image into. */
  private readonly staging = new Map<FloatDType, Tensor>();
  /** Per slot, the plan that writes the staged image into it. */
  private readonly plans: ScatterPlan[] = [];
  /** The adapter whose image the staging tensors hold (or are being sent): its load skips the copy. */
  private staged?: HostAdapter;

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
      this.layout = imageLayout(shapes, rank, act, (t) => this.targets.get(t.weight.name)!.bAll.dtype as FloatDType);
      for (const [dtype, size] of this.layout.sizes) this.staging.set(dtype, addon.zeros(dtype, [1, size], device));
      for (let slot = 0; slot < numSlots; slot++) this.plans.push(addon.scatterPlan(this.scatterRegions(slot)));
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
      this.targets.set(w.name, t);
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
   * pool widened (an engine that was not closed) gives its first cols columns as loaded (not
   * with that pool's merged adapter) and stays that pool's. Its dtype: widenedDtype, the
   * weight's or f32 where either the weight or the activations are (the CPU computes in f32
   * with bf16 weights: W is widened exactly, and b keeps f32 as the kernels' b would).
   */
  private widen(name: string, cols: number, width: number, below: number): Tensor {
    const w = this.base.get(name);
    if (!w) throw new Error(`LoRA pool: the model has no weight ${name}`);
    const dtype = widenedDtype(w.dtype as FloatDType, this.placement);
    const ext = addon.zeros(dtype, [w.shape[0] + below, width], w.device);
    const wide = ext.narrow(0, w.shape[0]);
    EXT.set(wide, ext);
    addon.copyRegion(wide, asLoaded(w), 0, 0, 1, false, cols);
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

  /** Device bytes it added: a, the embedding's and lm_head's own b, the columns beside W (not W's own upcast, see widen), the staging. */
  get bytes(): number {
    let n = this.layout.bytes;  // the staging tensors
    for (const t of this.targets.values()) {
      n += floatBytes(t.a.dtype as FloatDType) * t.a.shape.reduce((x, d) => x * d, 1);
      n += floatBytes(t.bAll.dtype as FloatDType) * t.bAll.shape[0] * (t.bAll.shape[1] - t.bCol);
      if (t.bCol > 0) n += floatBytes(t.bAll.dtype as FloatDType) * t.bCols * t.bAll.shape[1];  // A beneath W
      if (t.bT) n += floatBytes(t.bT.dtype as FloatDType) * t.bCols * t.bT.shape[1];
    }
    return n;
  }

  /**
   * Starts copying an adapter's image into the staging tensors, on a side stream after the
   * steps already queued and beside those queued meanwhile: for an adapter about to get a
   * slot (the next load of it then finds it there). Supersedes an image staged before.
   */
  stage(host: HostAdapter): void {
    if (this.staged === host) return;
    this.staged = undefined;  // on a failed copy the staging holds neither
    addon.upload([...this.staging].map(([dtype, dst]) => ({ dst, src: host.image(dtype) })), false);
    this.staged = host;
  }

  /**
   * Copies an adapter into a slot (everything it does not target is zero): its image into
   * the staging tensors (unless staged already), then the slot's scatter plan; the next step
   * waits for both on the GPU, the host does not.
   */
  load(slot: number, host: HostAdapter): void {
    this.expectUnmerged(slot);
    for (const t of this.targets.values()) this.slotRanks(t, slot).fill(0);
    for (const m of host.adapter.modules) {
      const t = this.targets.get(m.location.engine)!;
      this.slotRanks(t, slot)[t.embedding ? 0 : t.sliceOffsets.indexOf(m.location.rowOffset)] = m.rank;
    }
    this.stage(host);
    addon.awaitUploads();
    this.plans[slot].run();
    this.ranks.copyFromAsync(this.hostRanks);
  }

  clear(slot: number): void {
    this.expectUnmerged(slot);
    for (const t of this.targets.values()) this.slotRanks(t, slot).fill(0);
    this.plans[slot].run(true);
    this.ranks.copyFromAsync(this.hostRanks);
  }

  /** The slot a row of `slot` runs: 0 where its adapter is merged into the weights. */
  runSlot(slot: number): number {
    return slot === this.merged ? 0 : slot;
  }

  /** Whether the adapter in `slot` adapts target t (a slice of it). */
  holds(t: LoraTarget, slot: number): boolean {
    return this.slotRanks(t, slot).some((r) => r > 0);
  }

  private expectUnmerged(slot: number): void {
    if (slot > 0 && slot === this.merged) throw new Error(`LoRA pool: slot ${slot} is merged into the weights; unmerge it before a load`);
  }

  /** The host copy of one slot's ranks in target t, one entry per slice. */
  private slotRanks(t: LoraTarget, slot: number): Int32Array {
    // From the host arrays: a tensor's shape is a native call that builds an array, and a
    // load asks for each target's (reading them made a 0.6B load's host time ~0.4 ms).
    const slices = t.sliceStarts.length - 1;
    return t.hostRanks.subarray(slot * slices, (slot + 1) * slices);
  }

  /**
   * Where a staged image goes in a slot: each slice's A in the slot's rows of aAll and
   * beneath W (ext), its B beside W (or in the embedding's and lm_head's own b) and,
   * transposed, in bT. The windows cover the slot's whole share of every target but the zeros
   * of b beside W that belong to the other slices' rows, which no load ever writes.
   */
  private scatterRegions(slot: number): ScatterRegion[] {
    return [...this.targets.values()].flatMap((t) => t.sliceOffsets.flatMap((rowOffset, j): ScatterRegion[] => {
      const { a, b } = this.layout.spans(t.name, rowOffset)!;
      const srcA = this.staging.get(a.dtype)!, srcB = this.staging.get(b.dtype)!;
      const col = slot * this.slotWidth(t) + j * this.rank;
      const regions: ScatterRegion[] = [
        { dst: t.aAll, row: slot * t.a.shape[1] + j * this.rank, rows: a.rows, cols: a.cols, src: srcA, at: a.at },
        { dst: t.bAll, row: t.embedding ? 0 : rowOffset, col: t.bCol + col, rows: b.rows, cols: b.cols, src: srcB, at: b.at },
      ];
      if (t.ext) regions.push({ dst: t.ext, row: this.aRow(t, slot) + j * this.rank, rows: a.rows, cols: a.cols, src: srcA, at: a.at });
      if (t.bT) regions.push({ dst: t.bT, row: col, col: rowOffset, rows: b.cols, cols: b.rows, src: srcB, at: b.at, transpose: true });
      return regions;
    }));
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
    this.staged = undefined;
    this.plans.forEach((p) => p.dispose());
    this.plans.length = 0;
    this.staging.forEach((t) => t.dispose());
    this.staging.clear();
    for (const t of this.targets.values()) {
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

// An adapter's host image: everything a slot holds of it, in one buffer per dtype, laid out
// the same for every adapter of a pool. For each target and slice it holds A as [R, in] (an
// embedding: Aᵀ as [vocab, R]) and B as [out, R] (times the scale), zero-padded to the pool's
// rank R, and zeros for a module the adapter lacks. A slot load is then two steps that cost
// the host next to nothing: the image copied whole into a device staging tensor, and the
// slot's scatter plan (addon.scatterPlan), one kernel that writes every slice's A and B
// where the slot keeps them (SlotWeights). The zeros overwrite whatever the slot's last
// adapter left.
import type { FloatDType } from '../addon/index.js';
import { floatBytes } from '../models/placement.js';

/** Where a [rows, cols] block sits in the image of its dtype: from element `at`, contiguous. */
export interface Span {
  dtype: FloatDType;
  at: number;
  rows: number;
  cols: number;
}

/** One slice of a target: its A and its B. */
export interface SliceSpans {
  a: Span;
  b: Span;
}

/** Elements a span starts on a multiple of: 16 bytes, so the scatter moves whole 16-byte units. */
const ALIGN: Record<FloatDType, number> = { f32: 4, bf16: 8, f16: 8 };

export class ImageLayout {
  /** Elements of the image of each dtype. */
  readonly sizes = new Map<FloatDType, number>();
  private readonly slices = new Map<string, SliceSpans>();

  /** Places slice `rowOffset` of target `target` (a fused weight's slices by their first row). */
  add(target: string, rowOffset: number, a: Omit<Span, 'at'>, b: Omit<Span, 'at'>): void {
    this.slices.set(key(target, rowOffset), { a: this.place(a), b: this.place(b) });
  }

  spans(target: string, rowOffset: number): SliceSpans | undefined {
    return this.slices.get(key(target, rowOffset));
  }

  /** Bytes of a whole image (every dtype's part). */
  get bytes(): number {
    return [...this.sizes].reduce((n, [dtype, size]) => n + size * floatBytes(dtype), 0);
  }

  private place(s: Omit<Span, 'at'>): Span {
    const align = ALIGN[s.dtype];
    const at = Math.ceil((this.sizes.get(s.dtype) ?? 0) / align) * align;
    this.sizes.set(s.dtype, at + s.rows * s.cols);
    return { ...s, at };
  }
}

function key(target: string, rowOffset: number): string {
  return `${target}@${rowOffset}`;
}

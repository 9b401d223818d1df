// Host arrays to the device without waiting: one asynchronous upload per dtype. The arrays
// of a dtype are packed into one host array and copied (copyFromAsync: through pinned
// memory, in stream order) into a device buffer kept from step to step, then handed out
// as views. Ops enqueued after see the new values, ops enqueued before still the old
// ones, so a step's inputs are written while the step before it runs. (addon.fromArray
// waits for the stream on every array: an eager step made ~15 of those waits.)
import { addon, type DeviceName, type Tensor } from '../addon/index.js';

export type IntoDevice =
  | { dtype: 'i32'; data: Int32Array; shape?: number[] }
  | { dtype: 'f32'; data: Float32Array; shape?: number[] }
  | { dtype: 'i64'; data: BigInt64Array; shape?: number[] };

const arrayOf = { i32: Int32Array, f32: Float32Array, i64: BigInt64Array } as const;

export class StagedUploads {
  private readonly buffers = new Map<IntoDevice['dtype'], Tensor>();

  constructor(private readonly device: DeviceName) {}

  /**
   * Uploads the arrays; returns one view per array (shaped as asked, else 1-D), which the
   * caller disposes. The next call overwrites what the views hold (in stream order).
   */
  upload(arrays: readonly IntoDevice[]): Tensor[] {
    const offsets: number[] = [];
    const totals = new Map<IntoDevice['dtype'], number>();
    for (const a of arrays) {
      offsets.push(totals.get(a.dtype) ?? 0);
      totals.set(a.dtype, (totals.get(a.dtype) ?? 0) + a.data.length);
    }
    for (const [dtype, total] of totals) {
      // One element at least: an empty array still gets a (zero-length) view.
      const buffer = this.buffer(dtype, Math.max(total, 1));
      const packed = new arrayOf[dtype](total);
      // (The casts only name one of three typed arrays that set alike; the dtypes match.)
      arrays.forEach((a, i) => {
        if (a.dtype === dtype) (packed as Int32Array).set(a.data as Int32Array, offsets[i]);
      });
      if (total === 0) continue;
      const part = buffer.narrow(0, total);
      try {
        part.copyFromAsync(packed);
      } finally {
        part.dispose();
      }
    }
    return arrays.map((a, i) => {
      const part = this.buffers.get(a.dtype)!.narrow(offsets[i], a.data.length);
      if (!a.shape) return part;
      try {
        return part.view(a.shape);
      } finally {
        part.dispose();
      }
    });
  }

  dispose(): void {
    for (const b of this.buffers.values()) b.dispose();
    this.buffers.clear();
  }

  /**
   * The dtype's buffer, grown (to twice what is asked) when too small. The old one is freed
   * in stream order, after the ops already enqueued on it.
   */
  private buffer(dtype: IntoDevice['dtype'], elements: number): Tensor {
    const have = this.buffers.get(dtype);
    if (have && have.shape[0] >= elements) return have;
    have?.dispose();
    const made = addon.empty(dtype, [elements * 2], this.device);
    this.buffers.set(dtype, made);
    return made;
  }
}

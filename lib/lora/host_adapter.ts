// An adapter read into host memory (the host cache) as its image (slot_image.ts): every
// module's A and B where the pool's layout puts them, in the activation dtype (B in the
// pool's b dtype), B already times the adapter's scale, an embedding's A transposed. On
// cuda the image is page-locked, so a slot load copies it without waiting (SlotWeights.load).
// Reads (and the conversions) run on libuv threads, so the engine keeps stepping while an
// adapter comes off the disk.
import { addon, type FloatDType, type Tensor } from '../addon/index.js';
import type { TensorEntry } from '../checkpoint/safetensors.js';
import type { Adapter } from './adapter.js';
import { AdapterError } from './errors.js';
import type { Span } from './slot_image.js';
import type { SlotWeights } from './slot_weights.js';

const DTYPE: Record<string, FloatDType> = { BF16: 'bf16', F16: 'f16', F32: 'f32' };

/**
 * Promise.all that waits for every read to end before it rejects: a read still running
 * after the failure was handled would allocate into a list already disposed.
 */
async function allSettled<T>(work: Promise<T>[]): Promise<T[]> {
  const done = await Promise.allSettled(work);
  const failed = done.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) throw failed.reason;
  return done.map((r) => (r as PromiseFulfilledResult<T>).value);
}

export class HostAdapter {
  private constructor(readonly adapter: Adapter, private readonly images: Map<FloatDType, Tensor>) {}

  /** The image's part in `dtype`, [1, size] (the pool's staging tensor of that dtype has its shape). */
  image(dtype: FloatDType): Tensor {
    return this.images.get(dtype)!;
  }

  /** Reads every A and B for the pool's slots; checks PEFT's saved base copies against the served base weights. */
  static async read(adapter: Adapter, pool: SlotWeights): Promise<HostAdapter> {
    const placement = pool.placement;
    const layout = pool.layout;  // taken now: the pool may be disposed while the reads run
    const pinned = placement.device === 'cuda';
    const images = new Map<FloatDType, Tensor>();
    const scratch: Tensor[] = [];
    /** Reads a tensor of the adapter's files into `dst` from element `at`, times `scale`. */
    const readInto = async (dst: Tensor, at: number, e: TensorEntry, scale = 1): Promise<void> => {
      try {
        await addon.readIntoAsync(dst, at, e.file, e.offset, DTYPE[e.dtype], e.nbytes / (e.dtype === 'F32' ? 4 : 2), scale);
      } catch (err) {
        throw new AdapterError(`adapter ${adapter.name}: ${e.key}: ${(err as Error).message}`);
      }
    };
    /** A tensor of the adapter's files in its own dtype (or `dtype`), times `scale`. */
    const read = async (e: TensorEntry, dtype = DTYPE[e.dtype], scale = 1): Promise<Tensor> => {
      const t = addon.empty(dtype, [...e.shape]);
      scratch.push(t);
      await readInto(t, 0, e, scale);
      return t;
    };
    /** src ([rows, cols] or, transposed, [cols, rows]) into the first columns of span s of the image. */
    const copyInto = (s: Span, src: Tensor, transpose: boolean) => {
      const flat = images.get(s.dtype)!.view([-1]), part = flat.narrow(s.at, s.rows * s.cols), block = part.view([s.rows, s.cols]);
      addon.copyRegion(block, src, 0, 0, 1, transpose);
      [flat, part, block].forEach((t) => t.dispose());
    };
    try {
      for (const [dtype, size] of layout.sizes) {
        const image = pinned ? addon.pinnedEmpty(dtype, [1, size]) : addon.empty(dtype, [1, size]);
        images.set(dtype, image);
        addon.fill(image, 0);
      }
      const copies = await allSettled(adapter.baseCopies.map((c) => read(c.entry)));
      adapter.baseCopies.forEach((copy, i) => {
        const t = copies[i];
        const w = pool.baseWeight(copy.engine);
        const onDevice = t.device === w.device ? t : t.to(w.device);
        const same = t.shape.join() === w.shape.join() && addon.maxAbsDiff(onDevice, w) === 0;
        if (onDevice !== t) onDevice.dispose();
        if (w !== pool.base.get(copy.engine)) w.dispose();
        if (!same) {
          throw new AdapterError(`adapter ${adapter.name}: ${copy.entry.file}: ${copy.entry.key} is a full copy of ${copy.engine} that differs from the base model's; adapters that retrain ${copy.engine} are not supported`);
        }
      });
      await allSettled(adapter.modules.map(async (m) => {
        const spans = layout.spans(m.location.engine, m.location.rowOffset);
        if (!spans) throw new AdapterError(`adapter ${adapter.name}: ${m.hf}: the pool has no slot for ${m.location.engine}`);
        const { a, b } = spans;
        // B [out, rank] times the scale: straight into the image where its rank is the pool's.
        if (m.rank === b.cols) await readInto(images.get(b.dtype)!, b.at, m.b, m.scale);
        else copyInto(b, await read(m.b, b.dtype, m.scale), false);
        // A [rank, in] fills its span's first rows; an embedding's [rank, vocab] goes in transposed.
        if (m.embedding) copyInto(a, await read(m.a), true);
        else await readInto(images.get(a.dtype)!, a.at, m.a);
      }));
      return new HostAdapter(adapter, images);
    } catch (e) {
      images.forEach((t) => t.dispose());
      throw e;
    } finally {
      scratch.forEach((t) => t.dispose());
    }
  }

  dispose(): void {
    this.images.forEach((t) => t.dispose());
  }
}

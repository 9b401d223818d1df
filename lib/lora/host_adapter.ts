// An adapter read into host memory (the host cache), laid out as a GPU slot holds it: in
// the activation dtype, B already times the adapter's scale, an embedding's A transposed.
// Loading a slot is then a batch of plain region copies (addon.upload), from page-locked
// memory when the model is on cuda, so it neither waits for the GPU nor runs a kernel per
// tensor. Reads (and the conversions) run on libuv threads, so the engine keeps stepping
// while an adapter comes off the disk.
import { addon, type FloatDType, type Tensor } from '../addon/index.js';
import type { TensorEntry } from '../checkpoint/safetensors.js';
import type { Adapter, AdapterModule } from './adapter.js';
import { AdapterError } from './errors.js';
import type { SlotWeights } from './slot_weights.js';

const DTYPE: Record<string, FloatDType> = { BF16: 'bf16', F16: 'f16', F32: 'f32' };

export interface HostModule {
  module: AdapterModule;
  /** [rank, in]; for an embedding Aᵀ, [vocab, rank]. */
  a: Tensor;
  /** [out, rank], times the module's scale, in the dtype of the pool's b (beside W: the weight's). */
  b: Tensor;
  /** b transposed, [rank, out], where the pool's target keeps bT (SlotWeights' LoraTarget). */
  bT?: Tensor;
}

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
  private constructor(readonly adapter: Adapter, readonly modules: HostModule[]) {}

  /** Reads every A and B for the pool's slots; checks PEFT's saved base copies against the served base weights. */
  static async read(adapter: Adapter, pool: SlotWeights): Promise<HostAdapter> {
    const placement = pool.placement;
    // Taken now: the pool may be disposed while the reads run.
    const bDtype = new Map([...pool.targets].map(([name, t]) => [name, t.bAll.dtype as FloatDType]));
    const keepsBT = new Set([...pool.targets].filter(([, t]) => t.bT).map(([name]) => name));
    const owned: Tensor[] = [];
    const alloc = (dtype: FloatDType, shape: number[], pinned: boolean): Tensor => {
      const t = pinned && placement.device === 'cuda' ? addon.pinnedEmpty(dtype, shape) : addon.empty(dtype, shape);
      owned.push(t);
      return t;
    };
    const read = async (e: TensorEntry, dtype: FloatDType, pinned: boolean, scale = 1): Promise<Tensor> => {
      const t = alloc(dtype, [...e.shape], pinned);
      try {
        await addon.readIntoAsync(t, 0, e.file, e.offset, DTYPE[e.dtype], e.nbytes / (e.dtype === 'F32' ? 4 : 2), scale);
      } catch (err) {
        throw new AdapterError(`adapter ${adapter.name}: ${e.key}: ${(err as Error).message}`);
      }
      return t;
    };
    const act = placement.act;
    /** An embedding's lora_embedding_A [rank, vocab] as the slot's [vocab, rank]. */
    const transposed = async (e: TensorEntry): Promise<Tensor> => {
      const file = await read(e, DTYPE[e.dtype], false);
      const t = alloc(act, [e.shape[1], e.shape[0]], true);
      addon.copyRegion(t, file, 0, 0, 1, true);
      return t;
    };
    try {
      const copies = await allSettled(adapter.baseCopies.map((c) => read(c.entry, DTYPE[c.entry.dtype], false)));
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
      const modules = await allSettled(adapter.modules.map(async (m): Promise<HostModule> => {
        const b = await read(m.b, bDtype.get(m.location.engine)!, true, m.scale);
        let bT: Tensor | undefined;
        if (keepsBT.has(m.location.engine)) {
          bT = alloc(b.dtype as FloatDType, [b.shape[1], b.shape[0]], true);
          addon.copyRegion(bT, b, 0, 0, 1, true);
        }
        return { module: m, a: m.embedding ? await transposed(m.a) : await read(m.a, act, true), b, bT };
      }));
      const kept = new Set(modules.flatMap((m) => [m.a, m.b, ...(m.bT ? [m.bT] : [])]));
      owned.filter((t) => !kept.has(t)).forEach((t) => t.dispose());
      return new HostAdapter(adapter, modules);
    } catch (e) {
      owned.forEach((t) => t.dispose());
      throw e;
    }
  }

  dispose(): void {
    for (const m of this.modules) {
      m.a.dispose();
      m.b.dispose();
      m.bT?.dispose();
    }
  }
}

// An adapter read into host memory (the host cache): its A and B tensors as stored in the
// file, ready to be copied into any slot without touching the disk again. Reads run on
// libuv threads, so the engine keeps stepping while an adapter comes off the disk.
import { addon, type FloatDType, type Tensor } from '../addon/index.js';
import type { TensorEntry } from '../checkpoint/safetensors.js';
import type { Weights } from '../models/weights.js';
import type { Adapter, AdapterModule } from './adapter.js';
import { AdapterError } from './errors.js';

const DTYPE: Record<string, FloatDType> = { BF16: 'bf16', F16: 'f16', F32: 'f32' };

export interface HostModule {
  module: AdapterModule;
  a: Tensor;
  b: Tensor;
}

export class HostAdapter {
  private constructor(readonly adapter: Adapter, readonly modules: HostModule[], readonly bytes: number) {}

  /** Reads every A and B; checks PEFT's saved base copies against the served base weights. */
  static async read(adapter: Adapter, base: Weights): Promise<HostAdapter> {
    const owned: Tensor[] = [];
    const read = (e: TensorEntry): Promise<Tensor> => {
      const t = addon.empty(DTYPE[e.dtype], [...e.shape]);
      owned.push(t);
      return addon.readIntoAsync(t, 0, e.file, e.offset, DTYPE[e.dtype], e.nbytes / (e.dtype === 'F32' ? 4 : 2)).then(() => t);
    };
    try {
      const copies = await Promise.all(adapter.baseCopies.map((c) => read(c.entry)));
      adapter.baseCopies.forEach((copy, i) => {
        const t = copies[i];
        const w = base.get(copy.engine)!;
        const onDevice = t.device === w.device ? t : t.to(w.device);
        const same = t.shape.join() === w.shape.join() && addon.maxAbsDiff(onDevice, w) === 0;
        if (onDevice !== t) onDevice.dispose();
        if (!same) {
          throw new AdapterError(`adapter ${adapter.name}: ${copy.entry.file}: ${copy.entry.key} is a full copy of ${copy.engine} that differs from the base model's; adapters that retrain ${copy.engine} are not supported`);
        }
      });
      copies.forEach((t) => t.dispose());
      const modules = await Promise.all(adapter.modules.map(async (m) => ({ module: m, a: await read(m.a), b: await read(m.b) })));
      const bytes = adapter.modules.reduce((n, m) => n + m.a.nbytes + m.b.nbytes, 0);
      return new HostAdapter(adapter, modules, bytes);
    } catch (e) {
      owned.forEach((t) => t.dispose());
      throw e;
    }
  }

  dispose(): void {
    for (const m of this.modules) {
      m.a.dispose();
      m.b.dispose();
    }
  }
}

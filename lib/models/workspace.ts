// Activation buffers allocated once, so a forward pass can run without allocating: what a
// captured CUDA graph needs (its kernels keep the pointers they were recorded with), and
// what spares the allocator on every step. Each buffer is one flat tensor sized for the
// most rows it will serve; take() hands out a [rows, cols] view of its start.
import { addon, type Tensor } from '../addon/index.js';
import type { ModelConfig } from '../checkpoint/config.js';
import type { PoolWidths } from '../lora/slot_weights.js';
import { floatBytes, type Placement } from './placement.js';

export type BufferName = 'residual' | 'x' | 'qkv' | 'attn' | 'gateUp' | 'act' | 'proj' | 'last' | 'logits' | 'lora';

/** Views a workspace keeps between steps (a step takes about a dozen shapes). */
const MAX_VIEWS = 64;

export class Workspace {
  private readonly flat = new Map<BufferName, Tensor>();
  private readonly views = new Map<string, Tensor>();

  /**
   * `maxTokens`: token rows of the largest step; `maxRows`: its logit rows. `lora`: the
   * widths the adapter pool adds (SlotWeights.widths): the rank-space buffer ('lora'), the
   * wide rows 'x' and 'act' hold, the shrink by every slot after the rows of 'qkv' and
   * 'gateUp', and 'proj', o's or down's output with it before the residual takes it (absent:
   * no pool).
   */
  constructor(
    config: ModelConfig, readonly placement: Placement, readonly maxTokens: number, readonly maxRows: number,
    lora?: PoolWidths,
  ) {
    const sizes = bufferSizes(config, maxTokens, maxRows, lora);
    try {
      for (const [name, n] of sizes) this.flat.set(name, addon.empty(placement.act, [n], placement.device));
    } catch (e) {
      this.dispose();
      throw e;
    }
  }

  /**
   * A [rows, cols] view of buffer `name`, the workspace's own: the same handle for every take
   * of that shape, which callers need not dispose (one that was disposed, as the runners do
   * with a step's logits, is made again). A step takes a few hundred views of a dozen shapes,
   * and a new tensor handle cost ~10 µs of host time on the GPU machine: 3 ms an eager step
   * with LoRA rows.
   */
  take(name: BufferName, rows: number, cols: number): Tensor {
    const key = `${name} ${rows} ${cols}`;
    const cached = this.views.get(key);
    if (cached && !cached.disposed) return cached;
    const t = this.flat.get(name);
    if (!t) throw new Error(`workspace: no ${name} buffer (LoRA buffers exist only when the workspace was made with the pool)`);
    const n = rows * cols;
    if (!(n <= t.shape[0])) throw new Error(`workspace: ${name} holds ${t.shape[0]} elements, [${rows}, ${cols}] needs ${n}`);
    const part = t.narrow(0, n);
    const v = part.view([rows, cols]);
    part.dispose();
    this.views.set(key, v);
    return v;
  }

  /**
   * Called before a step: frees the views of past steps once they pass a bound (eager steps
   * come in every row count). No view taken before may be used after.
   */
  trimViews(): void {
    if (this.views.size <= MAX_VIEWS) return;
    for (const v of this.views.values()) v.dispose();
    this.views.clear();
  }

  /** Device bytes of its buffers. */
  get bytes(): number {
    return [...this.flat.values()].reduce((n, t) => n + floatBytes(this.placement.act) * t.shape[0], 0);
  }

  dispose(): void {
    for (const t of [...this.views.values(), ...this.flat.values()]) t.dispose();
    this.views.clear();
    this.flat.clear();
  }
}

/** Elements of each buffer; lora: the pool's widths (undefined: no LoRA buffer, no wide rows). */
function bufferSizes(c: ModelConfig, T: number, R: number, lora?: PoolWidths): [BufferName, number][] {
  const sizes: [BufferName, number][] = [
    ['residual', T * c.hiddenSize],
    ['x', T * Math.max(c.hiddenSize, lora?.wide ?? 0)],
    ['qkv', T * ((c.numHeads + 2 * c.numKvHeads) * c.headDim + (lora?.lora ?? 0))],
    ['attn', T * c.numHeads * c.headDim],
    ['gateUp', T * (2 * c.intermediateSize + (lora?.lora ?? 0))],
    ['act', T * Math.max(c.intermediateSize, lora?.wide ?? 0)],
    ['last', R * c.hiddenSize],
    ['logits', R * c.vocabSize],
  ];
  if (lora) sizes.push(['lora', Math.max(T, R) * lora.lora], ['proj', T * (c.hiddenSize + lora.lora)]);
  return sizes;
}

/** Bytes a Workspace of these sizes takes (lora as for bufferSizes). */
export function workspaceBytes(config: ModelConfig, placement: Placement, maxTokens: number, maxRows: number, lora?: PoolWidths): number {
  return bufferSizes(config, maxTokens, maxRows, lora).reduce((n, [, e]) => n + floatBytes(placement.act) * e, 0);
}

// The pool's device-side storage: for every LoRA target weight, A and B stacked over slots.
// Linear targets: a [slots, slices * R, in], b [slots, out, R]. Embedding: a holds Aᵀ as
// [slots, vocab, R] so a row gather does the shrink. Scales are folded into b at load; ranks
// below R are zero-padded, and `ranks` tells the kernels each slot's rank per slice, so the
// padding is neither read nor multiplied.
import { addon, type Tensor } from '../addon/index.js';
import type { ModelConfig } from '../checkpoint/config.js';
import { rulesFor } from '../checkpoint/families/index.js';
import { engineWeights } from '../checkpoint/rules.js';
import { moduleName } from './adapter.js';
import type { HostAdapter } from './host_adapter.js';
import { CPU, type Placement } from '../models/placement.js';

export interface LoraTarget {
  name: string;
  embedding: boolean;
  /** Row offset of each slice (q, k, v / gate, up) in the fused weight. */
  sliceOffsets: number[];
  sliceStarts: Tensor;
  a: Tensor;
  b: Tensor;
  /** i32 [slots, slices]: each slot's rank in each slice (0: nothing there), and its host copy. */
  ranks: Tensor;
  hostRanks: Int32Array;
}

export class SlotWeights {
  readonly targets = new Map<string, LoraTarget>();

  /** `targets`: HF module names; a fused weight gets slots if any of its parts is a target. */
  constructor(
    readonly config: ModelConfig, readonly numSlots: number, readonly rank: number, targets: ReadonlySet<string>,
    readonly placement: Placement = CPU,
  ) {
    const { act, device } = placement;
    for (const w of engineWeights(config, rulesFor(config.family))) {
      if (w.rule.kind === 'norm' || !w.parts.some((p) => targets.has(moduleName(p.hf)))) continue;
      const embedding = w.rule.kind === 'embedding';
      const [rows, cols] = w.shape;
      const offsets = w.parts.map((p) => p.rowOffset);
      const out = embedding ? cols : rows;
      const slices = embedding ? 1 : offsets.length;
      this.targets.set(w.name, {
        name: w.name, embedding, sliceOffsets: offsets,
        sliceStarts: addon.fromArray('i32', [offsets.length + 1], Int32Array.from([...offsets, rows]), device),
        a: addon.zeros(act, embedding ? [numSlots, rows, rank] : [numSlots, offsets.length * rank, cols], device),
        b: addon.zeros(act, [numSlots, out, rank], device),
        ranks: addon.zeros('i32', [numSlots, slices], device),
        hostRanks: new Int32Array(numSlots * slices),
      });
      if (embedding) {
        // An embedding's delta covers the whole hidden vector: one slice.
        this.targets.get(w.name)!.sliceStarts.dispose();
        this.targets.get(w.name)!.sliceStarts = addon.fromArray('i32', [2], Int32Array.from([0, cols]), device);
      }
    }
  }

  /** Copies an adapter into a slot (everything it does not target is zero). */
  load(slot: number, host: HostAdapter): void {
    this.zero(slot);
    const device = this.placement.device;
    for (const { module: m, a: hostA, b: hostB } of host.modules) {
      // The host cache stays in host memory; each load copies it over (a no-op view on the CPU).
      const a = device === 'cpu' ? hostA : hostA.to(device);
      const b = device === 'cpu' ? hostB : hostB.to(device);
      const t = this.targets.get(m.location.engine)!;
      const aSlot = slice(t.a, slot), bSlot = slice(t.b, slot);
      const slices = t.ranks.shape[1];
      if (t.embedding) {
        addon.copyRegion(aSlot, a, 0, 0, 1, true);
        addon.copyRegion(bSlot, b, 0, 0, m.scale, false);
        t.hostRanks[slot * slices] = a.shape[0];
      } else {
        const j = t.sliceOffsets.indexOf(m.location.rowOffset);
        addon.copyRegion(aSlot, a, j * this.rank, 0, 1, false);
        addon.copyRegion(bSlot, b, m.location.rowOffset, 0, m.scale, false);
        t.hostRanks[slot * slices + j] = a.shape[0];
      }
      aSlot.dispose();
      bSlot.dispose();
      if (a !== hostA) a.dispose();
      if (b !== hostB) b.dispose();
    }
    this.uploadRanks();
  }

  clear(slot: number): void {
    this.zero(slot);
    this.uploadRanks();
  }

  /** Zeros the slot's A and B, and its ranks on the host. */
  private zero(slot: number): void {
    for (const t of this.targets.values()) {
      for (const x of [t.a, t.b]) {
        const s = x.narrow(slot, 1);
        addon.fill(s, 0);
        s.dispose();
      }
      const slices = t.ranks.shape[1];
      t.hostRanks.fill(0, slot * slices, (slot + 1) * slices);
    }
  }

  private uploadRanks(): void {
    for (const t of this.targets.values()) t.ranks.copyFrom(t.hostRanks);
  }

  dispose(): void {
    for (const t of this.targets.values()) [t.a, t.b, t.sliceStarts, t.ranks].forEach((x) => x.dispose());
  }
}

/** Slot `slot` of a [slots, rows, cols] stack, as a 2-D [rows, cols] view. */
function slice(stack: Tensor, slot: number): Tensor {
  const s = stack.narrow(slot, 1);
  const v = s.view(stack.shape.slice(1));
  s.dispose();
  return v;
}

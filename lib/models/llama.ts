// The Llama decoder composed from addon ops. Qwen3 (qwen3.ts) is this model plus a
// per-head RMSNorm on q and k.
import { addon, type Tensor } from '../addon/index.js';
import type { ModelConfig } from '../checkpoint/config.js';
import type { LoraTarget, SlotWeights } from '../lora/slot_weights.js';
import type { KvCache } from './kv_cache.js';
import { CPU, type Placement } from './placement.js';
import { ropeInvFreq } from './rope.js';
import type { StepTensors } from './step.js';
import type { Weights } from './weights.js';
import type { BufferName, Workspace } from './workspace.js';

/** Where forward's activations come from: fresh tensors, or views of a Workspace. */
type Buffers = (name: BufferName, rows: number, cols: number) => Tensor;

export class LlamaModel {
  protected readonly invFreq: Tensor;
  private readonly scale: number;
  /** The adapter pool's slot weights, when LoRA is on; rows then add their slot's delta. */
  lora?: SlotWeights;
  /**
   * From this many rows (prefill-sized steps; a captured decode step of that many rows too:
   * the path does not depend on the mix) the adapters shrink by one GEMM over every slot's
   * A instead of the per-row kernels, made for decode's few rows, which spent 100-200 µs an
   * op at 4096 rows of Qwen3-0.6B (the engine sets it from MSTAR_LORA_GEMM_ROWS; tests move
   * it to compare the two). Either way the expand is part of the projection's GEMM.
   */
  loraGemmRows = 256;

  constructor(readonly config: ModelConfig, readonly weights: Weights, readonly placement: Placement = CPU) {
    const { invFreq } = ropeInvFreq(config.rope, config.headDim);
    this.invFreq = addon.fromArray('f32', [invFreq.length], invFreq, placement.device);
    this.scale = 1 / Math.sqrt(config.headDim);
  }

  protected w(name: string): Tensor {
    const t = this.weights.get(name);
    if (!t) throw new Error(`${this.config.family}: weight ${name} was not loaded`);
    return t;
  }

  protected bias(name: string): Tensor | null {
    return this.weights.get(`${name}.bias`) ?? null;
  }

  /** Per-head RMSNorm weights for q and k, applied before RoPE (Qwen3), or null. */
  protected qkNorms(_layer: number): [Tensor, Tensor] | null {
    return null;
  }

  /**
   * Runs one step and returns logits [logitRows, vocab] in the activation dtype. With a
   * workspace (sized for the step) nothing is allocated: every activation, the logits
   * included, is a view of its buffers (what a captured CUDA graph needs); without one,
   * each call allocates its own.
   */
  forward(step: StepTensors, kv: KvCache, ws?: Workspace): Tensor {
    const c = this.config;
    const n = step.numTokens;
    const H = c.numHeads, K = c.numKvHeads, hd = c.headDim;
    const { act: dtype, device } = this.placement;
    const buffer: Buffers = ws ? (name, r, cols) => ws.take(name, r, cols) : (_, r, cols) => addon.empty(dtype, [r, cols], device);
    const residual = buffer('residual', n, c.hiddenSize);
    const x = buffer('x', n, c.hiddenSize);
    const qkv = buffer('qkv', n, (H + 2 * K) * hd);
    const attn = buffer('attn', n, H * hd);
    const gateUp = buffer('gateUp', n, 2 * c.intermediateSize);
    const act = buffer('act', n, c.intermediateSize);
    const rows = step.logitRows.shape[0];
    const last = buffer('last', rows, c.hiddenSize);
    const logits = buffer('logits', rows, c.vocabSize);

    addon.embedding(residual, this.w('embed'), step.tokens);
    const lora = step.lora && this.lora ? { plan: step.lora, weights: this.lora } : undefined;
    if (lora) this.loraEmbedding(residual, lora.weights, lora.plan, buffer);
    const adapted = (name: string) => lora?.weights.targets.get(name);
    const gemms = n >= this.loraGemmRows;
    const numSlots = lora?.weights.numSlots ?? 0;
    /**
     * An adapted projection (b beside W) takes a wide row: its input, then each row's shrink at
     * its slot's columns (zeros at the others'), as wide as the widened weight's W and b; one
     * GEMM by that weight is then the projection plus each row's adapter. At decode sizes the
     * norm and SiLU·mul make it where they make their output, in one launch.
     */
    const wideFor = (t: LoraTarget | undefined): t is LoraTarget => !!t && !!lora && !gemms && t.bCol > 0;
    const wideRow = (name: BufferName, t: LoraTarget, rows: number) => buffer(name, rows, t.bCol + t.bCols);
    /** rmsNorm(residual) as the input of `next`: x, or x's wide row when next is adapted. */
    const norm = (weight: string, next?: string): Tensor => {
      const t = next ? adapted(next) : undefined;
      if (!wideFor(t)) {
        addon.rmsNorm(x, residual, this.w(weight), c.rmsNormEps);
        return x;
      }
      const xt = wideRow('x', t, n);
      addon.rmsNormShrink(xt, residual, this.w(weight), c.rmsNormEps, null, t.a, lora!.plan.rowSlots, t.ranks);
      return xt;
    };
    /** SiLU(gate) · up as the input of `next`: act, or act's wide row when next is adapted. */
    const activate = (next: string): Tensor => {
      const t = adapted(next);
      if (!wideFor(t)) {
        addon.siluMul(act, gateUp);
        return act;
      }
      const at = wideRow('act', t, n);
      addon.siluMulShrink(at, gateUp, null, t.a, lora!.plan.rowSlots, t.ranks);
      return at;
    };
    /**
     * out = input · Wᵀ (+ bias) plus each row's adapter delta (out += with accumulate): one
     * GEMM by the widened weight from the input's wide row. The row is made here unless the
     * input is one already, in `x` or `act`, whichever the input is not in (o's input comes
     * from attention, down's from act; x is free from qkv's projection to the next norm, act
     * from down's to the next SiLU·mul): by the per-row shrink at decode sizes, by a GEMM over
     * every slot's A (and loraJoin) for prefill-sized steps. lm_head (its own b): the per-row
     * shrink and expand kernels.
     */
    type ProjectOptions = { slots?: Tensor; accumulate?: boolean };
    const project = (out: Tensor, input: Tensor, name: string, o: ProjectOptions = {}) => {
      const t = adapted(name);
      const slots = o.slots ?? lora?.plan.rowSlots;
      const w = this.w(name);
      const made = !!t && t.bCol > 0 && input.shape[1] === t.bCol + t.bCols;
      if (!t || !slots) {
        addon.linear(out, input, w, this.bias(name), o.accumulate, 0);  // W's own columns, if a pool widened it
        return;
      }
      if (made) {
        addon.linearWide(out, input, w, this.bias(name), !!o.accumulate, slots, t.bCol, numSlots);
        return;
      }
      const rows = input.shape[0];
      if (t.bCol === 0) {
        const s = buffer('lora', rows, t.a.shape[1]);
        addon.loraShrink(s, input, t.a, slots, t.ranks);
        addon.linearExpand(out, input, w, this.bias(name), s, t.b!, slots, t.sliceStarts, o.accumulate, t.ranks);
        s.dispose();
        return;
      }
      const xt = wideRow(input === x ? 'act' : 'x', t, rows);
      if (rows >= this.loraGemmRows) {
        const s = buffer('lora', rows, t.aAll.shape[0]);
        addon.linear(s, input, t.aAll, null);
        addon.loraJoin(xt, input, s, slots, numSlots);
        s.dispose();
      } else {
        addon.loraShrink(xt, input, t.a, slots, t.ranks);
      }
      addon.linearWide(out, xt, w, this.bias(name), !!o.accumulate, slots, t.bCol, numSlots);
      xt.dispose();
    };
    /** project, the wide row (if one was made) given back to its buffer after. */
    const projectFrom = (out: Tensor, input: Tensor, name: string, o: ProjectOptions = {}) => {
      project(out, input, name, o);
      if (input !== x && input !== act) input.dispose();
    };
    for (let l = 0; l < c.numLayers; l++) {
      const p = `layers.${l}`;
      projectFrom(qkv, norm(`${p}.attn_norm`, `${p}.qkv`), `${p}.qkv`);
      const [qNorm, kNorm] = this.qkNorms(l) ?? [null, null];
      addon.ropeKvWrite(qkv, step.positions, this.invFreq, kv.k[l], kv.v[l], step.slots, qNorm, kNorm, H, K, hd, c.rmsNormEps);
      addon.pagedAttention(attn, qkv, kv.k[l], kv.v[l], step.blockTables, step.queryStarts, step.contextLens, H, K, hd, this.scale);
      project(residual, attn, `${p}.o`, { accumulate: true });
      projectFrom(gateUp, norm(`${p}.mlp_norm`, `${p}.gate_up`), `${p}.gate_up`);
      projectFrom(residual, activate(`${p}.down`), `${p}.down`, { accumulate: true });
    }
    norm('final_norm');
    addon.gatherRows(last, x, step.logitRows);
    project(logits, last, 'lm_head', { slots: lora?.plan.logitSlots });
    for (const t of [residual, x, qkv, attn, gateUp, act, last]) t.dispose();
    return logits;
  }

  private loraEmbedding(residual: Tensor, weights: SlotWeights, plan: NonNullable<StepTensors['lora']>, buffer: Buffers): void {
    const t = weights.targets.get('embed');
    if (!t) return;
    const shrunk = buffer('lora', plan.embedRows.shape[0], t.aAll.shape[1]);
    addon.gatherRows(shrunk, t.aAll, plan.embedRows);  // aAll: Aᵀ of every slot, [slots * vocab, R]
    addon.loraExpand(residual, shrunk, t.b!, plan.rowSlots, t.sliceStarts, t.ranks);
    shrunk.dispose();
  }

  dispose(): void {
    for (const t of new Set(this.weights.values())) t.dispose();
    this.invFreq.dispose();
  }
}

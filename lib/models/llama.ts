// The Llama decoder composed from addon ops. Qwen3 (qwen3.ts) is this model plus a
// per-head RMSNorm on q and k.
import { addon, type Tensor } from '../addon/index.js';
import type { ModelConfig } from '../checkpoint/config.js';
import type { SlotRun } from '../lora/slot_runs.js';
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
   * A step whose runs of rows of one adapter are known, with this many rows a run on
   * average, shrinks and expands by GEMMs, run by run, instead of the per-row kernels
   * (tests move it to compare the two).
   */
  loraGemmRows = 64;

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
    // The rank-space rows of an adapted projection. One buffer serves every target: each
    // use ends (in stream order) before the next begins.
    const shrunk = (t: LoraTarget, rows: number) => buffer('lora', rows, t.a.shape[1]);
    const gemmRuns = (runs: SlotRun[] | undefined, rows: number) =>
      runs && rows >= this.loraGemmRows * Math.max(1, runs.length) ? runs : undefined;
    const rowRuns = gemmRuns(step.lora?.rowRuns, n);
    /** Each run's rows of `into` (+)= their rows of `from` · (a or b of the run's slot)ᵀ. */
    const byRuns = (into: Tensor, from: Tensor, t: LoraTarget, runs: SlotRun[], which: 'a' | 'b') => {
      for (const { slot, start, count } of runs) {
        const dst = into.narrow(start, count), src = from.narrow(start, count);
        addon.linear(dst, src, lora!.weights.slot(t, slot)[which], null, which === 'b');
        dst.dispose();
        src.dispose();
      }
    };
    /**
     * x = rmsNorm(residual): with the shrink of x for `next` when it is adapted, made
     * where x is made (the residual stream took the last projection in place, so the
     * norm only reads it).
     */
    const norm = (weight: string, next?: string): Tensor | undefined => {
      const t = next ? adapted(next) : undefined;
      if (!t || !lora || rowRuns) addon.rmsNorm(x, residual, this.w(weight), c.rmsNormEps);
      if (!t || !lora) return undefined;
      const s = shrunk(t, n);
      if (rowRuns) byRuns(s, x, t, rowRuns, 'a');
      else addon.rmsNormShrink(x, residual, this.w(weight), c.rmsNormEps, s, t.a, lora.plan.rowSlots, t.ranks);
      return s;
    };
    /** act = SiLU(gate) · up: with the shrink of act for `next` when it is adapted, made where act is made. */
    const activate = (next: string): Tensor | undefined => {
      const t = adapted(next);
      if (!t || !lora || rowRuns) addon.siluMul(act, gateUp);
      if (!t || !lora) return undefined;
      const s = shrunk(t, n);
      if (rowRuns) byRuns(s, act, t, rowRuns, 'a');
      else addon.siluMulShrink(act, gateUp, s, t.a, lora.plan.rowSlots, t.ranks);
      return s;
    };
    /**
     * out = input · Wᵀ (+ bias) plus each row's adapter delta (out += with accumulate);
     * `s`: the adapter's shrink of input, if made already. `runs`: where given, the shrink
     * and expand go run by run as GEMMs (accumulating, through the `x` buffer, free while
     * o and down project: the delta joins the projection before the residual takes it).
     */
    type ProjectOptions = { s?: Tensor; slots?: Tensor; runs?: SlotRun[]; accumulate?: boolean };
    const project = (out: Tensor, input: Tensor, name: string, o: ProjectOptions = {}) => {
      const t = adapted(name);
      const slots = o.slots ?? lora?.plan.rowSlots;
      if (!t || !slots) {
        addon.linear(out, input, this.w(name), this.bias(name), o.accumulate);
        return;
      }
      const rows = input.shape[0];
      let s = o.s;
      if (!s) {
        s = shrunk(t, rows);
        if (o.runs) byRuns(s, input, t, o.runs, 'a');
        else addon.loraShrink(s, input, t.a, slots, t.ranks);
      }
      if (o.runs) {
        const y = o.accumulate ? buffer('x', rows, out.shape[1]) : out;
        addon.linear(y, input, this.w(name), this.bias(name));
        byRuns(y, s, t, o.runs, 'b');
        if (o.accumulate) {
          addon.add(out, out, y);
          y.dispose();
        }
      } else {
        addon.linearExpand(out, input, this.w(name), this.bias(name), s, t.b, slots, t.sliceStarts, o.accumulate, t.ranks);
      }
      s.dispose();
    };
    for (let l = 0; l < c.numLayers; l++) {
      const p = `layers.${l}`;
      project(qkv, x, `${p}.qkv`, { s: norm(`${p}.attn_norm`, `${p}.qkv`), runs: rowRuns });
      const [qNorm, kNorm] = this.qkNorms(l) ?? [null, null];
      addon.ropeKvWrite(qkv, step.positions, this.invFreq, kv.k[l], kv.v[l], step.slots, qNorm, kNorm, H, K, hd, c.rmsNormEps);
      addon.pagedAttention(attn, qkv, kv.k[l], kv.v[l], step.blockTables, step.queryStarts, step.contextLens, H, K, hd, this.scale);
      project(residual, attn, `${p}.o`, { accumulate: true, runs: rowRuns });
      project(gateUp, x, `${p}.gate_up`, { s: norm(`${p}.mlp_norm`, `${p}.gate_up`), runs: rowRuns });
      project(residual, act, `${p}.down`, { s: activate(`${p}.down`), accumulate: true, runs: rowRuns });
    }
    norm('final_norm');
    addon.gatherRows(last, x, step.logitRows);
    project(logits, last, 'lm_head', { slots: lora?.plan.logitSlots, runs: gemmRuns(lora?.plan.logitRuns, rows) });
    for (const t of [residual, x, qkv, attn, gateUp, act, last]) t.dispose();
    return logits;
  }

  private loraEmbedding(residual: Tensor, weights: SlotWeights, plan: NonNullable<StepTensors['lora']>, buffer: Buffers): void {
    const t = weights.targets.get('embed');
    if (!t) return;
    const [slots, vocab, rank] = t.a.shape;
    const table = t.a.view([slots * vocab, rank]);
    const shrunk = buffer('lora', plan.embedRows.shape[0], rank);
    addon.gatherRows(shrunk, table, plan.embedRows);
    addon.loraExpand(residual, shrunk, t.b, plan.rowSlots, t.sliceStarts, t.ranks);
    shrunk.dispose();
    table.dispose();
  }

  dispose(): void {
    for (const t of new Set(this.weights.values())) t.dispose();
    this.invFreq.dispose();
  }
}

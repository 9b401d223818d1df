// The Llama decoder composed from addon ops. Qwen3 (qwen3.ts) is this model plus a
// per-head RMSNorm on q and k.
import { addon, type LoraDelta, type Tensor } from '../addon/index.js';
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
   * From this many rows (prefill-sized steps; the path does not depend on the mix) the
   * adapters shrink by one GEMM over every slot's A and expand in the projection's GEMM, by b
   * beside W; below, each projection's GEMM by W with every slot's A beneath gives its shrink
   * with its output, and the op that takes the output expands, a rank-long dot product an
   * output, a cost that grows with rows × width, while the GEMM path's two extra launches a
   * projection cost about the same at any rows (the engine sets it from the hidden size or
   * MSTAR_LORA_GEMM_ROWS, see loraGemmRowsSetting; tests move it to compare the two).
   */
  loraGemmRows = 1024;

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
    ws?.trimViews();
    const buffer: Buffers = ws ? (name, r, cols) => ws.take(name, r, cols) : (_, r, cols) => addon.empty(dtype, [r, cols], device);
    /** Done with an activation: a fresh tensor is freed; a workspace's view stays the workspace's. */
    const release = (t: Tensor) => {
      if (!ws) t.dispose();
    };
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
    if (lora) this.loraEmbedding(residual, lora.weights, lora.plan, buffer, release);
    const adapted = (name: string) => lora?.weights.targets.get(name);
    const gemms = n >= this.loraGemmRows;
    const numSlots = lora?.weights.numSlots ?? 0;
    /**
     * At decode sizes an adapted projection runs by its extended weight, every slot's A beneath
     * W: one GEMM gives its output, each row followed by the row's input shrunk by every slot,
     * and the op that takes the output adds the row's own adapter (a LoraDelta: ropeKvWrite,
     * siluMul, or the next addRmsNorm for o and down), so the adapter costs no launch of its
     * own. Not where a bias would have to cover the wider rows.
     */
    const extended = (name: string): LoraTarget | undefined => {
      const t = adapted(name);
      return t?.ext && !gemms && !this.bias(name) ? t : undefined;
    };
    const delta = (t: LoraTarget): LoraDelta => [t.bT!, lora!.plan.rowSlots, t.sliceStarts, t.ranks];
    /** An extended o or down's output [n, hidden + its shrink], for the next norm to add to the residual. */
    let pending: { y: Tensor; t: LoraTarget } | undefined;
    /**
     * rmsNorm(residual) into x, the residual first taking a pending output with its delta;
     * next: the width of the projection that reads x (0: none), see addon.rmsNorm.
     */
    const norm = (weight: string, next = 0): Tensor => {
      if (!pending) {
        addon.rmsNorm(x, residual, this.w(weight), c.rmsNormEps, next);
        return x;
      }
      addon.addRmsNorm(residual, pending.y, this.w(weight), c.rmsNormEps, x, ...delta(pending.t), next);
      release(pending.y);
      pending = undefined;
      return x;
    };
    /**
     * out = input · Wᵀ (+ bias) plus each row's adapter delta (out += with accumulate), where
     * the projection is not extended: one GEMM by the widened weight from the input's wide row
     * (b beside W), made here in `x` or `act`, whichever the input is not in (o's input comes
     * from attention, down's from act; x is free from qkv's projection to the next norm, act
     * from down's to the next SiLU·mul): by a GEMM over every slot's A and loraJoin for
     * prefill-sized steps, else by the per-row shrink. lm_head (its own b): the per-row shrink
     * and expand kernels.
     */
    type ProjectOptions = { slots?: Tensor; accumulate?: boolean };
    const project = (out: Tensor, input: Tensor, name: string, o: ProjectOptions = {}) => {
      const t = adapted(name);
      const slots = o.slots ?? lora?.plan.rowSlots;
      const w = this.w(name);
      if (!t || !slots) {
        addon.linear(out, input, w, this.bias(name), o.accumulate, 0);  // W's own columns, if a pool widened it
        return;
      }
      const rows = input.shape[0];
      if (t.bCol === 0) {
        const s = buffer('lora', rows, t.a.shape[1]);
        addon.loraShrink(s, input, t.a, slots, t.ranks);
        addon.linearExpand(out, input, w, this.bias(name), s, t.b!, slots, t.sliceStarts, o.accumulate, t.ranks);
        release(s);
        return;
      }
      const xt = buffer(input === x ? 'act' : 'x', rows, t.bCol + t.bCols);
      if (rows >= this.loraGemmRows) {
        const s = buffer('lora', rows, t.aAll.shape[0]);
        addon.linear(s, input, t.aAll, null);
        addon.loraJoin(xt, input, s, slots, numSlots);
        release(s);
      } else {
        addon.loraShrink(xt, input, t.a, slots, t.ranks);
      }
      addon.linearWide(out, xt, w, this.bias(name), !!o.accumulate, slots, t.bCol, numSlots);
      release(xt);
    };
    /** The input's extended projection, [n, out + its shrink], in buffer `name`. */
    const projectExtended = (name: BufferName, input: Tensor, t: LoraTarget, out: number) => {
      const y = buffer(name, n, out + t.bCols);
      addon.linear(y, input, t.ext!, null, false, 0, lora!.plan.rowSlots, out, t.bCols / numSlots);
      return y;
    };
    /** The residual takes input's projection `name`: now, or (extended) at the next norm. */
    const addToResidual = (input: Tensor, name: string) => {
      const t = extended(name);
      if (!t) return project(residual, input, name, { accumulate: true });
      pending = { y: projectExtended('proj', input, t, c.hiddenSize), t };
    };
    /**
     * Attention of q over layer l's cache into attn, then the residual takes attn's projection
     * `name` as addToResidual: one op where that projection is plain or extended, so that CUDA's
     * decode steps merge attention's key splits in the projection's GEMV (attn left unwritten).
     */
    const attendAndProject = (q: Tensor, l: number, name: string) => {
      const attention = [attn, q, kv.k[l], kv.v[l], step.blockTables, step.queryStarts, step.contextLens, H, K, hd, this.scale] as const;
      const t = extended(name);
      if (t) {
        const y = buffer('proj', n, c.hiddenSize + t.bCols);
        addon.pagedAttentionLinear(...attention, y, t.ext!, null, false, lora!.plan.rowSlots, c.hiddenSize, t.bCols / numSlots);
        pending = { y, t };
      } else if (!adapted(name)) {
        addon.pagedAttentionLinear(...attention, residual, this.w(name), this.bias(name), true);
      } else {
        addon.pagedAttention(...attention);
        project(residual, attn, name, { accumulate: true });
      }
    };
    const qkvCols = (H + 2 * K) * hd;
    /** The width of projection `name`'s plain GEMM: by W or its extended weight; 0 where adapted otherwise. */
    const gemmWidth = (name: string, cols: number) => {
      const t = extended(name);
      return t ? cols + t.bCols : adapted(name) ? 0 : cols;
    };
    /**
     * rmsNorm(residual) by norm weight `weight` and projection `name` after it as one op (one
     * kernel on CUDA at decode sizes; with gu, SiLU·mul of gate_up into out): false, and nothing
     * run, where a pending output must join the residual first or the projection is adapted.
     */
    const normedProjection = (out: Tensor, weight: string, name: string, gu?: Tensor): boolean => {
      if (pending || adapted(name)) return false;
      addon.rmsNormLinear(out, residual, this.w(weight), c.rmsNormEps, this.w(name), this.bias(name), x, gu);
      return true;
    };
    for (let l = 0; l < c.numLayers; l++) {
      const p = `layers.${l}`;
      const tq = extended(`${p}.qkv`);
      let q = qkv;
      if (!normedProjection(qkv, `${p}.attn_norm`, `${p}.qkv`)) {
        const input = norm(`${p}.attn_norm`, gemmWidth(`${p}.qkv`, qkvCols));
        if (tq) q = projectExtended('qkv', input, tq, qkvCols);
        else project(qkv, input, `${p}.qkv`);
      }
      const [qNorm, kNorm] = this.qkNorms(l) ?? [null, null];
      addon.ropeKvWrite(q, step.positions, this.invFreq, kv.k[l], kv.v[l], step.slots, qNorm, kNorm, H, K, hd, c.rmsNormEps,
        ...(tq ? delta(tq) : []));
      attendAndProject(q, l, `${p}.o`);
      if (q !== qkv) release(q);
      if (!normedProjection(act, `${p}.mlp_norm`, `${p}.gate_up`, gateUp)) {
        const mlpInput = norm(`${p}.mlp_norm`, gemmWidth(`${p}.gate_up`, 2 * c.intermediateSize));
        const tg = extended(`${p}.gate_up`);
        if (tg) {
          const gu = projectExtended('gateUp', mlpInput, tg, 2 * c.intermediateSize);
          addon.siluMul(act, gu, ...delta(tg));
          release(gu);
        } else if (adapted(`${p}.gate_up`)) {
          project(gateUp, mlpInput, `${p}.gate_up`);
          addon.siluMul(act, gateUp);
        } else {
          addon.linearSiluMul(act, mlpInput, this.w(`${p}.gate_up`), this.bias(`${p}.gate_up`), gateUp);
        }
      }
      addToResidual(act, `${p}.down`);
    }
    norm('final_norm');
    addon.gatherRows(last, x, step.logitRows);
    project(logits, last, 'lm_head', { slots: lora?.plan.logitSlots });
    for (const t of [residual, x, qkv, attn, gateUp, act, last]) release(t);
    return logits;
  }

  private loraEmbedding(
    residual: Tensor, weights: SlotWeights, plan: NonNullable<StepTensors['lora']>, buffer: Buffers, release: (t: Tensor) => void,
  ): void {
    const t = weights.targets.get('embed');
    if (!t) return;
    const shrunk = buffer('lora', plan.embedRows.shape[0], t.aAll.shape[1]);
    addon.gatherRows(shrunk, t.aAll, plan.embedRows);  // aAll: Aᵀ of every slot, [slots * vocab, R]
    addon.loraExpand(residual, shrunk, t.b!, plan.rowSlots, t.sliceStarts, t.ranks);
    release(shrunk);
  }

  dispose(): void {
    for (const t of new Set(this.weights.values())) t.dispose();
    this.invFreq.dispose();
  }
}

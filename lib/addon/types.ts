// The typed face of the native binding. Every op writes into caller-provided outputs and
// has the same signature on every backend; the backend is the device of its tensors (all
// on one device, or the op throws naming the odd one). On cpu, activations are f32; on
// cuda they are f32 or bf16, one dtype per call, and ops are asynchronous on one stream
// (toArray() and synchronize() wait for them).

export type DType = 'f32' | 'bf16' | 'f16' | 'i32' | 'i64';
export type FloatDType = 'f32' | 'bf16' | 'f16';
export type DeviceName = 'cpu' | 'cuda';

/** A native tensor handle. Views share storage; dispose() drops this handle's reference. */
export interface Tensor {
  readonly dtype: DType;
  readonly shape: number[];
  readonly device: DeviceName;
  readonly disposed: boolean;
  /** Releases this handle; any later use throws "Tensor was disposed". */
  dispose(): void;
  /** The same elements under another shape (one size may be -1). */
  view(shape: number[]): Tensor;
  /** Rows [start, start + length) of dim 0, sharing storage. */
  narrow(start: number, length: number): Tensor;
  /** A copy of the elements: Float32Array for float dtypes, Int32Array, or BigInt64Array. */
  toArray(): Float32Array | Int32Array | BigInt64Array;
  /** Overwrites the elements (Float32Array fills any float dtype). */
  copyFrom(data: Float32Array | Int32Array | BigInt64Array | Uint16Array): Tensor;
  /**
   * As copyFrom, but on cuda it returns at once: the elements go through a pinned buffer of
   * this tensor's storage and reach the device in stream order (ops enqueued later see them).
   * The pinned buffer is reused only after its previous copy ran. Synchronous on the cpu.
   */
  copyFromAsync(data: Float32Array | Int32Array | BigInt64Array | Uint16Array): Tensor;
  /**
   * Copies this cuda tensor into `dst`, a pinned cpu tensor of the same dtype and size
   * (pinnedEmpty), in stream order; returns at once. dst holds the elements once a fence
   * recorded afterwards has passed (fence().record(), then wait()).
   */
  copyToAsync(dst: Tensor): Tensor;
  /** A contiguous copy on `device` (also when it is this tensor's device). */
  to(device: DeviceName): Tensor;
}

/**
 * An adapted projection's delta, added by the op that takes its output y (ropeKvWrite,
 * siluMul, addRmsNorm). The projection's GEMM ran by W with every slot's A beneath (lib/lora/
 * slot_weights.ts), so each row of y carries, after its out columns, the row's input shrunk
 * by every slot (t, slots * S * R columns). The op adds to output o of row r t[r, its slot's
 * slice of o] · bT[the same, o]; bT [slots * S * R, out] is every slot's b transposed.
 * slotRanks [slots, S] gives the slots and slices; sliceStarts (S + 1 entries, from 0 to out)
 * each slice's first output: host values, which the kernels take as parameters. (The CUDA ops
 * sum the pool's whole rank: t is zero past a slot's own, as the pool's A rows are.)
 */
export type LoraDelta = [bT: Tensor, slotOfRow: Tensor, sliceStarts: Int32Array, slotRanks: Tensor];

/** A marker in the cuda stream. */
export interface Fence {
  /** Marks the ops enqueued so far; returns at once. */
  record(): void;
  /** Returns once the ops marked by the last record() ran (at once if never recorded). */
  wait(): void;
  /** Whether the ops marked by the last record() ran, without waiting (true if never recorded). */
  done(): boolean;
  dispose(): void;
}

/** Two timed marks in the cuda stream: the GPU time between them. */
export interface GpuTimer {
  /** Marks the ops enqueued so far as the start; returns at once. */
  start(): void;
  /** Marks the ops enqueued so far as the end; returns at once. */
  stop(): void;
  /** Whether the GPU has passed stop(), without waiting. */
  done(): boolean;
  /** Milliseconds from start() to stop() on the GPU; throws until done(). */
  ms(): number;
  dispose(): void;
}

/** One region of an upload: see Binding.upload. */
export interface UploadRegion {
  dst: Tensor;
  src: Tensor;
  row?: number;
  col?: number;
}

/** One window of a scatter plan: see Binding.scatterPlan. */
export interface ScatterRegion {
  /** A 2-D tensor; the window is [rows, cols] at (row, col), each by default to dst's end. */
  dst: Tensor;
  row?: number;
  col?: number;
  rows?: number;
  cols?: number;
  /** On dst's device, in dst's dtype: the window's elements, contiguous from element `at` (default 0). */
  src: Tensor;
  at?: number;
  /** src holds the window transposed, as [cols, rows]. */
  transpose?: boolean;
}

/** Windows of tensors filled from spans of others, checked once and run often (Binding.scatterPlan). */
export interface ScatterPlan {
  /** Windows it fills (empty ones are dropped). */
  readonly regions: number;
  /** Fills every window from its src (zero: with zeros), in stream order: one kernel on cuda. */
  run(zero?: boolean): void;
  dispose(): void;
}

/** A captured CUDA graph: the ops one call enqueued, replayed on the same tensors. */
export interface Graph {
  readonly disposed: boolean;
  /** Nodes of the captured graph (kernels, copies, memsets, scratch allocations). */
  readonly nodes: number;
  /** Launches the graph on the stream; returns at once. */
  replay(): void;
  dispose(): void;
}

export interface BuildInfo {
  cuda: boolean;
  cpuThreads: number;
  /** nvcc's version when cuda is true, e.g. "13.0.88": the driver must support this CUDA. */
  cudaVersion?: string;
  /** CMake's CUDA architectures when cuda is true, comma-separated: "80-real,90a-real,80-virtual". */
  cudaArchitectures?: string;
}

/** Libraries the cuda backend loads at run time (asking loads them once). */
export interface CudaLibraries {
  /** Without it, linear runs its own kernels for every batch size. */
  cublasLt: { loaded: boolean; path?: string; version?: number; error?: string };
}

export interface Binding {
  Tensor: abstract new () => Tensor;
  /** device defaults to 'cpu'; a 'cuda' tensor on a machine without one throws the runtime's reason. */
  empty(dtype: DType, shape: number[], device?: DeviceName): Tensor;
  zeros(dtype: DType, shape: number[], device?: DeviceName): Tensor;
  fromArray(
    dtype: DType, shape: number[], data: Float32Array | Int32Array | BigInt64Array | Uint16Array, device?: DeviceName,
  ): Tensor;
  /**
   * Reads `count` elements of `srcDtype` at `fileOffset` of `path` into dst from element
   * `dstOffset`, each times `scale` (default 1) before it is rounded to dst's dtype.
   */
  readInto(dst: Tensor, dstOffset: number, path: string, fileOffset: number, srcDtype: DType, count: number, scale?: number): void;
  /**
   * readInto on a libuv thread, into a cpu tensor; resolves when the bytes are in place, and
   * rejects (naming the file and the value) when one is NaN or ±Inf once scaled and stored.
   */
  readIntoAsync(
    dst: Tensor, dstOffset: number, path: string, fileOffset: number, srcDtype: DType, count: number, scale?: number,
  ): Promise<void>;
  /** A cpu tensor in page-locked memory where a CUDA device exists (ordinary memory elsewhere), so uploads from it do not wait. */
  pinnedEmpty(dtype: DType, shape: number[]): Tensor;
  /**
   * Copies host tensors into regions of device tensors without waiting: each region's
   * dst[row.., col..] = src (both 2-D, one dtype). Every dst is on one device. On cuda the
   * copies run on a side stream after every op enqueued before the call, and every op
   * enqueued after it waits for them (join false: only those enqueued after awaitUploads(),
   * so the copies overlap the ops enqueued meanwhile); a pinned src
   * (pinnedEmpty) copies asynchronously and is freed only once they ran, so it must not be
   * written meanwhile. On cpu, plain copies. Checks every region before copying any.
   */
  upload(regions: UploadRegion[], join?: boolean): void;
  /** Every op enqueued from now on waits for the uploads so far (a no-op on cpu). Throws while capturing a graph. */
  awaitUploads(): void;
  /**
   * A plan that fills every region's window of dst from its src: checked now (fit, dtype,
   * device, span), and on cuda laid out as a job table in device memory, so that each run
   * is one kernel, whatever the number of windows. The plan keeps every dst's and src's
   * memory alive until disposed. Windows should not overlap (a run fills them in no order).
   */
  scatterPlan(regions: ScatterRegion[]): ScatterPlan;
  buildInfo(): BuildInfo;
  /** Never throws: {count: 0, error} where CUDA is unusable. */
  cudaDevices(): { count: number; error?: string };
  cudaLibraries(): CudaLibraries;
  /** Free and total bytes of the CUDA device; throws where there is none. */
  cudaMemInfo(): { free: number; total: number };
  /**
   * GB/s of the best of `passes` timed reads (after one to warm up) of a device buffer of
   * `bytes`, by a kernel that only reads, as a decode step reads its weights. Throws where
   * there is no CUDA device.
   */
  cudaReadBandwidth(bytes: number, passes: number): number;
  /**
   * Up to this many rows (64) every row count makes a GEMM plan of its own (decode steps),
   * which gemmTuning picks by timing; above it, gemmRowBuckets.
   */
  gemmTunedRows: number;
  /**
   * Whether a GEMM shape of up to gemmTunedRows rows, met for the first time outside a
   * capture, picks cuBLASLt's algorithm by timing its candidates (off by default; the engine
   * turns it on for its graphs' warm-up steps; MSTAR_GEMM_TUNE=0 keeps it off).
   */
  gemmTuning(on: boolean): void;
  /**
   * The row counts above gemmTunedRows from which GEMMs make cuBLASLt's plans (a GEMM of n rows
   * runs the plan of the least of them >= n), up to the one serving maxRows: the engine's
   * warm-up steps meet each of them once, and every count up to gemmTunedRows.
   */
  gemmRowBuckets(maxRows: number): number[];
  /** Waits for every op enqueued on the cuda stream (a no-op when nothing was). */
  synchronize(): void;
  /**
   * Records the ops `fn` enqueues on the cuda stream (nothing runs) into a graph. fn must
   * only enqueue: anything that waits for the GPU (toArray, copyFrom, copyFromAsync,
   * synchronize) throws inside it, and a device tensor it allocates must be disposed before
   * it returns. Every tensor its ops touch must outlive the graph. On any error the capture
   * is discarded and the error thrown. Throws on a build or machine without CUDA.
   */
  captureGraph(fn: () => void): Graph;
  /** A fence on the cuda stream (recording it throws on a build or machine without CUDA). */
  fence(): Fence;
  /** A timer on the cuda stream (starting it throws on a build or machine without CUDA). */
  timer(): GpuTimer;

  embedding(out: Tensor, table: Tensor, ids: Tensor): void;
  /**
   * out = rmsNorm(x) * w. next: the output width of the projection that reads out (a decode
   * step's hint, same result: on CUDA a tensor-core GEMV there launches before the norm ends).
   */
  rmsNorm(out: Tensor, x: Tensor, w: Tensor, eps: number, next?: number): void;
  /**
   * residual += x; out = rmsNorm(residual) * w. With a LoraDelta, x is an adapted projection's
   * output (its rows wider: t after them), and residual += x plus each row's delta. next: as
   * rmsNorm's.
   */
  addRmsNorm(
    residual: Tensor, x: Tensor, w: Tensor, eps: number, out: Tensor,
    ...rest: [] | [next: number] | LoraDelta | [...LoraDelta, next: number]
  ): void;
  /** In place on the q and k heads of a fused qkv tensor. */
  headRmsNorm(qkv: Tensor, qWeight: Tensor, kWeight: Tensor, numHeads: number, numKvHeads: number, headDim: number, eps: number): void;
  /**
   * out = x · wᵀ (+ bias); accumulate: out += that, rounded once (a residual stream taking a
   * projection). Given wCol, w may be wider than x: x [n, in] meets w's columns [wCol, wCol + in)
   * (a projection's weight with every adapter slot's b beside W, see lib/lora/slot_weights.ts);
   * without it, x must be as wide as w.
   * unused (an extended projection, every slot's A beneath W): w's rows from `from` are
   * perSlot rows a slot; those of slots no row of slotOfRow holds (slot 0 among them) may be
   * left unwritten (CUDA skips them; no op reads a row's shrink but its own slot's).
   */
  linear(
    out: Tensor, x: Tensor, w: Tensor, bias: Tensor | null, accumulate?: boolean, wCol?: number,
    ...unused: [] | [slotOfRow: Tensor, from: number, perSlot: number]
  ): void;
  /**
   * linear of a wide row x (see loraShrink): its first `in` columns, then `slots` blocks of one
   * width, each row's zero outside its own slot's (slotOfRow: i32 [n]). The same result; the
   * decode GEMV (up to 4 rows) reads only its rows' own slots' columns of w.
   */
  linearWide(
    out: Tensor, x: Tensor, w: Tensor, bias: Tensor | null, accumulate: boolean, slotOfRow: Tensor, inCols: number, slots: number,
  ): void;
  /**
   * out [rows, inter] = SiLU(gate) · up of x · wᵀ (+ bias), w being [gate; up] (its rows may be
   * wider than x: their first columns count). gateUp [rows, 2 · inter] is scratch, its contents
   * after unspecified: at decode sizes CUDA's GEMV stores the product itself, else (and the CPU)
   * linear into gateUp, then siluMul.
   */
  linearSiluMul(out: Tensor, x: Tensor, w: Tensor, bias: Tensor | null, gateUp: Tensor): void;
  /**
   * A norm and the projection that reads it: out = rmsNorm(residual) * normW, times wᵀ (+ bias),
   * w's first columns (a pool may widen its rows); with gateUp, w is [gate; up] and out takes
   * SiLU(gate) · up as linearSiluMul. At decode sizes CUDA's tensor-core GEMV norms the residual
   * itself (no launch of the norm's own, x untouched); elsewhere (and the CPU) rmsNorm into x,
   * then linear or linearSiluMul (gateUp their scratch), x and gateUp scratch either way.
   */
  rmsNormLinear(
    out: Tensor, residual: Tensor, normW: Tensor, eps: number, w: Tensor, bias: Tensor | null, x: Tensor, gateUp?: Tensor,
  ): void;
  /** In place on q and k heads; rotates the first 2 * invFreq.length dims of each head. */
  rope(qkv: Tensor, positions: Tensor, invFreq: Tensor, numHeads: number, numKvHeads: number, headDim: number): void;
  /** out = SiLU(gate) · up; with a LoraDelta, gate and up each plus the row's delta (gateUp's rows wider: t after them). */
  siluMul(out: Tensor, gateUp: Tensor, ...lora: [] | LoraDelta): void;
  add(out: Tensor, a: Tensor, b: Tensor): void;
  gatherRows(out: Tensor, x: Tensor, indices: Tensor): void;
  /**
   * Decode inputs from the last step's samples, where from[i] >= 0: tokens[i] = sampled[from[i]]
   * and embedRows[i] = rowSlots[i] * vocab + tokens[i] (i32 throughout, one entry per token but sampled).
   */
  feedTokens(tokens: Tensor, embedRows: Tensor, sampled: Tensor, from: Tensor, rowSlots: Tensor, vocab: number): void;
  kvWrite(kCache: Tensor, vCache: Tensor, qkv: Tensor, slots: Tensor, numHeads: number, numKvHeads: number, headDim: number): void;
  /**
   * headRmsNorm (when both weights are given), rope, then kvWrite: one launch on CUDA. With a
   * LoraDelta, first each row's delta into qkv's own columns (its rows wider: t after them).
   * (The ops that take qkv accept rows wider than (numHeads + 2 * numKvHeads) * headDim.)
   */
  ropeKvWrite(
    qkv: Tensor, positions: Tensor, invFreq: Tensor, kCache: Tensor, vCache: Tensor, slots: Tensor,
    qWeight: Tensor | null, kWeight: Tensor | null, numHeads: number, numKvHeads: number, headDim: number, eps: number,
    ...lora: [] | LoraDelta
  ): void;
  pagedAttention(
    out: Tensor, qkv: Tensor, kCache: Tensor, vCache: Tensor, blockTables: Tensor, queryStarts: Tensor,
    contextLens: Tensor, numHeads: number, numKvHeads: number, headDim: number, scale: number,
  ): void;
  /**
   * pagedAttention into attn, then linear(out, attn, w, bias, accumulate, 0, ...unused): a decode
   * layer's attention and its o projection. At decode sizes CUDA's o projection merges the
   * attention's key splits as it loads its input (attention never merges them, and splits even
   * short contexts), and attn is left as it was; elsewhere (and the CPU) the two ops one by one.
   * attn is scratch either way.
   */
  pagedAttentionLinear(
    attn: Tensor, qkv: Tensor, kCache: Tensor, vCache: Tensor, blockTables: Tensor, queryStarts: Tensor,
    contextLens: Tensor, numHeads: number, numKvHeads: number, headDim: number, scale: number,
    out: Tensor, w: Tensor, bias: Tensor | null, accumulate: boolean,
    ...unused: [] | [slotOfRow: Tensor, from: number, perSlot: number]
  ): void;
  sample(outIds: Tensor, logits: Tensor, temperature: Tensor, topK: Tensor, topP: Tensor, seeds: Tensor, steps: Tensor): void;
  logprobs(chosenLogprobs: Tensor, topIds: Tensor, topLogprobs: Tensor, logits: Tensor, chosen: Tensor): void;

  /**
   * t[n, S*R] = per row, x · A[slotOfRow]ᵀ; rows of slot 0 get zeros. a: [slots, S*R, in].
   * slotRanks (every LoRA op): i32 [slots, S], each slot's rank per slice; rank rows past it
   * are zero padding, neither read nor multiplied.
   */
  /**
   * Or t is a wide row, [n, in + slots * S * R]: x, then every slot's S * R columns, the row's
   * own slot's holding its t and the others zeros: [x | t] · [W | b over every slot]ᵀ is then
   * the projection with its adapter, one GEMM.
   */
  loraShrink(t: Tensor, x: Tensor, a: Tensor, slotOfRow: Tensor, slotRanks?: Tensor): void;
  /**
   * out[n, outF] += per row, t(slice of each output row) · B[slotOfRow]ᵀ. b: [outF, slots, S * R], b[o, slot]
   * holding o's slice's R entries at that slice's place (zeros elsewhere): so with t spread over every
   * slot's place [n, slots * S * R] and masked (loraJoin), t · b viewed [outF, slots * S * R]ᵀ is the expand.
   */
  loraExpand(out: Tensor, t: Tensor, b: Tensor, slotOfRow: Tensor, sliceStarts: Int32Array, slotRanks?: Tensor): void;
  /**
   * wide [n, in + slots * W] = x [n, in], then s [n, slots * W] (a shrink by every slot at once)
   * with row r keeping only its slot's W columns, [slot * W, (slot + 1) * W) (slot 0 rows: none):
   * the wide row loraShrink makes (see there), from a GEMM's shrink.
   */
  loraJoin(wide: Tensor, x: Tensor, s: Tensor, slotOfRow: Tensor, slots: number): void;
  /** linear (with accumulate: out +=), then loraExpand(out, t, b, slotOfRow, sliceStarts): for decode batches one launch on CUDA. */
  linearExpand(
    out: Tensor, x: Tensor, w: Tensor, bias: Tensor | null, t: Tensor, b: Tensor, slotOfRow: Tensor, sliceStarts: Int32Array,
    accumulate?: boolean, slotRanks?: Tensor,
  ): void;
  /** dst[rowOffset.., colOffset..] = scale * src (or srcᵀ); both 2-D float tensors. srcCols: only src's first columns. */
  copyRegion(dst: Tensor, src: Tensor, rowOffset: number, colOffset: number, scale: number, transpose: boolean, srcCols?: number): void;
  fill(t: Tensor, value: number): void;
  /**
   * An adapter merged into its weight: w's first `in` columns = base [out, in] + b's k columns
   * from bCol · a's k rows from aRow, summed in f32 and rounded once; one dtype throughout. b
   * may be w itself from column `in` on (the pool's b beside W).
   */
  loraMerge(w: Tensor, base: Tensor, b: Tensor, bCol: number, a: Tensor, aRow: number, k: number): void;
  /** Largest |a - b| over two float tensors of one shape; NaN if either holds a NaN. */
  maxAbsDiff(a: Tensor, b: Tensor): number;
}

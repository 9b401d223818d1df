// Plain float64 reference implementations of the op set, written from the op contracts in
// lib/addon/types.ts, not from the kernels. Inputs are the values the tensors really hold
// (read back with toArray()); outputs are Float64Arrays in the ops' row-major layouts.

export type Vec = ArrayLike<number>;

/** Fused qkv rows: [tokens, (numHeads + 2 * numKvHeads) * headDim], q heads, then k, then v. */
export interface HeadLayout {
  numHeads: number;
  numKvHeads: number;
  headDim: number;
}

export function rowWidth(l: HeadLayout): number {
  return (l.numHeads + 2 * l.numKvHeads) * l.headDim;
}

/** Offset, within one fused qkv row, of q head h, k head h or v head h. */
export function headOffset(l: HeadLayout, part: 'q' | 'k' | 'v', h: number): number {
  const first = part === 'q' ? 0 : part === 'k' ? l.numHeads : l.numHeads + l.numKvHeads;
  return (first + h) * l.headDim;
}

export function embedding(table: Vec, dim: number, ids: Vec): Float64Array {
  return gatherRows(table, dim, ids);
}

export function gatherRows(x: Vec, dim: number, indices: Vec): Float64Array {
  const out = new Float64Array(indices.length * dim);
  for (let r = 0; r < indices.length; ++r)
    for (let i = 0; i < dim; ++i) out[r * dim + i] = x[indices[r] * dim + i];
  return out;
}

/** One row: x / sqrt(mean(x^2) + eps) * w. */
function normRow(out: Float64Array, outAt: number, x: Vec, xAt: number, w: Vec, eps: number): void {
  const d = w.length;
  let ss = 0;
  for (let i = 0; i < d; ++i) ss += x[xAt + i] ** 2;
  const r = 1 / Math.sqrt(ss / d + eps);
  for (let i = 0; i < d; ++i) out[outAt + i] = x[xAt + i] * r * w[i];
}

/** RMSNorm of every w.length-wide row of x. */
export function rmsNorm(x: Vec, w: Vec, eps: number): Float64Array {
  const out = new Float64Array(x.length);
  for (let at = 0; at < x.length; at += w.length) normRow(out, at, x, at, w, eps);
  return out;
}

/** residual += x; out = rmsNorm(residual) * w. */
export function addRmsNorm(residual: Vec, x: Vec, w: Vec, eps: number): { residual: Float64Array; out: Float64Array } {
  const sum = add(residual, x);
  return { residual: sum, out: rmsNorm(sum, w, eps) };
}

/** RMSNorm of every q head (with qw) and k head (with kw) of fused qkv rows; v is copied. */
export function headRmsNorm(qkv: Vec, qw: Vec, kw: Vec, l: HeadLayout, eps: number): Float64Array {
  const out = Float64Array.from(qkv);
  const width = rowWidth(l);
  for (let t = 0; t < qkv.length / width; ++t) {
    for (let h = 0; h < l.numHeads; ++h) {
      const at = t * width + headOffset(l, 'q', h);
      normRow(out, at, qkv, at, qw, eps);
    }
    for (let h = 0; h < l.numKvHeads; ++h) {
      const at = t * width + headOffset(l, 'k', h);
      normRow(out, at, qkv, at, kw, eps);
    }
  }
  return out;
}

/** out[n, outF] = x[n, inF] · w[outF, inF]ᵀ (+ bias[outF]). */
export function linear(x: Vec, w: Vec, bias: Vec | null, n: number, inF: number, outF: number): Float64Array {
  const out = new Float64Array(n * outF);
  for (let r = 0; r < n; ++r)
    for (let o = 0; o < outF; ++o) {
      let s = bias ? bias[o] : 0;
      for (let i = 0; i < inF; ++i) s += x[r * inF + i] * w[o * inF + i];
      out[r * outF + o] = s;
    }
  return out;
}

/**
 * Rotary embedding with rotate-half pairing: in every q and k head, dim i pairs with dim
 * i + half (half = invFreq.length) for i < half; dims past 2 * half and all v heads stay.
 * The angle is the f32 product position * invFreq[i], as torch forms its freqs table; at
 * positions in the hundreds a float64 product would differ from it by ~1e-5 rad.
 */
export function rope(qkv: Vec, positions: Vec, invFreq: Vec, l: HeadLayout): Float64Array {
  const out = Float64Array.from(qkv);
  const width = rowWidth(l);
  const half = invFreq.length;
  for (let t = 0; t < positions.length; ++t)
    for (let h = 0; h < l.numHeads + l.numKvHeads; ++h) {
      const at = t * width + h * l.headDim;
      for (let i = 0; i < half; ++i) {
        const angle = Math.fround(positions[t] * invFreq[i]);
        const c = Math.cos(angle);
        const s = Math.sin(angle);
        const x1 = qkv[at + i];
        const x2 = qkv[at + i + half];
        out[at + i] = x1 * c - x2 * s;
        out[at + i + half] = x2 * c + x1 * s;
      }
    }
  return out;
}

/** out[n, inter] = silu(gate) * up, where gateUp rows are [gate (inter), up (inter)]. */
export function siluMul(gateUp: Vec, n: number, inter: number): Float64Array {
  const out = new Float64Array(n * inter);
  for (let r = 0; r < n; ++r)
    for (let i = 0; i < inter; ++i) {
      const g = gateUp[r * 2 * inter + i];
      const u = gateUp[r * 2 * inter + inter + i];
      out[r * inter + i] = (g / (1 + Math.exp(-g))) * u;
    }
  return out;
}

export function add(a: Vec, b: Vec): Float64Array {
  return Float64Array.from(a, (v, i) => v + b[i]);
}

/**
 * Causal softmax attention of one sequence. q: [qLen, numHeads, headDim] (the new tokens),
 * k and v: [context, numKvHeads, headDim] (all cached tokens, the new ones last). Query j
 * sits at position context - qLen + j and attends to positions 0..that position; q head h
 * reads kv head floor(h / (numHeads / numKvHeads)). Returns [qLen, numHeads * headDim].
 */
export function causalAttention(q: Vec, k: Vec, v: Vec, l: HeadLayout, scale: number): Float64Array {
  const hd = l.headDim;
  const qLen = q.length / (l.numHeads * hd);
  const context = k.length / (l.numKvHeads * hd);
  const group = l.numHeads / l.numKvHeads;
  const out = new Float64Array(qLen * l.numHeads * hd);
  for (let j = 0; j < qLen; ++j) {
    const pos = context - qLen + j;
    for (let h = 0; h < l.numHeads; ++h) {
      const qAt = (j * l.numHeads + h) * hd;
      const kvHead = Math.floor(h / group);
      const scores: number[] = [];
      for (let p = 0; p <= pos; ++p) {
        let dot = 0;
        for (let d = 0; d < hd; ++d) dot += q[qAt + d] * k[(p * l.numKvHeads + kvHead) * hd + d];
        scores.push(dot * scale);
      }
      const probs = softmax(scores);
      for (let p = 0; p <= pos; ++p)
        for (let d = 0; d < hd; ++d) out[qAt + d] += probs[p] * v[(p * l.numKvHeads + kvHead) * hd + d];
    }
  }
  return out;
}

export function softmax(logits: Vec, temperature = 1): Float64Array {
  const max = Math.max(...Array.from(logits));
  const e = Float64Array.from(logits, (x) => Math.exp((x - max) / temperature));
  const total = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / total);
}

export function logSoftmax(logits: Vec): Float64Array {
  const max = Math.max(...Array.from(logits));
  let total = 0;
  for (let i = 0; i < logits.length; ++i) total += Math.exp(logits[i] - max);
  const lse = max + Math.log(total);
  return Float64Array.from(logits, (x) => x - lse);
}

/** The first index of the largest logit. */
export function argmax(logits: Vec): number {
  let best = 0;
  for (let i = 1; i < logits.length; ++i) if (logits[i] > logits[best]) best = i;
  return best;
}

/** Token ids by descending logit (ties: lower id first). */
export function ranked(logits: Vec): number[] {
  return Array.from(logits, (_, i) => i).sort((a, b) => logits[b] - logits[a] || a - b);
}

/**
 * The tokens sampling may return, most likely first, with the probabilities it draws
 * them with: softmax(logits / temperature) over the topK most likely tokens (topK <= 0:
 * all), then cut to the smallest prefix whose probability reaches topP (at least one
 * token), renormalised.
 */
/** One row's sampling settings, as sample() takes them (seed and step pick its random stream). */
export interface Draw {
  temperature: number;
  topK: number;
  topP: number;
  seed: number;
  step: number;
}

export function samplingDistribution(logits: Vec, temperature: number, topK: number, topP: number): { ids: number[]; probs: number[] } {
  let ids = ranked(logits);
  if (topK > 0) ids = ids.slice(0, topK);
  let probs = Array.from(softmax(ids.map((i) => logits[i]), temperature));
  if (topP < 1) {
    let cum = 0;
    let keep = 0;
    do cum += probs[keep++];
    while (keep < ids.length && cum < topP);
    ids = ids.slice(0, keep);
    probs = probs.slice(0, keep);
  }
  const total = probs.reduce((a, b) => a + b, 0);
  return { ids, probs: probs.map((p) => p / total) };
}

import type { RopeConfig } from '../checkpoint/config.js';

const f32 = Math.fround;

/**
 * RoPE inverse frequencies exactly as transformers computes them (modeling_rope_utils:
 * _compute_default_rope_parameters, _compute_linear_scaling_rope_parameters,
 * _compute_llama3_parameters), so our cos/sin tables match the reference model's to the last
 * bit, except where torch's powf itself is off by one ulp.
 *
 * torch does that arithmetic on float32 tensors: every tensor op rounds its result to float32,
 * and Python scalars meeting a float32 tensor are first cast to float32. Each `f32(...)` below
 * stands for one such rounding. A float32 op computed in float64 and rounded once is exact
 * for + - * / (double rounding is innocuous at these widths), so Math.fround reproduces torch.
 * Division by a scalar follows torch's CPU kernel (a true division); inv_freq is built on the
 * CPU at model init.
 */
export function ropeInvFreq(rope: RopeConfig, headDim: number): { invFreq: Float32Array; rotaryDim: number } {
  // transformers: dim = int(head_dim * partial_rotary_factor)
  const rotaryDim = Math.floor(headDim * rope.partialRotaryFactor);
  if (rotaryDim <= 0 || rotaryDim % 2 !== 0) {
    throw new Error(`rotary dim ${rotaryDim} (head_dim ${headDim} × partial_rotary_factor ${rope.partialRotaryFactor}) must be even and positive`);
  }
  const invFreq = defaultInvFreq(rope.theta, rotaryDim);
  switch (rope.type) {
    case 'default':
      return { invFreq, rotaryDim };
    case 'linear':
      return { invFreq: invFreq.map((v) => f32(v / f32(required(rope.factor, 'factor')))), rotaryDim };
    case 'llama3':
      return { invFreq: llama3Scaled(invFreq, rope), rotaryDim };
  }
}

/** inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)) */
function defaultInvFreq(theta: number, dim: number): Float32Array {
  const base = f32(theta);
  const out = new Float32Array(dim / 2);
  for (let i = 0; i < out.length; i++) {
    const exponent = f32((2 * i) / dim);
    const pow = f32(Math.pow(base, exponent));
    // `1.0 / tensor` is Tensor.__rtruediv__ = reciprocal() * 1.0
    out[i] = f32(1 / pow);
  }
  return out;
}

/**
 * Llama 3.1 frequency scaling: low frequencies (long wavelengths) are divided by `factor`,
 * high frequencies kept, and the band between blended smoothly.
 */
function llama3Scaled(invFreq: Float32Array, rope: RopeConfig): Float32Array {
  const factor = f32(required(rope.factor, 'factor'));
  const low = required(rope.lowFreqFactor, 'low_freq_factor');
  const high = required(rope.highFreqFactor, 'high_freq_factor');
  const oldContextLen = required(rope.originalMaxPositionEmbeddings, 'original_max_position_embeddings');
  // Python floats; each is cast to float32 where it meets a tensor.
  const lowFreqWavelen = f32(oldContextLen / low);
  const highFreqWavelen = f32(oldContextLen / high);
  const twoPi = f32(2 * Math.PI);

  return invFreq.map((inv) => {
    // wavelen = 2 * math.pi / inv_freq  (scalar / tensor = reciprocal() * scalar)
    const wavelen = f32(f32(1 / inv) * twoPi);
    // inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    const invLlama = wavelen > lowFreqWavelen ? f32(inv / factor) : inv;
    const isMedium = !(wavelen < highFreqWavelen) && !(wavelen > lowFreqWavelen);
    if (!isMedium) return invLlama;
    // smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    const ratio = f32(f32(1 / wavelen) * f32(oldContextLen));
    const smooth = f32(f32(ratio - f32(low)) / f32(high - low));
    // smoothed = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    const scaledPart = f32(f32(f32(1 - smooth) * invLlama) / factor);
    return f32(scaledPart + f32(smooth * invLlama));
  });
}

function required(v: number | undefined, name: string): number {
  if (v === undefined) throw new Error(`RoPE scaling needs ${name}`);
  return v;
}

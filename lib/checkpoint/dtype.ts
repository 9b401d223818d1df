/** Element types a safetensors header may name (the subset mstar recognises). */
export const SAFETENSORS_DTYPES = [
  'BF16', 'F16', 'F32', 'F64', 'I64', 'I32', 'I16', 'I8', 'U8', 'BOOL', 'F8_E4M3', 'F8_E5M2',
] as const;
export type SafetensorsDtype = (typeof SAFETENSORS_DTYPES)[number];

/** Bytes per element; needed to check each tensor's byte range against its shape. */
export const ITEM_SIZE: Readonly<Record<SafetensorsDtype, number>> = {
  BF16: 2, F16: 2, F32: 4, F64: 8, I64: 8, I32: 4, I16: 2, I8: 1, U8: 1, BOOL: 1,
  F8_E4M3: 1, F8_E5M2: 1,
};

/**
 * FP8 headers are parsed (so a file with them opens and its other tensors are usable), but no
 * engine kernel consumes them: weights in these types are refused when planned.
 */
export const KNOWN_UNSUPPORTED_DTYPES: ReadonlySet<SafetensorsDtype> = new Set(['F8_E4M3', 'F8_E5M2']);

/** Element types the engine stores weights in. */
export type WeightDtype = 'bf16' | 'f16' | 'f32';

const WEIGHT_DTYPE_OF: Partial<Record<SafetensorsDtype, WeightDtype>> = { BF16: 'bf16', F16: 'f16', F32: 'f32' };

export function isSafetensorsDtype(name: string): name is SafetensorsDtype {
  return (SAFETENSORS_DTYPES as readonly string[]).includes(name);
}

/** The engine dtype a safetensors tensor loads as, or undefined when it cannot be a weight. */
export function weightDtypeOf(dtype: SafetensorsDtype): WeightDtype | undefined {
  return WEIGHT_DTYPE_OF[dtype];
}

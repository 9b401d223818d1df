// bfloat16 bit patterns: the top 16 bits of an IEEE float32, rounded to nearest even.
const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

export function toBf16Bits(x: number): number {
  f32[0] = x;
  const bits = u32[0];
  if ((bits & 0x7f800000) === 0x7f800000 && (bits & 0x7fffff) !== 0) return 0x7fc0; // NaN stays NaN
  return ((bits + 0x7fff + ((bits >>> 16) & 1)) >>> 16) & 0xffff;
}

export function fromBf16Bits(bits: number): number {
  u32[0] = (bits & 0xffff) << 16;
  return f32[0];
}

// Seeded pseudo-random numbers: xorshift128 (period 2^128 - 1, four 32-bit words of state),
// seeded through splitmix32. Not cryptographic; fast, and the same seed gives the same stream
// on every machine, which is what synthetic weights and reproducible load need.

/** Mixes a 32-bit value into a well-spread one (splitmix32's finaliser). */
function mix32(x: number): number {
  x = Math.imul(x ^ (x >>> 16), 0x21f0aaad);
  x = Math.imul(x ^ (x >>> 15), 0x735a2d97);
  return (x ^ (x >>> 15)) >>> 0;
}

/** A 32-bit hash of a string (FNV-1a), to derive independent streams from names. */
export function hashString(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

export class Rng {
  private a: number;
  private b: number;
  private c: number;
  private d: number;

  /** `stream` separates generators that share a seed (e.g. one per tensor). */
  constructor(seed: number, stream = 0) {
    let s = (mix32(seed >>> 0) ^ mix32((stream >>> 0) + 0x9e3779b9)) >>> 0;
    const next = (): number => (s = (s + 0x9e3779b9) >>> 0, mix32(s));
    this.a = next();
    this.b = next();
    this.c = next();
    this.d = next();
    if ((this.a | this.b | this.c | this.d) === 0) this.d = 1;
  }

  /** A uniform 32-bit unsigned integer. */
  u32(): number {
    let t = this.d;
    const s = this.a;
    this.d = this.c;
    this.c = this.b;
    this.b = s;
    t ^= t << 11;
    t ^= t >>> 8;
    this.a = (t ^ s ^ (s >>> 19)) >>> 0;
    return this.a;
  }

  /** Uniform in [0, 1). */
  float(): number {
    return this.u32() / 4294967296;
  }

  /** Uniform integer in [lo, hi). */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.float() * (hi - lo));
  }

  /**
   * Fills `out` (of even length) with entries of the 65536-entry `table`, two a 32-bit word:
   * its low 16 bits index the first, its high 16 the second. A table of quantiles makes these
   * draws from its distribution. The hot loop of weight synthesis, so the state stays in int32
   * locals (as uint32s, `>>> 0`, V8 kept them as doubles: 3x slower for the same words) and each
   * word is used where it is made.
   */
  fillFromTable(out: Uint16Array, table: Uint16Array): void {
    if (out.length % 2 !== 0 || table.length !== 65536) throw new Error('fillFromTable: an even-length output and a 65536-entry table');
    let a = this.a | 0, b = this.b | 0, c = this.c | 0, d = this.d | 0;
    for (let i = 0; i < out.length; i += 2) {
      let t = d;
      const s = a;
      d = c;
      c = b;
      b = s;
      t ^= t << 11;
      t ^= t >>> 8;
      a = t ^ s ^ (s >>> 19);
      out[i] = table[a & 0xffff];
      out[i + 1] = table[a >>> 16];
    }
    this.a = a >>> 0;
    this.b = b >>> 0;
    this.c = c >>> 0;
    this.d = d >>> 0;
  }
}

/** A config or flag `mstar synth` cannot honour (too small a vocabulary, an unknown target): a usage error. */
export class SynthError extends Error {
  override readonly name = 'SynthError';
}

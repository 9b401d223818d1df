// Prompt and output lengths: fixed ("128") or uniform over a range ("64:256"), drawn per request.
import type { Rng } from '../synth/rng.js';

export interface LengthDist {
  min: number;
  max: number;
}

/** Parses "N" or "MIN:MAX"; undefined when the text is neither. */
export function parseLength(text: string): LengthDist | undefined {
  const m = /^(\d+)(?::(\d+))?$/.exec(text.trim());
  if (!m) return undefined;
  const min = Number(m[1]);
  const max = m[2] === undefined ? min : Number(m[2]);
  return min >= 1 && max >= min ? { min, max } : undefined;
}

export function formatLength(d: LengthDist): string {
  return d.min === d.max ? String(d.min) : `${d.min}:${d.max}`;
}

export function drawLength(d: LengthDist, rng: Rng): number {
  return d.min === d.max ? d.min : rng.int(d.min, d.max + 1);
}

export function meanLength(d: LengthDist): number {
  return (d.min + d.max) / 2;
}

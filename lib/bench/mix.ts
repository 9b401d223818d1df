// Adapter mixes: which model name each request of a cell asks for.
import { Rng } from '../synth/rng.js';

export const MIXES = ['base', 'one', 'churn', 'mixed'] as const;
export type MixName = (typeof MIXES)[number];

export const MIX_HELP: Readonly<Record<MixName, string>> = {
  base: 'LoRA on, every request names the base model',
  one: 'every request names the first adapter',
  churn: 'round robin over all adapters (more adapters than slots makes the server swap)',
  mixed: 'each request names an adapter drawn uniformly from all of them',
};

export function isMix(name: string): name is MixName {
  return (MIXES as readonly string[]).includes(name);
}

export function needsAdapters(mix: MixName): boolean {
  return mix !== 'base';
}

/** The model name of request i of a cell. */
export function modelPicker(mix: MixName, base: string, adapters: readonly string[], seed: number): (i: number) => string {
  if (needsAdapters(mix) && adapters.length === 0) throw new Error(`mix ${mix} needs adapters`);
  switch (mix) {
    case 'base':
      return () => base;
    case 'one':
      return () => adapters[0];
    case 'churn':
      return (i) => adapters[i % adapters.length];
    case 'mixed':
      // A pure function of i, so the draw does not depend on the order requests are issued in.
      return (i) => adapters[new Rng(seed, 0x313000 + i).int(0, adapters.length)];
  }
}

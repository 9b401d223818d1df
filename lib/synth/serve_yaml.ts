// A serve.yaml beside the synthetic checkpoint, so `mstar serve -c OUT/serve.yaml` and
// `mstar bench --serve OUT/serve.yaml` work on it with no further setup.
import { writeFile } from 'node:fs/promises';
import { join, relative } from 'node:path';

import { stringify } from 'yaml';

import type { WrittenAdapter } from './adapters.js';

export interface ServeYamlSpec {
  name: string;
  maxPositionEmbeddings: number;
  adapters: readonly WrittenAdapter[];
  rank: number;
  targets: readonly string[];
}

/**
 * Benchmarks need short sequences (and a 4k-token prefill), not the model's full context:
 * capping max_seq_len keeps the KV cache a server reserves per sequence (and so its
 * start-up) small.
 */
const BENCH_MAX_SEQ_LEN = 8192;
/** Fewer slots than adapters is what makes the `churn` mix churn. */
const DEFAULT_SLOTS = 4;

export async function writeServeYaml(dir: string, spec: ServeYamlSpec): Promise<string> {
  const config: Record<string, unknown> = {
    model: '.',
    served_model_name: spec.name,
    max_seq_len: Math.min(BENCH_MAX_SEQ_LEN, spec.maxPositionEmbeddings),
  };
  if (spec.adapters.length > 0) {
    config['resources'] = {
      lora: {
        slots: Math.min(DEFAULT_SLOTS, spec.adapters.length),
        max_rank: spec.rank,
        targets: [...spec.targets],
        adapters: spec.adapters.map((a) => ({ name: a.name, path: relative(dir, a.path) })),
      },
    };
  }
  const file = join(dir, 'serve.yaml');
  await writeFile(file, `# Written by mstar synth. Serve with: mstar serve -c ${file}\n${stringify(config)}`);
  return file;
}

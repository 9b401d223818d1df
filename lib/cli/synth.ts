// `mstar synth`: a random-weight checkpoint with a real model's exact tensor names and shapes,
// a tokenizer, N random PEFT adapters and a serve.yaml, for benchmarking without downloads.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { basename, resolve } from 'node:path';
import { parseArgs } from 'node:util';

import { CheckpointError } from '../checkpoint/errors.js';
import { formatBytes, StatusLine } from '../bench/status_line.js';
import { DEFAULT_TARGETS } from '../synth/adapters.js';
import { SynthError } from '../synth/errors.js';
import { PRESET_NAMES, presetConfig, type RawConfig } from '../synth/presets.js';
import { synthesize } from '../synth/synthesize.js';

export const SYNTH_HELP = `usage: mstar synth (--preset NAME | --config config.json) --out DIR [options]

Writes a checkpoint of random bf16 weights with the exact tensor names and shapes of a real
model (config.json, safetensors shards, tokenizer.json, tokenizer_config.json,
generation_config.json), N random PEFT LoRA adapters under DIR/adapters/, and DIR/serve.yaml
to serve or benchmark them.

options:
      --preset NAME      ${PRESET_NAMES.join(', ')}
      --config FILE      any supported Hugging Face config.json instead of a preset
  -o, --out DIR          output folder (must be empty unless --force)
      --name NAME        served model name in serve.yaml (default: the preset or folder name)
      --adapters N       number of random adapters (default 0)
      --rank R           adapter rank (default 16)
      --alpha A          lora_alpha (default 32)
      --targets LIST     comma-separated modules (default ${DEFAULT_TARGETS.join(',')})
      --seed S           random seed (default 0); the same seed writes the same bytes
      --layers L         override num_hidden_layers (quick tests of a big model's shapes)
      --force            write into a non-empty folder, replacing its weights
  -h, --help             show this help
`;

const OPTIONS = {
  preset: { type: 'string' },
  config: { type: 'string' },
  out: { type: 'string', short: 'o' },
  name: { type: 'string' },
  adapters: { type: 'string' },
  rank: { type: 'string' },
  alpha: { type: 'string' },
  targets: { type: 'string' },
  seed: { type: 'string' },
  layers: { type: 'string' },
  force: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

class UsageError extends Error {}

function intFlag(value: string | undefined, flag: string, fallback: number, min: number): number {
  if (value === undefined) return fallback;
  if (!/^\d+$/.test(value) || Number(value) < min) throw new UsageError(`${flag} expects an integer >= ${min}, got ${JSON.stringify(value)}`);
  return Number(value);
}

export async function runSynth(args: string[]): Promise<number> {
  const fail = (message: string): number => {
    process.stderr.write(`mstar synth: ${message}\n`);
    return 2;
  };
  let values: ReturnType<typeof parseArgs<{ args: string[]; options: typeof OPTIONS }>>['values'];
  try {
    ({ values } = parseArgs({ args, options: OPTIONS, allowPositionals: false, strict: true }));
  } catch (e) {
    return fail(`${(e as Error).message}\n\n${SYNTH_HELP}`);
  }
  if (values.help) {
    process.stdout.write(SYNTH_HELP);
    return 0;
  }

  let config: RawConfig, adapters: number, rank: number, alpha: number, seed: number, layers: number | undefined;
  try {
    if ((values.preset === undefined) === (values.config === undefined)) throw new UsageError('give exactly one of --preset NAME or --config FILE');
    if (values.out === undefined) throw new UsageError('--out DIR is required');
    config = values.preset !== undefined ? presetOrFail(values.preset) : readConfig(values.config!);
    adapters = intFlag(values.adapters, '--adapters', 0, 0);
    rank = intFlag(values.rank, '--rank', 16, 1);
    // The serve.yaml written beside the adapters must load: its max_rank allows at most 512.
    if (rank > 512) throw new UsageError(`--rank ${rank} is above 512, the largest max_rank a serve.yaml takes`);
    seed = intFlag(values.seed, '--seed', 0, 0);
    layers = values.layers === undefined ? undefined : intFlag(values.layers, '--layers', 0, 1);
    alpha = values.alpha === undefined ? 32 : Number(values.alpha);
    if (!Number.isFinite(alpha) || alpha <= 0) throw new UsageError(`--alpha expects a positive number, got ${JSON.stringify(values.alpha)}`);
  } catch (e) {
    if (e instanceof UsageError) return fail(e.message);
    throw e;
  }
  const targets = values.targets === undefined ? DEFAULT_TARGETS : values.targets.split(',').map((t) => t.trim()).filter(Boolean);
  const out = resolve(values.out!);
  if (existsSync(out) && readdirSync(out).length > 0 && !values.force) {
    return fail(`${out} is not empty (pass --force to write into it)`);
  }
  const name = values.name ?? values.preset ?? basename(out);

  const status = new StatusLine(process.stdout);
  const started = Date.now();
  const seconds = (): string => `${((Date.now() - started) / 1000).toFixed(1)} s`;
  let nextQuarter = 0.25;
  try {
    const result = await synthesize({
      out, config, name, seed, layers,
      adapters: { count: adapters, rank, alpha, targets },
      onWeights: (p) => {
        const frac = p.bytes / p.totalBytes;
        status.update(`weights ${(frac * 100).toFixed(0).padStart(3)}%  ${formatBytes(p.bytes)} of ${formatBytes(p.totalBytes)}  ${seconds()}`);
        if (!status.live && frac >= nextQuarter) {
          status.log(`weights ${Math.floor(frac * 100)}%  ${formatBytes(p.bytes)} of ${formatBytes(p.totalBytes)}  ${seconds()}`);
          while (nextQuarter <= frac) nextQuarter += 0.25;
        }
      },
      onAdapter: (a, i, n) => status.update(`adapters ${i + 1}/${n}  ${a.name}  ${formatBytes(a.bytes)}`, true),
    });
    status.clear();
    const c = result.checkpoint.config;
    status.log(`wrote ${c.family} checkpoint to ${out}: ${c.numLayers} layers, hidden ${c.hiddenSize}, vocab ${c.vocabSize}, ` +
      `${formatBytes(result.checkpoint.tensorBytes)} in ${result.checkpoint.shards.length} file(s), ${seconds()}`);
    if (result.adapters.length > 0) {
      status.log(`wrote ${result.adapters.length} adapters (rank ${rank}, alpha ${alpha}, ${targets.join(',')}; ` +
        `${formatBytes(result.adapters[0].bytes)} each) to ${out}/adapters`);
    }
    status.log(`serve: mstar serve -c ${result.serveYaml}`);
    status.log(`bench: mstar bench --serve ${result.serveYaml}`);
    return 0;
  } catch (e) {
    status.clear();
    if (e instanceof CheckpointError || e instanceof SynthError) return fail(e.message);
    throw e;
  }
}

function presetOrFail(name: string): RawConfig {
  const config = presetConfig(name);
  if (config === undefined) throw new UsageError(`unknown preset ${JSON.stringify(name)} (known: ${PRESET_NAMES.join(', ')})`);
  return config;
}

function readConfig(file: string): RawConfig {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    throw new UsageError(`cannot read ${file}: ${(e as Error).message}`);
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new UsageError(`${file} is not a JSON object`);
  return raw as RawConfig;
}

// Reads serve.yaml (optional), lays command-line overrides over it, validates the result
// against the one schema and fills its defaults.
import { readFileSync } from 'node:fs';
import { dirname, isAbsolute, resolve } from 'node:path';

import { Ajv } from 'ajv';
import { parseDocument } from 'yaml';

import { describeErrors } from './describe.js';
import { type ServeConfig, serveConfigSchema } from './schema.js';

/** Settings given on the command line; they win over the file. Values are checked like the file's. */
export interface ServeOverrides {
  model?: string;
  device?: string;
  dtype?: string;
  host?: string;
  /** A string that is not a number is reported as a bad --port. */
  port?: number | string;
  served_model_name?: string;
  /** --lora-modules name=path: adapters to load at start (turns LoRA on). */
  lora_modules?: { name: string; path: string }[];
}

/** Where each override lands in the file's shape, and the flag to blame in errors. */
const OVERRIDES: Record<Exclude<keyof ServeOverrides, 'lora_modules'>, { path: readonly string[]; flag: string }> = {
  model: { path: ['model'], flag: '--model' },
  device: { path: ['device'], flag: '--device' },
  dtype: { path: ['dtype'], flag: '--dtype' },
  host: { path: ['server', 'host'], flag: '--host' },
  port: { path: ['server', 'port'], flag: '--port' },
  served_model_name: { path: ['served_model_name'], flag: '--served-model-name' },
};

export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}

const ajv = new Ajv({ allErrors: true, useDefaults: true, verbose: true, strict: true });
const validate = ajv.compile(serveConfigSchema);

/**
 * `file` undefined: no serve.yaml, only defaults and overrides (then --model is required).
 * A relative `model` resolves against the YAML file's folder; from an override, against the
 * working directory. Throws ConfigError with one line per problem.
 */
export function loadServeConfig(file: string | undefined, overrides: ServeOverrides = {}): ServeConfig {
  const label = file ?? 'mstar serve';
  const raw = file === undefined ? {} : readYaml(file);

  const flagOf = new Map<string, string>();
  const { lora_modules: loraModules, ...plain } = overrides;
  for (const [key, value] of Object.entries(plain) as [Exclude<keyof ServeOverrides, 'lora_modules'>, unknown][]) {
    if (value === undefined) continue;
    const { path, flag } = OVERRIDES[key];
    setPath(raw, path, value, label);
    flagOf.set(path.join('.'), flag);
  }
  const modelAsWritten = raw.model;

  if (!validate(raw)) {
    const lines = describeErrors(validate.errors ?? [], (path) => flagOf.get(path) ?? label).map((line) =>
      line.endsWith(': model is required') ? `${line}: set \`model: <checkpoint folder>\` in serve.yaml or pass --model DIR` : line,
    );
    throw new ConfigError(lines.join('\n'));
  }

  const config = raw as unknown as ServeConfig;
  const base = flagOf.has('model') || file === undefined ? process.cwd() : dirname(resolve(file));
  config.model = isAbsolute(config.model) ? config.model : resolve(base, config.model);
  config.served_model_name ??= modelAsWritten as string;
  const fileBase = file === undefined ? process.cwd() : dirname(resolve(file));
  if (config.resources.lora) {
    for (const a of config.resources.lora.adapters) a.path = resolve(fileBase, a.path);
  }
  const kv = config.kv_cache;
  if (kv.num_blocks !== undefined && kv.memory_fraction !== undefined) {
    throw new ConfigError(`${label}: kv_cache: give num_blocks or memory_fraction, not both`);
  }
  if (loraModules && loraModules.length > 0) {
    // Command-line adapters turn LoRA on with the schema's defaults when the file did not.
    if (!config.resources.lora) {
      const withLora = { ...raw, resources: { lora: {} } };
      validate(withLora);
      config.resources.lora = (withLora as unknown as ServeConfig).resources.lora;
    }
    const lora = config.resources.lora!;
    for (const m of loraModules) {
      if (lora.adapters.some((a) => a.name === m.name)) throw new ConfigError(`--lora-modules: adapter ${m.name} is given twice`);
      lora.adapters.push({ name: m.name, path: resolve(process.cwd(), m.path) });
    }
  }
  // Requests name adapters as models: each name once, and never the base model's.
  const names = new Set<string>();
  for (const a of config.resources.lora?.adapters ?? []) {
    if (names.has(a.name)) throw new ConfigError(`${label}: resources.lora.adapters: ${a.name} is named twice`);
    if (a.name === config.served_model_name) {
      throw new ConfigError(`${label}: resources.lora.adapters: ${a.name} is the served model's name, so requests could never reach the adapter`);
    }
    names.add(a.name);
  }
  return config;
}

function readYaml(file: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new ConfigError(`${file}: cannot read: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  const doc = parseDocument(text, { uniqueKeys: true });
  if (doc.errors.length > 0) {
    throw new ConfigError(doc.errors.map((e) => `${file}: invalid YAML: ${e.message}`).join('\n'));
  }
  const value: unknown = doc.toJS();
  if (value === null || value === undefined) return {};
  if (typeof value !== 'object' || Array.isArray(value)) {
    throw new ConfigError(`${file}: must be a mapping of settings (key: value), got ${Array.isArray(value) ? 'a list' : JSON.stringify(value)}`);
  }
  return value as Record<string, unknown>;
}

/** Sets a flag's value in the file's settings; a section the file gave as something else than a mapping stays an error. */
function setPath(target: Record<string, unknown>, path: readonly string[], value: unknown, label: string): void {
  let node = target;
  for (let i = 0; i < path.length - 1; i++) {
    const key = path[i], next = node[key];
    if (next === undefined || next === null) node[key] = {};
    else if (typeof next !== 'object' || Array.isArray(next)) {
      throw new ConfigError(`${label}: ${path.slice(0, i + 1).join('.')} must be a mapping, got ${JSON.stringify(next)}`);
    }
    node = node[key] as Record<string, unknown>;
  }
  node[path[path.length - 1]] = value;
}

// `mstar serve`: load the config, start the engine thread, listen until SIGINT/SIGTERM.
import { existsSync, statSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { parseArgs } from 'node:util';

import { engineOptionsOf } from '../config/engine_options.js';
import { DEMO_NAME, demoModel } from '../config/demo.js';
import { ConfigError, loadServeConfig } from '../config/load.js';
import type { ServeConfig } from '../config/schema.js';
import { EngineClient, EngineStartError } from '../engine/client.js';
import { buildApp } from '../server/app.js';
import { stderrTrace } from '../server/trace.js';
import { Tokenizer } from '../tokenizer/tokenizer.js';

export const SERVE_HELP = `usage: mstar serve [--config serve.yaml] [--model DIR] [options]

With neither --config nor --model it serves the small demo model that ships with
mstar (trained on licence texts) and its two adapters, "shout" and "gpl".

Serves a checkpoint over an OpenAI-compatible HTTP API (/v1/completions,
/v1/chat/completions, /v1/models, /health, /metrics).

options (each overrides the same setting in the config file):
  -c, --config FILE            serve.yaml with every setting (see its schema)
  -m, --model DIR              Hugging Face checkpoint folder
      --device auto|cpu|cuda   where the model runs (default auto)
      --dtype bf16|f16|f32     weight and activation type
      --host HOST              address to listen on (default 127.0.0.1)
  -p, --port PORT              port to listen on (default 8000; 0 picks a free one)
      --served-model-name NAME the name clients send as "model"
      --lora-modules NAME=PATH a PEFT LoRA adapter to serve as model NAME
                               (repeatable; turns LoRA on)
  -h, --help                   show this help
`;

const SHUTDOWN_GRACE_MS = 5000;

const OPTIONS = {
  config: { type: 'string', short: 'c' },
  model: { type: 'string', short: 'm' },
  device: { type: 'string' },
  dtype: { type: 'string' },
  host: { type: 'string' },
  port: { type: 'string', short: 'p' },
  'served-model-name': { type: 'string' },
  'lora-modules': { type: 'string', multiple: true },
  help: { type: 'boolean', short: 'h' },
} as const;

/** Returns the process exit code: 0 after a clean shutdown, 2 for usage/config errors. */
export async function runServe(args: string[]): Promise<number> {
  let values: ReturnType<typeof parseArgs<{ args: string[]; options: typeof OPTIONS }>>['values'];
  try {
    ({ values } = parseArgs({ args, options: OPTIONS, allowPositionals: false, strict: true }));
  } catch (e) {
    process.stderr.write(`mstar serve: ${(e as Error).message}\n\n${SERVE_HELP}`);
    return 2;
  }
  if (values.help) {
    process.stdout.write(SERVE_HELP);
    return 0;
  }

  const loraModules: { name: string; path: string }[] = [];
  for (const spec of values['lora-modules'] ?? []) {
    const eq = spec.indexOf('=');
    if (eq <= 0 || eq === spec.length - 1) {
      process.stderr.write(`mstar serve: --lora-modules expects NAME=PATH, got ${JSON.stringify(spec)}\n`);
      return 2;
    }
    loraModules.push({ name: spec.slice(0, eq), path: spec.slice(eq + 1) });
  }

  // Neither a config nor a model: serve the demo model that ships with the package.
  const demo = values.config === undefined && values.model === undefined ? demoModel() : undefined;
  if (demo) loraModules.splice(0, loraModules.length, ...withDemoAdapters(loraModules, demo.adapters));

  let config: ServeConfig;
  try {
    config = loadServeConfig(values.config, {
      model: values.model ?? demo?.model,
      device: values.device,
      dtype: values.dtype,
      host: values.host,
      // Left as text when it is not a number, so the schema reports it as a bad --port.
      port: values.port !== undefined && /^\d+$/.test(values.port) ? Number(values.port) : values.port,
      served_model_name: values['served-model-name'] ?? (demo ? DEMO_NAME : undefined),
      lora_modules: loraModules,
    });
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    process.stderr.write(`${e.message}\n`);
    return 2;
  }
  if (!existsSync(config.model) || !statSync(config.model).isDirectory()) {
    process.stderr.write(`mstar serve: model ${config.model} is not a folder (expected a Hugging Face checkpoint)\n`);
    return 2;
  }

  const say = (message: string): void => void process.stdout.write(`mstar: ${message}\n`);
  say(`loading tokenizer from ${config.model}`);
  const tokenizer = Tokenizer.load(config.model);
  say('starting the engine');
  let engine: EngineClient;
  try {
    engine = await EngineClient.start(engineOptionsOf(config, say));
  } catch (e) {
    if (!(e instanceof EngineStartError && e.config)) throw e;
    // The config asks for what this model or machine cannot give: named like its other errors.
    process.stderr.write(`${values.config ?? 'mstar serve'}: ${e.message}\n`);
    return 2;
  }
  const app = buildApp({ engine, tokenizer, config, trace: stderrTrace() });
  try {
    await app.listen({ host: config.server.host, port: config.server.port });
  } catch (e) {
    process.stderr.write(`mstar serve: cannot listen on ${config.server.host}:${config.server.port}: ${(e as Error).message}\n`);
    await engine.close();
    return 1;
  }
  const { port } = app.server.address() as AddressInfo;
  say(`serving ${config.served_model_name} on http://${hostForUrl(config.server.host)}:${port}`);
  const adapters = engine.adapters().map((a) => a.name);
  if (adapters.length > 0) say(`adapters (use them as "model"): ${adapters.join(', ')}`);

  const signal = await new Promise<NodeJS.Signals>((resolve) => {
    const onSignal = (s: NodeJS.Signals) => {
      process.off('SIGINT', onSignal).off('SIGTERM', onSignal);
      resolve(s);
    };
    process.on('SIGINT', onSignal).on('SIGTERM', onSignal);
  });
  say(`${signal}: shutting down`);
  // In-flight requests get a grace period; then the engine closes, which ends each of them
  // with an error its client sees (a 500, or an SSE error event), and their connections go.
  const force = setTimeout(() => void engine.close().finally(() => app.server.closeAllConnections()), SHUTDOWN_GRACE_MS);
  await app.close();
  clearTimeout(force);
  await engine.close();
  return 0;
}

/** The demo's adapters first, then the user's; one the user names again is the user's (a flag overrides). */
export function withDemoAdapters<T extends { name: string }>(user: readonly T[], demo: readonly T[]): T[] {
  return [...demo.filter((a) => !user.some((m) => m.name === a.name)), ...user];
}

/** IPv6 literals need brackets in a URL. */
function hostForUrl(host: string): string {
  return host.includes(':') ? `[${host}]` : host;
}

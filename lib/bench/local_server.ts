// `mstar bench --serve serve.yaml`: our own server, in this process, on a free loopback port,
// twice from one config: as written (LoRA on), then without resources.lora (LoRA off), so
// retention compares the same engine, weights and settings with and without adapters.
import type { AddressInfo } from 'node:net';

import { engineOptionsOf } from '../config/engine_options.js';
import { loadServeConfig } from '../config/load.js';
import type { ServeConfig } from '../config/schema.js';
import { EngineClient } from '../engine/client.js';
import type { EngineStats } from '../engine/types.js';
import { buildApp } from '../server/app.js';
import { stderrTrace } from '../server/trace.js';
import { Tokenizer } from '../tokenizer/tokenizer.js';

export interface LocalServer {
  url: string;
  config: ServeConfig;
  vocabSize: number;
  /** The engine's counters as of its last step. */
  stats(): EngineStats;
  close(): Promise<void>;
}

/** The YAML with its port forced to 0 (any free one) and its host to loopback. */
export function loadBenchConfig(file: string): ServeConfig {
  return loadServeConfig(file, { host: '127.0.0.1', port: 0 });
}

/** The same config with LoRA switched off. */
export function withoutLora(config: ServeConfig): ServeConfig {
  const copy = structuredClone(config);
  delete copy.resources.lora;
  return copy;
}

export async function startLocalServer(config: ServeConfig, onProgress?: (message: string) => void): Promise<LocalServer> {
  const tokenizer = Tokenizer.load(config.model);
  const engine = await EngineClient.start(engineOptionsOf(config, onProgress));
  const app = buildApp({ engine, tokenizer, config, trace: stderrTrace() });
  try {
    await app.listen({ host: config.server.host, port: config.server.port });
  } catch (e) {
    await engine.close();
    throw e;
  }
  const { port } = app.server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    config,
    vocabSize: engine.info.vocabSize,
    stats: () => engine.stats(),
    close: async () => {
      // A benchmark's requests have all ended by now; cut any idle keep-alive sockets at once.
      app.server.closeAllConnections();
      await app.close();
      await engine.close();
    },
  };
}

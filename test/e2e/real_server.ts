// A real server for end-to-end tests: the engine thread on the tiny fixture model, fastify
// listening on a free loopback port, spoken to with fetch.
import type { AddressInfo } from 'node:net';

import { engineOptionsOf } from '../../lib/config/engine_options.js';
import { loadServeConfig, type ServeOverrides } from '../../lib/config/load.js';
import type { ServeConfig } from '../../lib/config/schema.js';
import { EngineClient } from '../../lib/engine/client.js';
import { buildApp } from '../../lib/server/app.js';
import { Tokenizer } from '../../lib/tokenizer/tokenizer.js';
import { FIXTURES } from '../parity/fixture.js';

export interface RealServer {
  url: string;
  engine: EngineClient;
  close(): Promise<void>;
  post(path: string, body: unknown, init?: RequestInit): Promise<Response>;
  metric(name: string): Promise<number>;
}

/** trace: MSTAR_TRACE on both threads, the server's lines to this function. */
export async function startServer(
  edit: (c: ServeConfig) => void = () => {}, overrides: ServeOverrides = {}, trace?: (line: string) => void,
): Promise<RealServer> {
  const config = loadServeConfig(undefined, { model: `${FIXTURES}/models/tiny-qwen3`, served_model_name: 'tiny', device: 'cpu', port: 0, ...overrides });
  config.max_seq_len = 256;
  config.kv_cache.num_blocks = 128;
  edit(config);
  const engine = await EngineClient.start({ ...engineOptionsOf(config), trace: trace !== undefined });
  const app = buildApp({ engine, tokenizer: Tokenizer.load(config.model), config, trace });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  return {
    url,
    engine,
    close: async () => {
      await app.close();
      await engine.close();
    },
    post: (path, body, init = {}) => fetch(url + path, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body), ...init,
    }),
    metric: async (name) => {
      const text = await (await fetch(`${url}/metrics`)).text();
      const line = text.split('\n').find((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `));
      if (!line) throw new Error(`metric ${name} not found`);
      return Number(line.slice(line.lastIndexOf(' ') + 1));
    },
  };
}

/** The token ids of a completion asked with return_tokens_as_token_ids (streamed or not). */
export async function completionTokens(res: Response, stream: boolean): Promise<number[]> {
  const toIds = (tokens: string[]) => tokens.map((t) => Number(t.replace('token_id:', '')));
  if (!stream) {
    const body = await res.json() as { choices: { logprobs: { tokens: string[] } }[] };
    return toIds(body.choices[0].logprobs.tokens);
  }
  const text = await res.text();
  const ids: number[] = [];
  for (const line of text.split('\n')) {
    if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
    const chunk = JSON.parse(line.slice(6)) as { choices: { logprobs: { tokens: string[] } | null }[] };
    for (const c of chunk.choices) if (c.logprobs) ids.push(...toIds(c.logprobs.tokens));
  }
  return ids;
}

// Builds an app around the fake engine and the tiny-qwen3 tokenizer fixture.
import { fileURLToPath } from 'node:url';

import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { expect } from 'vitest';

import { loadServeConfig } from '../../lib/config/load.js';
import type { ServeConfig } from '../../lib/config/schema.js';
import type { GenerateRequest } from '../../lib/engine/types.js';
import { buildApp } from '../../lib/server/app.js';
import { Tokenizer } from '../../lib/tokenizer/tokenizer.js';
import { FakeEngine } from './fake_engine.js';
import type { ErrorResponse } from './shapes.js';

export const TINY_QWEN3 = fileURLToPath(new URL('../fixtures/models/tiny-qwen3', import.meta.url));
export const MODEL_NAME = 'tiny';

let cached: Tokenizer | undefined;
export function tinyTokenizer(): Tokenizer {
  cached ??= Tokenizer.load(TINY_QWEN3);
  return cached;
}

export interface TestServer {
  app: FastifyInstance;
  engine: FakeEngine;
  tokenizer: Tokenizer;
  config: ServeConfig;
}

export interface TestServerOptions {
  script?: (req: GenerateRequest) => number[] | undefined;
  stepDelayMs?: number;
  maxModelLen?: number;
  maxBodyBytes?: number;
  tokenizer?: Tokenizer;
}

export function makeServer(opts: TestServerOptions = {}): TestServer {
  const tokenizer = opts.tokenizer ?? tinyTokenizer();
  const config = loadServeConfig(undefined, { model: TINY_QWEN3, served_model_name: MODEL_NAME });
  if (opts.maxBodyBytes !== undefined) config.server.max_body_bytes = opts.maxBodyBytes;
  const engine = new FakeEngine({
    vocabSize: tokenizer.vocabSize,
    eosTokenIds: [...tokenizer.eosTokenIds],
    maxModelLen: opts.maxModelLen ?? 256,
    script: opts.script,
    stepDelayMs: opts.stepDelayMs,
  });
  return { app: buildApp({ engine, tokenizer, config }), engine, tokenizer, config };
}

/** A script that answers every request with `text` then EOS. */
export function answer(tokenizer: Tokenizer, text: string, eos = true): (req: GenerateRequest) => number[] {
  const ids = tokenizer.encode(text, { addSpecialTokens: false });
  return () => (eos ? [...ids, tokenizer.eosTokenIds[0]] : ids);
}

/** Splits an SSE body into its JSON events; checks that it ends with [DONE]. */
export function sseEvents<T = unknown>(body: string): T[] {
  const events = body.split('\n\n').filter((e) => e.length > 0);
  expect(events.at(-1)).toBe('data: [DONE]');
  return events.slice(0, -1).map((e) => {
    expect(e.startsWith('data: ')).toBe(true);
    return JSON.parse(e.slice('data: '.length)) as T;
  });
}

export function post(app: FastifyInstance, url: string, body: unknown): Promise<LightMyRequestResponse> {
  return app.inject({ method: 'POST', url, payload: body as object, headers: { 'content-type': 'application/json' } });
}

/** Asserts an OpenAI-shaped error with this status and `param`. */
export function expectApiError(res: LightMyRequestResponse, status: number, param: string | null): ErrorResponse['error'] {
  expect(res.statusCode, res.body).toBe(status);
  const body = res.json() as ErrorResponse;
  expect(Object.keys(body)).toEqual(['error']);
  expect(typeof body.error.message).toBe('string');
  expect(typeof body.error.type).toBe('string');
  expect(body.error.param).toBe(param);
  expect('code' in body.error).toBe(true);
  return body.error;
}

// One streamed /v1/completions request, timed the way vLLM's and SGLang's benchmark scripts
// time theirs: TTFT from send to the first token chunk, inter-token latency between token
// chunks, output tokens from the usage chunk (stream_options.include_usage) when the server
// sends one, else one per token chunk.
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { performance } from 'node:perf_hooks';

import { traceSetting, wallClock } from '../engine/trace.js';
import { SENT_AT_HEADER } from '../server/trace.js';
import { sseData } from './sse.js';

const TRACING = traceSetting();

export interface CompletionRequest {
  /** Server root, e.g. http://127.0.0.1:8000 */
  url: string;
  model: string;
  promptIds: number[];
  maxTokens: number;
  apiKey?: string;
  signal?: AbortSignal;
}

export interface RequestResult {
  ok: boolean;
  error?: string;
  model: string;
  promptTokens: number;
  /** max_tokens asked for; with ignore_eos every engine should produce exactly this many. */
  requestedTokens: number;
  outputTokens: number;
  /** performance.now() at send, ms. */
  startMs: number;
  endMs: number;
  ttftMs: number | null;
  /** Gaps between consecutive token chunks, ms. */
  itlMs: number[];
}

interface CompletionChunk {
  choices?: { text?: unknown }[];
  usage?: { completion_tokens?: unknown } | null;
  error?: { message?: unknown };
}

export async function streamCompletion(req: CompletionRequest): Promise<RequestResult> {
  const startMs = performance.now();
  const result: RequestResult = {
    ok: false, model: req.model, promptTokens: req.promptIds.length, requestedTokens: req.maxTokens, outputTokens: 0, startMs, endMs: startMs, ttftMs: null, itlMs: [],
  };
  try {
    const res = await post(new URL(`${req.url}/v1/completions`), JSON.stringify({
      // Token-id prompts and ignore_eos make lengths exact on every engine (vLLM, SGLang and ours accept both).
      model: req.model, prompt: req.promptIds, max_tokens: req.maxTokens, ignore_eos: true, temperature: 0,
      stream: true, stream_options: { include_usage: true },
    }), {
      ...(req.apiKey ? { authorization: `Bearer ${req.apiKey}` } : {}),
      // MSTAR_TRACE: our server's trace line then starts at this send (wall clock, this machine).
      ...(TRACING ? { [SENT_AT_HEADER]: String(wallClock()) } : {}),
    }, req.signal);
    const status = res.statusCode ?? 0;
    if (status < 200 || status >= 300) {
      result.error = `HTTP ${status}: ${(await text(res).catch(() => '')).slice(0, 300)}`;
      return result;
    }
    let chunks = 0;
    let usageTokens: number | null = null;
    let last = 0;
    for await (const data of sseData(res)) {
      const now = performance.now();
      const chunk = JSON.parse(data) as CompletionChunk;
      if (chunk.error) throw new Error(`stream error: ${String(chunk.error.message ?? data)}`);
      if (typeof chunk.usage?.completion_tokens === 'number') usageTokens = chunk.usage.completion_tokens;
      if (!isTokenChunk(chunk)) continue;
      chunks++;
      if (result.ttftMs === null) result.ttftMs = now - startMs;
      else result.itlMs.push(now - last);
      last = now;
    }
    result.outputTokens = usageTokens ?? chunks;
    result.ok = result.ttftMs !== null;
    if (!result.ok) result.error = 'the stream ended without a token';
  } catch (e) {
    result.error = (e as Error).message;
  } finally {
    result.endMs = performance.now();
  }
  return result;
}

/**
 * POSTs a JSON body; resolves with the response once its headers are in. node:http, not
 * fetch: on the H200 machine fetch added 1-3 ms to every request's TTFT (Qwen3-0.6B, 128 and
 * 4096 prompt tokens; bench/ttft_http.mjs, bench/RESULTS.md), time that is the client's, not
 * the server's. The default agent keeps connections alive between requests.
 */
function post(url: URL, body: string, headers: Record<string, string>, signal?: AbortSignal): Promise<IncomingMessage> {
  const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    const req = send(url, {
      method: 'POST', signal,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), ...headers },
    }, resolve);
    req.on('error', reject);
    req.end(body);
  });
}

async function text(res: IncomingMessage): Promise<string> {
  const parts: Buffer[] = [];
  for await (const part of res) parts.push(part as Buffer);
  return Buffer.concat(parts).toString('utf8');
}

/**
 * A chunk that carries generated text: every chunk with a choice, as vLLM's benchmark counts
 * them. Its text may be empty (a token that is half a UTF-8 character), and the last one also
 * carries finish_reason. A server that holds such tokens back sends them with the next chunk;
 * the usage chunk still counts them.
 */
function isTokenChunk(chunk: CompletionChunk): boolean {
  return typeof chunk.choices?.[0]?.text === 'string';
}

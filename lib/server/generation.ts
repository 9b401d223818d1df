// One request's trip through the engine, shared by both OpenAI routes: token ids in,
// releasable text out, with stop strings, the disconnect abort and the latency metrics.
import type { EngineTrace, FinishReason, SamplingParams, TokenLogprob, RequestOutput } from '../engine/types.js';
import { RequestDetokenizer, type TokenDecoder } from '../tokenizer/detokenizer.js';
import type { Engine } from './engine_port.js';
import type { ServerMetrics } from './metrics.js';

export interface GenerationInput {
  id: string;
  promptIds: number[];
  params: SamplingParams;
  stop: readonly string[];
  skipSpecialTokens: boolean;
  /** performance.now() when the request arrived, for TTFT and end-to-end latency. */
  arrivedAt: number;
  /** The LoRA adapter to run, if any. */
  adapter?: string;
}

export interface GenerationEnd {
  finishReason: FinishReason;
  /** The stop string, or the stop_token_id, that ended generation; null for EOS and length. */
  stopReason: string | number | null;
  promptTokens: number;
  cachedPromptTokens: number;
  completionTokens: number;
}

/** What one engine step adds to the response. The last step has `end`. */
export interface GenerationStep {
  text: string;
  tokenIds: number[];
  /** Aligned with tokenIds when logprobs were asked for. */
  logprobs: TokenLogprob[];
  end?: GenerationEnd;
  /** The engine's trace, on the request's first output (MSTAR_TRACE). */
  trace?: EngineTrace;
}

export interface GenerationDeps {
  engine: Engine;
  tokenizer: TokenDecoder;
  metrics: ServerMetrics;
}

/**
 * Runs the request. `signal` is the client going away: the engine request is aborted at once.
 * A stop string aborts it too; the response then ends with finish_reason 'stop' without
 * waiting for the engine to wind the request down.
 */
export async function* runGeneration(deps: GenerationDeps, input: GenerationInput, signal: AbortSignal): AsyncGenerator<GenerationStep> {
  const { engine, metrics } = deps;
  const detok = new RequestDetokenizer(deps.tokenizer, input.promptIds, {
    stop: input.stop,
    minTokens: input.params.minTokens,
    skipSpecialTokens: input.skipSpecialTokens,
  });
  const request = { id: input.id, promptIds: input.promptIds, params: input.params, ...(input.adapter ? { adapter: input.adapter } : {}) };
  const outputs = engine.generate(request)[Symbol.asyncIterator]();
  let engineDone = false;
  const abortEngine = (): void => {
    if (!engineDone) engine.abort(input.id);
  };
  /** Ends the engine request while nobody will read its outputs any more. */
  const abandonEngine = (): void => {
    if (engineDone) return;
    engine.abort(input.id);
    void drain(outputs);
    engineDone = true;
  };
  if (signal.aborted) abortEngine();
  signal.addEventListener('abort', abortEngine, { once: true });

  let generated = 0;
  let cached = 0;
  let lastOutputAt: number | null = null;
  try {
    for (;;) {
      const next = await outputs.next();
      if (next.done) throw new Error(`the engine ended request ${input.id} without a finish reason`);
      const out = next.value;
      cached = out.cachedPromptTokens;
      if (out.finishReason !== undefined) engineDone = true;
      lastOutputAt = observeLatency(metrics, input.arrivedAt, lastOutputAt, out);

      const step: GenerationStep = { text: '', tokenIds: [], logprobs: [], trace: out.trace };
      let stopString: string | null = null;
      for (let i = 0; i < out.newTokenIds.length && stopString === null; i++) {
        const tokenId = out.newTokenIds[i];
        // The EOS / stop token that ended generation is not part of the text (as vLLM).
        const endsIt = i === out.newTokenIds.length - 1 && out.finishReason === 'stop' && out.stopTokenId === tokenId;
        const r = detok.push(tokenId, endsIt);
        step.text += r.text;
        step.tokenIds.push(tokenId);
        if (out.logprobs?.[i] !== undefined) step.logprobs.push(out.logprobs[i]);
        stopString = r.stop;
      }
      generated += step.tokenIds.length;

      if (stopString !== null) {
        abandonEngine();
        step.end = ending(input, 'stop', stopString, generated, cached);
      } else if (out.finishReason !== undefined) {
        step.text += detok.finish();
        const byStopTokenId = out.finishReason === 'stop' && out.stopTokenId !== undefined && input.params.stopTokenIds.includes(out.stopTokenId);
        step.end = ending(input, out.finishReason, byStopTokenId ? (out.stopTokenId as number) : null, generated, cached);
      }
      if (step.end !== undefined) {
        metrics.finished({
          finishReason: step.end.finishReason,
          promptTokens: step.end.promptTokens,
          generationTokens: generated,
          e2eSeconds: (performance.now() - input.arrivedAt) / 1000,
        });
        yield step;
        return;
      }
      yield step;
    }
  } finally {
    signal.removeEventListener('abort', abortEngine);
    // The consumer stopped early (its client left, or it failed): free the engine's slot.
    abandonEngine();
  }
}

function ending(input: GenerationInput, finishReason: FinishReason, stopReason: string | number | null, generated: number, cached: number): GenerationEnd {
  return { finishReason, stopReason, promptTokens: input.promptIds.length, cachedPromptTokens: cached, completionTokens: generated };
}

/** TTFT on the first output that carries tokens, then the gap between outputs. */
function observeLatency(metrics: ServerMetrics, arrivedAt: number, last: number | null, out: RequestOutput): number | null {
  if (out.newTokenIds.length === 0) return last;
  const now = performance.now();
  if (last === null) metrics.observeFirstToken((now - arrivedAt) / 1000);
  else metrics.observeInterToken((now - last) / 1000);
  return now;
}

/** Reads an aborted request's remaining outputs so the engine side can finish cleanly. */
async function drain(outputs: AsyncIterator<RequestOutput>): Promise<void> {
  try {
    for (;;) if ((await outputs.next()).done) return;
  } catch {
    // The request was already answered; nothing is waiting for these outputs.
  }
}

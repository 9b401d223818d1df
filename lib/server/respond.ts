// Sends a generation as one JSON response or as a stream of SSE chunks. The two paths read
// the same steps, so a streamed response concatenates to exactly the non-streamed one.
import type { FastifyReply } from 'fastify';

import { wallClock } from '../engine/trace.js';
import type { SamplingParams, TokenLogprob } from '../engine/types.js';
import { disconnectSignal } from './disconnect.js';
import { ApiError, internalError, invalidRequest } from './errors.js';
import { type GenerationDeps, type GenerationEnd, type GenerationStep, runGeneration } from './generation.js';
import { type Usage, usageOf } from './openai.js';
import type { RequestSettings } from './sampling.js';
import { SseStream } from './sse.js';
import { traceLine } from './trace.js';

/** How one API words its responses (completions and chat differ only here). */
export interface Presenter {
  /** Chunks sent before any token (chat: the assistant role). */
  opening(): unknown[];
  /** The chunk for one step, or null when it carries nothing (text held back, no logprobs). */
  chunk(step: GenerationStep): unknown;
  /** With stream_options.include_usage: the last chunk, usage and no choices. */
  usageChunk(usage: Usage): unknown;
  complete(text: string, logprobs: TokenLogprob[], end: GenerationEnd): unknown;
}

/** A route's request, ready to run. */
export interface RouteRequest {
  id: string;
  promptIds: number[];
  params: SamplingParams;
  settings: RequestSettings;
  arrivedAt: number;
  /** Wall-clock ms of the client's send, where it said (MSTAR_TRACE's x-mstar-sent-at). */
  sentAt?: number;
  adapter?: string;
}

/**
 * Both routes' last step: the generation (aborted when the client goes away), answered as
 * `presenter` words it, streamed or whole as the settings ask.
 */
export function generateAndRespond(
  deps: GenerationDeps & { trace?: (line: string) => void }, reply: FastifyReply, r: RouteRequest, presenter: Presenter,
): Promise<unknown> {
  const { settings } = r;
  const steps = runGeneration(
    deps,
    { id: r.id, promptIds: r.promptIds, params: r.params, stop: settings.stop, skipSpecialTokens: settings.skipSpecialTokens, arrivedAt: r.arrivedAt, adapter: r.adapter },
    disconnectSignal(reply),
  );
  // MSTAR_TRACE: the first token's line, once its chunk is written (arrivedAt made wall-clock).
  const { trace } = deps;
  const written = trace && ((step: GenerationStep) => {
    if (step.trace) trace(traceLine({ id: r.id, sentAt: r.sentAt, arrivedAt: performance.timeOrigin + r.arrivedAt, engine: step.trace, written: wallClock() }));
  });
  return respond(reply, steps, { ...settings, written }, presenter);
}

/** opts.written: called with each step once its chunk is written (streamed responses). */
export async function respond(
  reply: FastifyReply,
  steps: AsyncGenerator<GenerationStep>,
  opts: { stream: boolean; includeUsage: boolean; written?: (step: GenerationStep) => void },
  presenter: Presenter,
): Promise<unknown> {
  if (!opts.stream) return collect(steps, presenter);
  await stream(reply, steps, opts, presenter);
  return reply;
}

async function collect(steps: AsyncGenerator<GenerationStep>, presenter: Presenter): Promise<unknown> {
  let text = '';
  const logprobs: TokenLogprob[] = [];
  for await (const step of steps) {
    text += step.text;
    logprobs.push(...step.logprobs);
    if (step.end !== undefined) return presenter.complete(text, logprobs, step.end);
  }
  throw internalError('the generation ended without a result');
}

async function stream(
  reply: FastifyReply, steps: AsyncGenerator<GenerationStep>, opts: { includeUsage: boolean; written?: (step: GenerationStep) => void },
  presenter: Presenter,
): Promise<void> {
  const sse = new SseStream(reply);
  try {
    for (const chunk of presenter.opening()) await sse.send(chunk);
    for await (const step of steps) {
      // The client left: returning ends the generator, whose cleanup aborts the engine request.
      if (!sse.open) return;
      const chunk = presenter.chunk(step);
      if (chunk !== null) await sse.send(chunk);
      opts.written?.(step);
      if (step.end !== undefined && opts.includeUsage) await sse.send(presenter.usageChunk(usageOf(step.end)));
    }
  } catch (e) {
    // Headers are gone already: the error travels as an event, in the same OpenAI shape.
    const error = e instanceof ApiError ? e
      : (e as { statusCode?: number }).statusCode === 400 ? invalidRequest((e as Error).message)
      : internalError(`generation failed: ${(e as Error).message}`);
    await sse.send(error.toBody());
  }
  sse.end();
}

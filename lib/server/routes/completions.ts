// POST /v1/completions: a prompt (text or token ids) in, `text_completion` objects out.
import type { FastifyInstance } from 'fastify';

import type { ServerContext } from '../context.js';
import { asObject, optBool } from '../fields.js';
import { LogprobFormatter } from '../logprobs.js';
import { newRequestId, resolveModel, unixSeconds, usageOf } from '../openai.js';
import { completionPromptIds } from '../prompt.js';
import { generateAndRespond, type Presenter } from '../respond.js';
import { parseSettings, samplingParamsFor } from '../sampling.js';
import { sentAtOf } from '../trace.js';

export function registerCompletions(app: FastifyInstance, ctx: ServerContext): void {
  app.post('/v1/completions', async (request, reply) => {
    const arrivedAt = performance.now();
    const body = asObject(request.body, null);
    const model = resolveModel(body, ctx.modelName, ctx.engine);
    const info = ctx.engine.info;
    const settings = parseSettings(body, 'completions', info);
    // vLLM adds the tokenizer's special tokens (Llama's BOS) to completion prompts by default.
    const addSpecialTokens = optBool(body, 'add_special_tokens') ?? true;
    const promptIds = completionPromptIds(body.prompt, ctx.tokenizer, info.vocabSize, addSpecialTokens);
    const params = samplingParamsFor(settings, promptIds.length, info.maxModelLen, 'prompt');

    const id = newRequestId('cmpl');
    const created = unixSeconds();
    const base = { id, object: 'text_completion', created, model: model.name };
    const lp = new LogprobFormatter(ctx.tokenizer, settings.returnTokensAsTokenIds);
    const wantLogprobs = settings.logprobs !== null;

    const presenter: Presenter = {
      opening: () => [],
      chunk: (step) => {
        if (step.text === '' && step.logprobs.length === 0 && step.end === undefined) return null;
        return {
          ...base,
          choices: [{
            index: 0,
            text: step.text,
            logprobs: wantLogprobs ? lp.completion(step.logprobs) : null,
            finish_reason: step.end?.finishReason ?? null,
            stop_reason: step.end?.stopReason ?? null,
          }],
        };
      },
      usageChunk: (usage) => ({ ...base, choices: [], usage }),
      complete: (text, logprobs, end) => ({
        ...base,
        choices: [{
          index: 0,
          text,
          logprobs: wantLogprobs ? lp.completion(logprobs) : null,
          finish_reason: end.finishReason,
          stop_reason: end.stopReason,
          prompt_logprobs: null,
        }],
        usage: usageOf(end),
      }),
    };

    return generateAndRespond(ctx, reply, { id, promptIds, params, settings, arrivedAt, sentAt: sentAtOf(request.headers), adapter: model.adapter }, presenter);
  });
}

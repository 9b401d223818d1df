// POST /v1/chat/completions: messages through the model's chat template, `chat.completion`
// objects (or `chat.completion.chunk` deltas) out.
import type { FastifyInstance } from 'fastify';

import { ChatTemplateError, NO_CHAT_TEMPLATE_MESSAGE } from '../../tokenizer/chat_template.js';
import type { ServerContext } from '../context.js';
import { invalidRequest } from '../errors.js';
import { asObject, type Body, optBool } from '../fields.js';
import { LogprobFormatter } from '../logprobs.js';
import { parseMessages } from '../messages.js';
import { newRequestId, resolveModel, unixSeconds, usageOf } from '../openai.js';
import { generateAndRespond, type Presenter } from '../respond.js';
import { parseSettings, samplingParamsFor } from '../sampling.js';
import { sentAtOf } from '../trace.js';

export function registerChat(app: FastifyInstance, ctx: ServerContext): void {
  app.post('/v1/chat/completions', async (request, reply) => {
    const arrivedAt = performance.now();
    const body = asObject(request.body, null);
    const model = resolveModel(body, ctx.modelName, ctx.engine);
    const info = ctx.engine.info;
    const settings = parseSettings(body, 'chat', info);
    const prompt = renderPrompt(ctx, body);
    // The template already wrote BOS where the model wants it (vLLM's chat default).
    const promptIds = ctx.tokenizer.encode(prompt, { addSpecialTokens: optBool(body, 'add_special_tokens') ?? false });
    const params = samplingParamsFor(settings, promptIds.length, info.maxModelLen, 'messages');

    const id = newRequestId('chatcmpl');
    const created = unixSeconds();
    const base = { id, object: 'chat.completion.chunk', created, model: model.name };
    const lp = new LogprobFormatter(ctx.tokenizer, settings.returnTokensAsTokenIds);
    const wantLogprobs = settings.logprobs !== null;

    const presenter: Presenter = {
      opening: () => [{ ...base, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }] }],
      chunk: (step) => {
        if (step.text === '' && step.logprobs.length === 0 && step.end === undefined) return null;
        return {
          ...base,
          choices: [{
            index: 0,
            delta: { content: step.text },
            logprobs: wantLogprobs ? lp.chat(step.logprobs) : null,
            finish_reason: step.end?.finishReason ?? null,
            stop_reason: step.end?.stopReason ?? null,
          }],
        };
      },
      usageChunk: (usage) => ({ ...base, choices: [], usage }),
      complete: (text, logprobs, end) => ({
        ...base,
        object: 'chat.completion',
        choices: [{
          index: 0,
          message: { role: 'assistant', content: text },
          logprobs: wantLogprobs ? lp.chat(logprobs) : null,
          finish_reason: end.finishReason,
          stop_reason: end.stopReason,
        }],
        usage: usageOf(end),
      }),
    };

    return generateAndRespond(ctx, reply, { id, promptIds, params, settings, arrivedAt, sentAt: sentAtOf(request.headers), adapter: model.adapter }, presenter);
  });
}

function renderPrompt(ctx: ServerContext, body: Body): string {
  const messages = parseMessages(body.messages);
  const template = ctx.tokenizer.chatTemplate;
  if (template === null) throw invalidRequest(NO_CHAT_TEMPLATE_MESSAGE, 'messages', 'no_chat_template');
  const kwargs = body.chat_template_kwargs == null ? {} : asObject(body.chat_template_kwargs, 'chat_template_kwargs');
  try {
    return template.render(messages, {
      addGenerationPrompt: optBool(body, 'add_generation_prompt') ?? true,
      bosToken: ctx.tokenizer.bosToken,
      eosToken: ctx.tokenizer.eosToken,
      extra: kwargs,
    });
  } catch (e) {
    if (e instanceof ChatTemplateError) throw invalidRequest(e.message, 'messages', 'chat_template_error');
    throw e;
  }
}

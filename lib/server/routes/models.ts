// GET /v1/models: the served model in OpenAI's list shape (plus vLLM's root and max_model_len).
import type { FastifyInstance } from 'fastify';

import type { ServerContext } from '../context.js';
import { unixSeconds } from '../openai.js';

export function registerModels(app: FastifyInstance, ctx: ServerContext): void {
  const created = unixSeconds();
  app.get('/v1/models', async () => ({
    object: 'list',
    data: [{
      id: ctx.modelName,
      object: 'model',
      created,
      owned_by: 'mstar',
      root: ctx.config.model,
      parent: null,
      max_model_len: ctx.engine.info.maxModelLen,
    }],
  }));
}

// GET /v1/models: the served model and every loaded LoRA adapter, in OpenAI's list shape
// (plus vLLM's root, parent and max_model_len).
import type { FastifyInstance } from 'fastify';

import type { ServerContext } from '../context.js';
import { unixSeconds } from '../openai.js';

export function registerModels(app: FastifyInstance, ctx: ServerContext): void {
  const created = unixSeconds();
  const card = (id: string, root: string, parent: string | null) => ({
    id, object: 'model', created, owned_by: 'mstar', root, parent, max_model_len: ctx.engine.info.maxModelLen,
  });
  app.get('/v1/models', async () => ({
    object: 'list',
    data: [
      card(ctx.modelName, ctx.config.model, null),
      ...(ctx.engine.adapters?.() ?? []).map((a) => card(a.name, a.path, ctx.modelName)),
    ],
  }));
}

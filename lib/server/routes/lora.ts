// POST /v1/load_lora_adapter {lora_name, lora_path} and /v1/unload_lora_adapter {lora_name},
// in vLLM's shapes; on only with resources.lora.runtime_updates. A refused adapter is a 400
// that names the file and key at fault, and changes nothing.
import type { FastifyInstance } from 'fastify';

import type { ServerContext } from '../context.js';
import { ApiError, internalError, invalidRequest } from '../errors.js';
import { asObject } from '../fields.js';

function requiredString(body: Record<string, unknown>, name: string): string {
  const v = body[name];
  if (typeof v !== 'string' || v.length === 0) throw invalidRequest(`\`${name}\` must be a non-empty string.`, name);
  return v;
}

export function registerLora(app: FastifyInstance, ctx: ServerContext): void {
  const lora = ctx.config.resources?.lora;
  if (!lora?.runtime_updates) return;
  const engine = ctx.engine;

  app.post('/v1/load_lora_adapter', async (request, reply) => {
    const body = asObject(request.body, null);
    const name = requiredString(body, 'lora_name');
    const path = requiredString(body, 'lora_path');
    if (name === ctx.modelName) throw invalidRequest(`\`${name}\` is the base model's name.`, 'lora_name');
    if (engine.adapters?.().some((a) => a.name === name)) {
      throw invalidRequest(`The lora adapter '${name}' has already been loaded.`, 'lora_name');
    }
    try {
      await engine.loadAdapter!(name, path);
    } catch (e) {
      // A refused adapter is the client's to fix; a dead engine is ours.
      if (engine.healthy?.() === false) throw internalError((e as Error).message);
      throw invalidRequest((e as Error).message, 'lora_path');
    }
    return reply.code(200).type('text/plain').send(`Success: LoRA adapter '${name}' added successfully.`);
  });

  app.post('/v1/unload_lora_adapter', async (request, reply) => {
    const body = asObject(request.body, null);
    const name = requiredString(body, 'lora_name');
    if (!(await engine.unloadAdapter!(name))) {
      throw new ApiError(404, `The lora adapter '${name}' cannot be found.`, 'invalid_request_error', 'lora_name', 'model_not_found');
    }
    return reply.code(200).type('text/plain').send(`Success: LoRA adapter '${name}' removed successfully.`);
  });
}

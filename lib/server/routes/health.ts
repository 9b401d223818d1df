// GET /health: 200 with an empty body while the server and its engine are up (as vLLM);
// 503 once the engine thread has died, so an orchestrator restarts the server.
import type { FastifyInstance } from 'fastify';

import type { Engine } from '../engine_port.js';

export function registerHealth(app: FastifyInstance, engine: Engine): void {
  app.get('/health', async (_request, reply) => {
    if (engine.healthy?.() === false) {
      return reply.code(503).send({ error: { message: 'The engine is not running.', type: 'internal_server_error', param: null, code: null } });
    }
    return reply.code(200).send();
  });
}

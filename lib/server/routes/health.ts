// GET /health: 200 with an empty body while the server is up (as vLLM).
import type { FastifyInstance } from 'fastify';

export function registerHealth(app: FastifyInstance): void {
  app.get('/health', async (_request, reply) => reply.code(200).send());
}

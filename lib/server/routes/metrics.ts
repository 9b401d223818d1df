// GET /metrics: the Prometheus text of this app's registry.
import type { FastifyInstance } from 'fastify';

import type { ServerContext } from '../context.js';

export function registerMetrics(app: FastifyInstance, ctx: ServerContext): void {
  app.get('/metrics', async (_request, reply) => reply.type(ctx.metrics.contentType).send(await ctx.metrics.text()));
}

// The fastify app: OpenAI routes, /health, /metrics, and OpenAI-shaped errors for
// everything that goes wrong before a route answers (bad JSON, big body, unknown URL).
import Fastify, { type FastifyError, type FastifyInstance } from 'fastify';

import type { ServeConfig } from '../config/schema.js';
import type { Tokenizer } from '../tokenizer/tokenizer.js';
import type { ServerContext } from './context.js';
import type { Engine } from './engine_port.js';
import { ApiError, bodyTooLarge, internalError, invalidRequest, unknownRoute } from './errors.js';
import { ServerMetrics } from './metrics.js';
import { registerChat } from './routes/chat.js';
import { registerCompletions } from './routes/completions.js';
import { registerHealth } from './routes/health.js';
import { registerLora } from './routes/lora.js';
import { registerMetrics } from './routes/metrics.js';
import { registerModels } from './routes/models.js';

/** Long prompts sent as token-id arrays run to megabytes; fastify's 1 MiB default is too small. */
export const DEFAULT_MAX_BODY_BYTES = 32 * 2 ** 20;

export interface AppOptions {
  engine: Engine;
  tokenizer: Tokenizer;
  config: ServeConfig;
  /** Defaults to a fresh registry reading this engine's stats. */
  metrics?: ServerMetrics;
  /** Fastify's request logging (off by default; the CLI turns it on). */
  logger?: boolean;
  /** Takes each streamed request's first-token trace line (MSTAR_TRACE; off by default). */
  trace?: (line: string) => void;
}

export function buildApp(opts: AppOptions): FastifyInstance {
  const bodyLimit = opts.config.server.max_body_bytes ?? DEFAULT_MAX_BODY_BYTES;
  const app = Fastify({ bodyLimit, logger: opts.logger ?? false });
  const ctx: ServerContext = {
    engine: opts.engine,
    tokenizer: opts.tokenizer,
    config: opts.config,
    modelName: opts.config.served_model_name,
    metrics: opts.metrics ?? new ServerMetrics(() => opts.engine.stats(), opts.config.served_model_name),
    trace: opts.trace,
  };

  // Every body is read as JSON whatever its content-type: `curl -d` sends form encoding.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'string' }, app.getDefaultJsonParser('error', 'error'));

  app.setErrorHandler((error: FastifyError, request, reply) => {
    const api = toApiError(error, bodyLimit);
    if (api.status >= 500) request.log.error(error);
    return reply.code(api.status).send(api.toBody());
  });
  app.setNotFoundHandler((request, reply) => {
    const api = unknownRoute(request.method, request.url);
    return reply.code(api.status).send(api.toBody());
  });

  registerCompletions(app, ctx);
  registerChat(app, ctx);
  registerModels(app, ctx);
  registerLora(app, ctx);
  registerHealth(app, ctx.engine);
  registerMetrics(app, ctx);
  return app;
}

function toApiError(error: FastifyError, bodyLimit: number): ApiError {
  if (error instanceof ApiError) return error;
  switch (error.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return bodyTooLarge(bodyLimit);
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return invalidRequest('The request body is empty; send a JSON object.');
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return invalidRequest('We could not parse the JSON body of your request: it is not valid JSON.', null, 'invalid_json');
  }
  if (error instanceof SyntaxError) {
    return invalidRequest(`We could not parse the JSON body of your request: ${error.message}`, null, 'invalid_json');
  }
  const status = error.statusCode ?? 500;
  if (status >= 400 && status < 500) return new ApiError(status, error.message, 'invalid_request_error');
  return internalError(`The server had an error while processing your request: ${error.message}`);
}

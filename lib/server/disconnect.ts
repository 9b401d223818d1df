// A client that hangs up must free its engine slot at once, streaming or not.
import type { FastifyReply } from 'fastify';

/** Aborts when the client disconnects before the response was fully sent. */
export function disconnectSignal(reply: FastifyReply): AbortSignal {
  const controller = new AbortController();
  reply.raw.once('close', () => {
    if (!reply.raw.writableFinished) controller.abort();
  });
  return controller.signal;
}

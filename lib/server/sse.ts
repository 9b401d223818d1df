// Server-sent events on the raw response: `data: {json}\n\n` chunks, then `data: [DONE]`.
import type { ServerResponse } from 'node:http';

import type { FastifyReply } from 'fastify';

export class SseStream {
  private readonly res: ServerResponse;

  /** Takes the response over from fastify and sends the event-stream headers. */
  constructor(reply: FastifyReply) {
    reply.hijack();
    this.res = reply.raw;
    this.res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
      // Proxies such as nginx would otherwise buffer the stream.
      'x-accel-buffering': 'no',
    });
  }

  /** False once the client is gone: stop producing. */
  get open(): boolean {
    return !this.res.destroyed && !this.res.writableEnded;
  }

  /** Writes one event; waits when the socket's buffer is full so a slow reader cannot bloat memory. */
  async send(data: unknown): Promise<void> {
    if (!this.open) return;
    if (!this.res.write(`data: ${JSON.stringify(data)}\n\n`)) {
      await new Promise<void>((resolve) => {
        const done = (): void => {
          this.res.off('drain', done);
          this.res.off('close', done);
          resolve();
        };
        this.res.on('drain', done);
        this.res.on('close', done);
      });
    }
  }

  end(): void {
    if (!this.open) return;
    this.res.end('data: [DONE]\n\n');
  }
}

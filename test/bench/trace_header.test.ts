// With MSTAR_TRACE=1 the bench's requests say when they were sent (x-mstar-sent-at, wall-clock
// ms), so that our server's trace lines start at the client; without it they carry no header.
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';

import { afterEach, expect, it, vi } from 'vitest';

import { SENT_AT_HEADER } from '../../lib/server/trace.js';

/** The headers of one streamed request the bench client sends (its module loaded afresh: it reads MSTAR_TRACE once). */
async function oneRequest(): Promise<{ headers: IncomingHttpHeaders; before: number; after: number; ok: boolean }> {
  vi.resetModules();
  const { streamCompletion } = await import('../../lib/bench/request.js');
  let headers: IncomingHttpHeaders = {};
  const server = createServer((req, res) => {
    headers = req.headers;
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end('data: {"choices":[{"text":"x"}]}\n\ndata: [DONE]\n\n');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const before = performance.timeOrigin + performance.now();
    const r = await streamCompletion({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, model: 'm', promptIds: [1, 2], maxTokens: 1 });
    return { headers, before, after: performance.timeOrigin + performance.now(), ok: r.ok };
  } finally {
    server.close();
  }
}

afterEach(() => {
  vi.unstubAllEnvs();
});

it('sends the send time with MSTAR_TRACE=1, and nothing without', async () => {
  vi.stubEnv('MSTAR_TRACE', '1');
  const traced = await oneRequest();
  expect(traced.ok).toBe(true);
  const sentAt = Number(traced.headers[SENT_AT_HEADER]);
  expect(sentAt).toBeGreaterThanOrEqual(traced.before);
  expect(sentAt).toBeLessThanOrEqual(traced.after);

  vi.stubEnv('MSTAR_TRACE', '');
  const plain = await oneRequest();
  expect(plain.ok).toBe(true);
  expect(plain.headers[SENT_AT_HEADER]).toBeUndefined();
});

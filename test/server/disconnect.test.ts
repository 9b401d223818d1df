// A client that hangs up must free its engine request at once: needs a real socket.
import type { AddressInfo } from 'node:net';

import { afterEach, describe, expect, it } from 'vitest';

import { makeServer, type TestServer } from './helpers.js';

let server: TestServer | undefined;
afterEach(async () => {
  // fetch opens a spare keep-alive connection that would hold close() for its 4 s timeout.
  server?.app.server.closeAllConnections();
  await server?.app.close();
  server = undefined;
});

async function listen(stepDelayMs: number): Promise<{ url: string; server: TestServer }> {
  server = makeServer({ stepDelayMs });
  await server.app.listen({ host: '127.0.0.1', port: 0 });
  const { port } = server.app.server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, server };
}

describe('client disconnect', () => {
  it('aborts the engine request when a stream is dropped mid-way', async () => {
    const { url, server } = await listen(20);
    const controller = new AbortController();
    const res = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'Hello', max_tokens: 200, ignore_eos: true, stream: true }),
      signal: controller.signal,
    });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    await reader.read();
    controller.abort();
    const id = server.engine.requests[0].id;
    expect(await server.engine.waitForAbort(id)).toBe(true);
    // The engine stopped stepping it.
    const steps = server.engine.current.steps;
    await new Promise((r) => setTimeout(r, 100));
    expect(server.engine.current.steps).toBe(steps);
  });

  it('aborts the engine request when a non-streaming client goes away', async () => {
    const { url, server } = await listen(20);
    const controller = new AbortController();
    const pending = fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 200, ignore_eos: true }),
      signal: controller.signal,
    }).catch((e: unknown) => e);
    while (server.engine.requests.length === 0) await new Promise((r) => setTimeout(r, 5));
    await new Promise((r) => setTimeout(r, 50));
    controller.abort();
    await pending;
    expect(await server.engine.waitForAbort(server.engine.requests[0].id)).toBe(true);
  });

  it('does not abort a request that completed normally', async () => {
    const { url, server } = await listen(0);
    const res = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'Hello', max_tokens: 5, ignore_eos: true, stream: true }),
    });
    expect(await res.text()).toMatch(/data: \[DONE\]\n\n$/);
    await new Promise((r) => setTimeout(r, 20));
    expect(server.engine.aborted).toEqual([]);
  });
});

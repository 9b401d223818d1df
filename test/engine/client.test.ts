// The engine on its own thread: same tokens as in-thread, the caller's event loop stays free,
// aborts end a request at once, and a load failure is a clear error.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { EngineClient } from '../../lib/engine/client.js';
import type { RequestOutput } from '../../lib/engine/types.js';
import { FIXTURES, readParityFixture } from '../parity/fixture.js';
import { greedy } from './helpers.js';

const options = {
  model: `${FIXTURES}/models/tiny-qwen3`, device: 'cpu' as const, maxBatchSize: 16, maxNumBatchedTokens: 256,
  kvCache: { blockSize: 16, numBlocks: 64 }, prefixCache: true,
};

async function collect(it: AsyncIterable<RequestOutput>): Promise<RequestOutput[]> {
  const out: RequestOutput[] = [];
  for await (const o of it) out.push(o);
  return out;
}

describe('EngineClient (engine thread)', () => {
  let client: EngineClient;
  const progress: string[] = [];
  beforeAll(async () => {
    client = await EngineClient.start({ ...options, onProgress: (m) => progress.push(m) });
  });
  afterAll(() => client.close());

  it('reports load progress and model info', () => {
    expect(progress.some((m) => /loading weights: 100%/.test(m))).toBe(true);
    expect(client.info).toMatchObject({ family: 'qwen3', vocabSize: 512, maxModelLen: 256 });
  });

  it('generates the HF tokens, while the caller keeps running callbacks', async () => {
    const fx = readParityFixture('tiny-qwen3');
    let ticks = 0;
    const timer = setInterval(() => ticks++, 0);
    const runs = await Promise.all(fx.cases.map((c, i) =>
      collect(client.generate({ id: `c${i}`, promptIds: c.promptIds, params: greedy(c.outputIds.length) }))));
    clearInterval(timer);
    runs.forEach((outs, i) => {
      expect(outs.flatMap((o) => o.newTokenIds)).toEqual(fx.cases[i].outputIds);
      expect(outs.at(-1)!.finishReason).toBe('length');
    });
    expect(ticks).toBeGreaterThan(0);
  });

  it('aborts a running request and frees its blocks', async () => {
    const outs: RequestOutput[] = [];
    for await (const o of client.generate({ id: 'long', promptIds: [5, 6, 7], params: greedy(200) })) {
      outs.push(o);
      if (outs.length === 3) client.abort('long');
    }
    expect(outs.at(-1)!.finishReason).toBe('abort');
    expect(outs.length).toBeLessThan(200);
    expect(client.stats().kvBlocksUsed).toBe(0);
  });

  it('rejects a request the engine cannot run with its reason', async () => {
    await expect(collect(client.generate({ id: 'big', promptIds: [1], params: greedy(1000) }))).rejects.toThrow(/256-token limit/);
  });

  it('close() mid-generation stops the engine between steps and fails what is open', async () => {
    const other = await EngineClient.start(options);
    const it = other.generate({ id: 'long', promptIds: [5, 6, 7], params: greedy(200) })[Symbol.asyncIterator]();
    await it.next();
    // Two closes (a shutdown's grace running out while it closes anyway) end together, at once.
    const t0 = Date.now();
    await Promise.all([other.close(), other.close()]);
    await other.close();
    expect(Date.now() - t0).toBeLessThan(4000);
    await expect((async () => { for (;;) if ((await it.next()).done) return; })()).rejects.toThrow(/engine was closed/);
    expect(other.healthy()).toBe(false);
    await expect(collect(other.generate({ id: 'after', promptIds: [1], params: greedy(1) }))).rejects.toThrow(/engine was closed/);
  });

  it('fails to start with a clear error for a missing checkpoint', async () => {
    await expect(EngineClient.start({ ...options, model: '/nonexistent/model' })).rejects.toThrow(/nonexistent/);
  });
});

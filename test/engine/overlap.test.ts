// Overlapped steps (Engine, overlapSteps): each decode step is enqueued before the previous
// one's samples are read. On the CPU the runner computes at once, but the engine's side is
// the GPU's: tokens come out one step later, a sequence has a token it has not read while
// its next step is scheduled, and a row that turns out to follow the last token is dropped.
import { describe, expect, it } from 'vitest';

import type { Launched } from '../../lib/engine/launched.js';
import { engine, greedy, prompts, runAll } from './helpers.js';

const [p1, p2] = prompts([5, 9], 512, 7);

function alone(p: number[], maxTokens: number): number[] {
  const e = engine({ overlapSteps: false });
  e.add({ id: 'x', promptIds: p, params: greedy(maxTokens) });
  return runAll(e).get('x')!.tokens;
}

describe('overlapped steps', () => {
  it('a decode step gives its tokens in the step after it, and no step runs past max_tokens', () => {
    const e = engine({ overlapSteps: true });
    e.add({ id: 'a', promptIds: p1, params: greedy(4) });
    const tokens = (outs: { newTokenIds: number[] }[]) => outs.flatMap((o) => o.newTokenIds);
    const want = alone(p1, 4);
    expect(tokens(e.step())).toEqual(want.slice(0, 1));  // prefill: run and read at once
    expect(tokens(e.step())).toEqual([]);  // decode step 1 enqueued, nothing to read before it
    expect(tokens(e.step())).toEqual(want.slice(1, 2));  // step 2 enqueued, step 1 read
    expect(tokens(e.step())).toEqual(want.slice(2, 3));
    // The last token is unread but surely the last: no step is scheduled after it.
    const steps = e.stats().steps;
    const last = e.step();
    expect(tokens(last)).toEqual(want.slice(3));
    expect(last[0].finishReason).toBe('length');
    expect(e.stats().steps).toBe(steps);
    expect(e.hasWork()).toBe(false);
    expect(e.stats().kvBlocksUsed).toBe(0);
  });

  it('a request aborted while its step is in flight gets nothing more; the others go on', () => {
    const e = engine({ overlapSteps: true });
    e.add({ id: 'a', promptIds: p1, params: greedy(20) });
    e.add({ id: 'b', promptIds: p2, params: greedy(6) });
    e.step();  // prefill of both
    e.step();  // decode enqueued: both have a token unread
    expect(e.abort('a')!.finishReason).toBe('abort');
    const out = runAll(e);
    expect(out.has('a')).toBe(false);
    expect(out.get('b')!.tokens).toEqual(alone(p2, 6).slice(1));
    expect(e.stats().kvBlocksUsed).toBe(0);
  });

  it('a request that stops on a token already has its next row running: that row is dropped', () => {
    const free = alone(p1, 8);
    const stopAt = free[2];
    const e = engine({ overlapSteps: true });
    e.add({ id: 's', promptIds: p1, params: greedy(8, { stopTokenIds: [stopAt] }) });
    e.add({ id: 'b', promptIds: p2, params: greedy(8) });
    const out = runAll(e);
    expect(out.get('s')!.tokens).toEqual(free.slice(0, free.indexOf(stopAt) + 1));
    expect(out.get('s')!.last).toMatchObject({ finishReason: 'stop', stopTokenId: stopAt });
    expect(out.get('b')!.tokens).toEqual(alone(p2, 8));
    expect(e.stats().kvBlocksUsed).toBe(0);
  });

  it('captureGraphs captures nothing without graphs, and refuses while a step is in flight', () => {
    const e = engine({ overlapSteps: true });
    expect(e.captureGraphs()).toBe(0);
    e.add({ id: 'a', promptIds: p1, params: greedy(10) });
    e.step();
    e.step();
    expect(() => e.captureGraphs()).toThrow(/a step is in flight/);
    runAll(e);
  });

  it('closes with a step in flight', () => {
    const e = engine({ overlapSteps: true });
    e.add({ id: 'a', promptIds: p1, params: greedy(10) });
    e.step();
    e.step();
    expect(() => e.close()).not.toThrow();
  });
});

describe('overlapped steps on a GPU that is not done yet', () => {
  // Each launched step says "not ready" on its first poll, as a fence just recorded does on cuda.
  const slowFirstPoll = (e: ReturnType<typeof engine>): void => {
    const runner = (e as unknown as { runner: { launch(...a: unknown[]): Launched } }).runner;
    const launch = runner.launch.bind(runner);
    runner.launch = (...args: unknown[]) => {
      const l = launch(...args);
      let polls = 1;
      return { batch: l.batch, ready: () => polls-- <= 0 && l.ready(), sampled: () => l.sampled() };
    };
  };

  it('a request ending on max_tokens leaves nothing planned: the next request\'s first step launches it', () => {
    const e = engine({ overlapSteps: true });
    slowFirstPoll(e);
    e.add({ id: 'a', promptIds: [5, 6, 7], params: greedy(4) });
    while (e.hasWork()) if (!e.awaitingGpu()) e.step();
    e.add({ id: 'b', promptIds: [8, 9], params: greedy(4) });
    const before = e.stats().steps;
    e.step();
    expect({ launched: e.stats().steps - before, waiting: e.stats().waiting }).toEqual({ launched: 1, waiting: 0 });
    e.close();
  });
});

// MSTAR_TRACE's engine half: a request's first output takes its arrival, the step() that
// launched it and the one that returned it; later outputs, and forgotten requests, take none.
import { describe, expect, it } from 'vitest';

import { RequestTracer } from '../../lib/engine/trace.js';
import type { RequestOutput } from '../../lib/engine/types.js';

const output = (id: string, tokens = [7]): RequestOutput => ({ id, newTokenIds: tokens, promptTokens: 3, cachedPromptTokens: 0, outputTokens: tokens.length });

describe('RequestTracer', () => {
  it('gives the first output the launching step and the returning one', () => {
    const t = new RequestTracer();
    t.received('a', 10);
    t.stepped([], 11, 15);  // launches a (an overlapped step: its samples come later)
    t.received('b', 16);
    const first = [output('a')];
    t.stepped(first, 17, 18);  // returns a's token, launches b
    expect(first[0].trace).toEqual({ received: 10, launchStart: 11, launchEnd: 15, readStart: 17, readEnd: 18 });
    const next = [output('a'), output('b')];
    t.stepped(next, 20, 21);
    expect(next[0].trace).toBeUndefined();
    expect(next[1].trace).toEqual({ received: 16, launchStart: 17, launchEnd: 18, readStart: 20, readEnd: 21 });
  });

  it('where one step launches and returns (no overlap), launch and read are that step', () => {
    const t = new RequestTracer();
    t.received('a', 1);
    const outs = [output('a')];
    t.stepped(outs, 2, 9);
    expect(outs[0].trace).toEqual({ received: 1, launchStart: 2, launchEnd: 9, readStart: 2, readEnd: 9 });
  });

  it('a forgotten request (rejected, aborted) takes no trace', () => {
    const t = new RequestTracer();
    t.received('a', 1);
    t.forget('a');
    const outs = [output('a', [])];
    t.stepped(outs, 2, 3);
    expect(outs[0].trace).toBeUndefined();
  });
});

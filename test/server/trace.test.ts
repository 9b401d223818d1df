// MSTAR_TRACE's HTTP half: the client's send time from its header, and the line that lays a
// first token's times out from the handler's start.
import { describe, expect, it } from 'vitest';

import { SENT_AT_HEADER, sentAtOf, traceLine } from '../../lib/server/trace.js';

describe('trace', () => {
  it('reads the send time only where the header holds a number', () => {
    expect(sentAtOf({ [SENT_AT_HEADER]: '1764612345678.25' })).toBe(1764612345678.25);
    expect(sentAtOf({})).toBeUndefined();
    expect(sentAtOf({ [SENT_AT_HEADER]: 'soon' })).toBeUndefined();
    expect(sentAtOf({ [SENT_AT_HEADER]: ['1', '2'] })).toBeUndefined();
  });

  it('gives every time in ms from the handler, ? where unknown', () => {
    const engine = { received: 1000.5, launchStart: 1000.6, launchEnd: 1005.3, readStart: 1014.1, readEnd: 1014.25, delivered: 1014.5 };
    expect(traceLine({ id: 'cmpl-1', sentAt: 998.95, arrivedAt: 1000, engine, written: 1014.8 })).toBe(
      "mstar trace cmpl-1: sent -1.05, engine thread 0.50, launch 0.60 to 5.30, read 14.10 to 14.25, HTTP thread 14.50, written 14.80 (ms from the handler's start)");
    expect(traceLine({ id: 'x', arrivedAt: 0, engine: { ...engine, delivered: undefined }, written: 1 })).toMatch(/^mstar trace x: sent \?, .* HTTP thread \?, written 1\.00 /);
  });
});

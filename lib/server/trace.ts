// The HTTP thread's half of MSTAR_TRACE: when a streamed request's first token has been
// written, one line saying where its time went, from the client's send (the bench's
// x-mstar-sent-at header, wall-clock ms of the same machine) through the engine thread
// (EngineTrace) to the write, in ms from the route handler's start.
import type { IncomingHttpHeaders } from 'node:http';

import { traceSetting } from '../engine/trace.js';
import type { EngineTrace } from '../engine/types.js';

export const SENT_AT_HEADER = 'x-mstar-sent-at';

/** With MSTAR_TRACE=1, where the server's lines go: stderr (the engine thread reads the same switch). */
export function stderrTrace(): ((line: string) => void) | undefined {
  return traceSetting() ? (line) => process.stderr.write(`${line}\n`) : undefined;
}

/** The client's send time from its header, or undefined (absent, or not a number). */
export function sentAtOf(headers: IncomingHttpHeaders): number | undefined {
  const raw = headers[SENT_AT_HEADER];
  const at = typeof raw === 'string' ? Number(raw) : NaN;
  return Number.isFinite(at) && at > 0 ? at : undefined;
}

export interface FirstTokenTimes {
  id: string;
  /** Wall-clock ms: the client's send (if it said), the handler's start, the SSE write. */
  sentAt?: number;
  arrivedAt: number;
  engine: EngineTrace;
  written: number;
}

export function traceLine(t: FirstTokenTimes): string {
  const ms = (at: number | undefined) => (at === undefined ? '?' : (at - t.arrivedAt).toFixed(2));
  const e = t.engine;
  return `mstar trace ${t.id}: sent ${ms(t.sentAt)}, engine thread ${ms(e.received)}, ` +
    `launch ${ms(e.launchStart)} to ${ms(e.launchEnd)}, read ${ms(e.readStart)} to ${ms(e.readEnd)}, ` +
    `HTTP thread ${ms(e.delivered)}, written ${ms(t.written)} (ms from the handler's start)`;
}

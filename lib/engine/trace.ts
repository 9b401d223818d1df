// The engine thread's half of MSTAR_TRACE: each traced request's arrival and the step() calls
// that launched and returned its first output, written onto that output (RequestOutput.trace)
// for the HTTP thread to add its own times to.
import { performance } from 'node:perf_hooks';

import { envSwitch } from './env_switch.js';
import type { EngineTrace, RequestOutput } from './types.js';

/**
 * MSTAR_TRACE=1: where each streamed request's first token spends its time, across the
 * client (the bench's x-mstar-sent-at header), the HTTP thread and the engine thread: one
 * line a request on the server's stderr (server/trace.ts).
 */
export function traceSetting(env: NodeJS.ProcessEnv = process.env): boolean {
  return envSwitch('MSTAR_TRACE', env) === true;
}

/** Wall-clock ms, comparable across threads and processes of one machine. */
export const wallClock = (): number => performance.timeOrigin + performance.now();

export class RequestTracer {
  /** Requests that have not had an output yet, and what is known of them so far. */
  private readonly open = new Map<string, { received: number; launchStart?: number; launchEnd?: number }>();

  received(id: string, at = wallClock()): void {
    this.open.set(id, { received: at });
  }

  /** A request that will have no output from a step (rejected, or aborted before one). */
  forget(id: string): void {
    this.open.delete(id);
  }

  /** One step() call, from start to end, and what it returned: first outputs take their trace. */
  stepped(outputs: readonly RequestOutput[], start: number, end: number): void {
    for (const t of this.open.values()) {
      if (t.launchStart !== undefined) continue;
      t.launchStart = start;
      t.launchEnd = end;
    }
    for (const o of outputs) {
      const t = this.open.get(o.id);
      if (!t) continue;
      this.open.delete(o.id);
      const trace: EngineTrace = { received: t.received, launchStart: t.launchStart ?? start, launchEnd: t.launchEnd ?? end, readStart: start, readEnd: end };
      o.trace = trace;
    }
  }
}

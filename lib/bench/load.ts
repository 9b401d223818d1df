// Load shapes. Closed loop: c clients, each sending its next request when the last one ends
// (concurrency is the knob; the server's speed sets the rate). Poisson: requests sent at
// exponential gaps whatever the server does (rate is the knob; queueing shows up as TTFT).
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';

import { poissonArrivals } from './arrivals.js';
import type { RequestResult } from './request.js';

export type LoadShape = { kind: 'closed'; concurrency: number } | { kind: 'poisson'; rate: number };

/** Stop after this many requests, or stop sending after this many seconds (in-flight requests finish). */
export interface LoadLimit {
  requests?: number;
  durationS?: number;
}

export interface LoadRun {
  results: RequestResult[];
  /** From the first send to the last response, seconds. */
  wallS: number;
}

export function describeLoad(shape: LoadShape): string {
  return shape.kind === 'closed' ? `c=${shape.concurrency}` : `${shape.rate} req/s`;
}

export async function runLoad(
  shape: LoadShape, limit: LoadLimit, send: (i: number) => Promise<RequestResult>, seed: number,
  onResult?: (r: RequestResult) => void,
): Promise<LoadRun> {
  const results: RequestResult[] = [];
  const start = performance.now();
  const record = async (i: number): Promise<void> => {
    const r = await send(i);
    results.push(r);
    onResult?.(r);
  };
  if (shape.kind === 'closed') {
    let next = 0;
    const more = (): boolean =>
      (limit.requests === undefined || next < limit.requests) &&
      (limit.durationS === undefined || performance.now() - start < limit.durationS * 1000);
    const client = async (): Promise<void> => {
      while (more()) await record(next++);
    };
    await Promise.all(Array.from({ length: shape.concurrency }, client));
  } else {
    const times = poissonArrivals(shape.rate, { count: limit.requests, durationS: limit.durationS }, seed);
    const inFlight: Promise<void>[] = [];
    for (let i = 0; i < times.length; i++) {
      const wait = start + times[i] * 1000 - performance.now();
      if (wait > 0) await sleep(wait);
      inFlight.push(record(i));
    }
    await Promise.all(inFlight);
  }
  return { results, wallS: (performance.now() - start) / 1000 };
}

// The pure pieces of mstar bench: percentiles, Poisson arrivals, SSE parsing, mixes, lengths,
// cells and how the table and the chart show their rounds.
import { describe, expect, it } from 'vitest';

import { poissonArrivals } from '../../lib/bench/arrivals.js';
import { hbmBandwidth } from '../../lib/bench/hbm.js';
import { cellReport, withRetention } from '../../lib/bench/cell.js';
import { requestOf } from '../../lib/bench/grid.js';
import { parseLength } from '../../lib/bench/lengths.js';
import { modelPicker } from '../../lib/bench/mix.js';
import type { BenchOptions } from '../../lib/bench/options.js';
import { percentile, summarize } from '../../lib/bench/percentiles.js';
import type { RequestResult } from '../../lib/bench/request.js';
import { sseData } from '../../lib/bench/sse.js';
import { chartSvg } from '../../lib/bench/svg.js';
import { formatRetention, formatTable } from '../../lib/bench/table.js';

describe('requests of a cell', () => {
  const opts = { seed: 3, promptLen: { min: 4, max: 64 }, outputLen: { min: 2, max: 32 } } as BenchOptions;
  const load = { kind: 'closed', concurrency: 8 } as const;

  it('give every mix (and so the LoRA-off baseline) the same lengths, and each mix its own tokens', () => {
    for (let i = 0; i < 20; i++) {
      const base = requestOf(opts, 1000, 'base', load, 1, i), one = requestOf(opts, 1000, 'one', load, 1, i);
      expect([one.promptIds.length, one.maxTokens]).toEqual([base.promptIds.length, base.maxTokens]);
      expect(one.promptIds).not.toEqual(base.promptIds);  // no prefix-cache hit from an earlier cell
      expect(requestOf(opts, 1000, 'base', load, 1, i)).toEqual(base);  // reproducible
    }
    const lengths = (round: number) => Array.from({ length: 20 }, (_, i) => requestOf(opts, 1000, 'base', load, round, i).maxTokens);
    expect(lengths(2)).not.toEqual(lengths(1));  // rounds draw anew
  });
});

describe('percentiles', () => {
  it('interpolate linearly between closest ranks, as numpy does', () => {
    const v = [15, 20, 35, 40, 50];
    expect(percentile(v, 50)).toBe(35);
    expect(percentile(v, 0)).toBe(15);
    expect(percentile(v, 100)).toBe(50);
    expect(percentile(v, 40)).toBeCloseTo(29); // numpy.percentile([15,20,35,40,50], 40) == 29.0
    expect(percentile([3, 1, 2, 4], 99)).toBeCloseTo(3.97);
    expect(percentile([7], 99)).toBe(7);
    expect(percentile([], 50)).toBeNull();
  });

  it('summarize gives p50, p90, p99 and the mean, or nulls for no data', () => {
    expect(summarize([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])).toEqual({ p50: 5.5, p90: 9.1, p99: expect.closeTo(9.91, 10), mean: 5.5 });
    expect(summarize([])).toEqual({ p50: null, p90: null, p99: null, mean: null });
  });
});

describe('Poisson arrivals', () => {
  it('are the same for the same seed and differ for another', () => {
    const a = poissonArrivals(10, { count: 50 }, 42);
    expect(a).toEqual(poissonArrivals(10, { count: 50 }, 42));
    expect(a).not.toEqual(poissonArrivals(10, { count: 50 }, 43));
    expect(a).toHaveLength(50);
    expect(a.every((t, i) => t > (i === 0 ? 0 : a[i - 1]))).toBe(true);
  });

  it('have mean gap 1/rate, and stop at the duration', () => {
    const a = poissonArrivals(20, { count: 20000 }, 1);
    expect(a.at(-1)! / a.length).toBeCloseTo(1 / 20, 2);
    const d = poissonArrivals(20, { durationS: 5 }, 1);
    expect(d.at(-1)!).toBeLessThan(5);
    expect(d.length).toBeGreaterThan(70);
    expect(d.length).toBeLessThan(130);
    expect(() => poissonArrivals(0, { count: 1 }, 1)).toThrow(/positive/);
  });
});

function streamOf(...parts: string[]): ReadableStream<Uint8Array> {
  const enc = new TextEncoder();
  return new ReadableStream({
    start(c) {
      for (const p of parts) c.enqueue(enc.encode(p));
      c.close();
    },
  });
}

async function collect(s: ReadableStream<Uint8Array>): Promise<string[]> {
  const out: string[] = [];
  for await (const d of sseData(s)) out.push(d);
  return out;
}

describe('SSE parsing', () => {
  it('yields data across split reads, CRLF and multi-line events, and stops at [DONE]', async () => {
    expect(await collect(streamOf('data: {"a"', ':1}\n\n: comment\n\nda', 'ta: x\r', '\ndata: y\r\n\r\n', 'data: [DONE]\n\ndata: late\n\n'))).toEqual(['{"a":1}', 'x\ny']);
    expect(await collect(streamOf('event: m\ndata:z\n\ndata: tail'))).toEqual(['z', 'tail']);
  });

  it('reads the body to its end after [DONE], so that the connection can serve the next request', async () => {
    let ended = false;
    async function* body(): AsyncGenerator<Uint8Array> {
      const enc = new TextEncoder();
      yield enc.encode('data: a\n\ndata: [DONE]\n\n');
      yield enc.encode('data: late\n\n');
      ended = true;
    }
    const out: string[] = [];
    for await (const d of sseData(body())) out.push(d);
    expect(out).toEqual(['a']);
    expect(ended).toBe(true);
  });

  it('closes the body when its reader stops early', async () => {
    let closed = false;
    async function* body(): AsyncGenerator<Uint8Array> {
      try {
        yield new TextEncoder().encode('data: a\n\ndata: b\n\n');
        yield new TextEncoder().encode('data: c\n\n');
      } finally {
        closed = true;
      }
    }
    for await (const d of sseData(body())) if (d === 'a') break;
    expect(closed).toBe(true);
  });
});

describe('mixes', () => {
  const adapters = ['a', 'b', 'c'];
  it('name the base, one adapter, a round robin, or a seeded uniform draw', () => {
    const ids = [0, 1, 2, 3, 4, 5];
    expect(ids.map(modelPicker('base', 'm', adapters, 0))).toEqual(['m', 'm', 'm', 'm', 'm', 'm']);
    expect(ids.map(modelPicker('one', 'm', adapters, 0))).toEqual(['a', 'a', 'a', 'a', 'a', 'a']);
    expect(ids.map(modelPicker('churn', 'm', adapters, 0))).toEqual(['a', 'b', 'c', 'a', 'b', 'c']);
    const many = Array.from({ length: 3000 }, (_, i) => i);
    const mixed = many.map(modelPicker('mixed', 'm', adapters, 7));
    expect(mixed).toEqual([...many].reverse().map(modelPicker('mixed', 'm', adapters, 7)).reverse());
    for (const a of adapters) expect(mixed.filter((x) => x === a).length).toBeGreaterThan(900);
    expect(() => modelPicker('one', 'm', [], 0)).toThrow(/needs adapters/);
  });
});

describe('lengths', () => {
  it('parse N or MIN:MAX', () => {
    expect(parseLength('128')).toEqual({ min: 128, max: 128 });
    expect(parseLength('64:256')).toEqual({ min: 64, max: 256 });
    expect(parseLength('0')).toBeUndefined();
    expect(parseLength('9:3')).toBeUndefined();
    expect(parseLength('x')).toBeUndefined();
  });
});

describe('cell reports', () => {
  const result = (startMs: number, ttft: number, itl: number[], ok = true): RequestResult => ({
    ok, model: 'm', promptTokens: 4, requestedTokens: itl.length + 1, outputTokens: ok ? itl.length + 1 : 0,
    startMs, endMs: startMs + ttft + itl.reduce((a, b) => a + b, 0), ttftMs: ok ? ttft : null, itlMs: ok ? itl : [], ...(ok ? {} : { error: 'HTTP 500' }),
  });

  it('count tokens, failures and latencies, and retention against the baseline at the same load', () => {
    const load = { kind: 'closed' as const, concurrency: 2 };
    const on = cellReport('lora-on', 'one', load, [{ wallS: 2, results: [result(0, 10, [5, 5, 5]), result(0, 20, [5]), result(0, 0, [], false)] }]);
    expect(on).toMatchObject({ requests: 3, failed: 1, errors: ['HTTP 500'], outputTokens: 6, outputTokS: 3, shortOutputs: 0 });
    expect(on.ttftMs.p50).toBe(15);
    expect(on.itlMs.p50).toBe(5);
    expect(on.tpotMs.p50).toBe(5);
    const off = cellReport('lora-off', 'base', load, [{ wallS: 1, results: [result(0, 10, [5, 5, 5])] }, { wallS: 1, results: [result(0, 10, [5])] }]);
    expect(off.roundTokS).toEqual([4, 2]);
    expect(off.outputTokS).toBe(3);
    const other = cellReport('lora-on', 'one', { kind: 'closed', concurrency: 4 }, []);
    expect(withRetention([on, other], [off]).map((c) => c.retention)).toEqual([1, null]);
    expect(withRetention([on, other], [off]).map((c) => c.roundRetention)).toEqual([[3 / 4], []]);
  });

  // Three rounds on each side, paired round by round (the sides measured back to back).
  const load = { kind: 'closed' as const, concurrency: 2 };
  const runsAt = (wallS: number[]) => wallS.map((w) => ({ wallS: w, results: [result(0, 10, [5, 5, 5])] }));  // 4 tokens a round
  const baseline = [cellReport('lora-off', 'base', load, runsAt([1, 1, 2]))];  // 4, 4, 2 tok/s
  const [one] = withRetention([cellReport('lora-on', 'one', load, runsAt([2, 1, 2]))], baseline);  // 2, 4, 2 tok/s

  it('keep each round\'s retention against the baseline\'s same round', () => {
    expect(one.retention).toBeCloseTo(((2 + 4 + 2) / 3) / ((4 + 4 + 2) / 3), 12);
    expect(one.roundRetention).toEqual([0.5, 1, 1]);
    // A baseline round with no tokens has no ratio; the other rounds keep theirs.
    const broken = [cellReport('lora-off', 'base', load, [...runsAt([1]), { wallS: 1, results: [] }, ...runsAt([2])])];
    expect(withRetention([one], broken)[0].roundRetention).toEqual([0.5, 1]);
  });

  it('show the rounds\' range of retention in the table, a bar through the chart\'s point', () => {
    expect(formatRetention(one)).toBe('80.0% (50.0-100.0%)');
    const single = withRetention([cellReport('lora-on', 'one', load, runsAt([2]))], [cellReport('lora-off', 'base', load, runsAt([1]))])[0];
    expect(formatRetention(single)).toBe('50.0%');
    expect(formatTable([one, single])).toMatch(/lora-on\s+one\s+c=2\s+3\s+0\s+2\.7\s+80\.0% \(50\.0-100\.0%\)\s/);
    const chart = chartSvg([one, ...withRetention(baseline, baseline)], 'rounds');
    const bars = [...chart.matchAll(/<line class="range"[^>]* y1="([\d.]+)" y2="([\d.]+)" stroke="(#\w+)"/g)];
    expect(bars.map((b) => b[3])).toEqual(['#ff7f0e']);  // the one mix's point; LoRA off's rounds are all 100%
    expect(Number(bars[0][1])).toBeGreaterThan(Number(bars[0][2]));  // from 50% up to 100%
    expect(chart).toContain('<title>one c=2: 80.0% (50.0-100.0%)</title>');
  });
});

describe('the roofline\'s HBM bandwidth', () => {
  it('is --hbm-gbps when given, and the datasheet\'s, said so, for a cpu server', async () => {
    const lines: string[] = [];
    expect(await hbmBandwidth(3900, 'cuda', (l) => lines.push(l))).toEqual({ gbps: 3900, source: 'given' });
    expect(lines).toEqual([]);
    expect(await hbmBandwidth(undefined, 'cpu', (l) => lines.push(l))).toEqual({ gbps: 4800, source: 'datasheet' });
    expect(lines).toEqual(["roofline: the server runs on the cpu; dividing by the H200 datasheet's 4800 GB/s (--hbm-gbps sets it)"]);
  });
});

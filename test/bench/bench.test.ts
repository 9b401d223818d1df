// mstar bench end to end on the CPU: a synthesized tiny checkpoint served in-process with LoRA
// on and off (--serve), and any endpoint by URL, with tiny numbers so it runs in a second or two.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';

import type { CellReport } from '../../lib/bench/cell.js';
import { loadBenchConfig, startLocalServer } from '../../lib/bench/local_server.js';
import type { BenchReport } from '../../lib/bench/options.js';
import { modelBytes } from '../../lib/bench/roofline.js';
import { runBenchmark } from '../../lib/bench/run.js';
import { runCli } from '../../lib/cli/cli.js';
import { ADAPTERS, removeTempDirs, synthTiny } from '../synth/tiny.js';
import { checkWellFormed } from './xml.js';

let dir: string;
let yamlFile: string;

beforeAll(async () => {
  dir = (await synthTiny()).dir;
  yamlFile = join(dir, 'bench.yaml');
  // Three adapters over two slots: the churn mix swaps.
  writeFileSync(yamlFile, [
    'model: .', 'served_model_name: tiny', 'device: cpu', 'max_seq_len: 256', 'max_batch_size: 8', 'kv_cache: {num_blocks: 64}',
    'resources:', '  lora:', '    slots: 2', '    max_rank: 8', `    targets: [${ADAPTERS.targets.join(', ')}]`, '    adapters:',
    ...[0, 1, 2].map((i) => `      - {name: lora-00${i}, path: adapters/lora-00${i}}`), '',
  ].join('\n'));
});
afterAll(removeTempDirs);

describe('mstar bench --serve', () => {
  it('measures every mix with LoRA on and the baseline with LoRA off, and writes a table, JSON and SVG', async () => {
    let out = '';
    vi.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => ((out += String(chunk)), true));
    const json = join(dir, 'bench.json'), svg = join(dir, 'bench.svg');
    let code: number;
    try {
      code = await runCli(['bench', '--serve', yamlFile, '--concurrency', '1,2', '--requests', '4', '--prompt-len', '8', '--output-len', '4',
        '--json', json, '--svg', svg, '--roofline', '--prefill', '32']);
    } finally {
      vi.restoreAllMocks();
    }
    expect(code, out).toBe(0);

    const report = JSON.parse(readFileSync(json, 'utf8')) as BenchReport;
    expect(report.target).toMatchObject({ kind: 'serve', model: 'tiny', adapters: ['lora-000', 'lora-001', 'lora-002'], device: 'cpu', slots: 2 });
    expect(report.settings).toMatchObject({ concurrency: [1, 2], promptLen: '8', outputLen: '4', requests: 4, mixes: ['base', 'one', 'churn', 'mixed'], rounds: 1 });
    const key = (c: CellReport): string => `${c.engine} ${c.mix} ${c.load.kind === 'closed' ? c.load.concurrency : c.load.rate}`;
    expect(report.cells.map(key)).toEqual([
      'lora-on base 1', 'lora-on base 2', 'lora-on one 1', 'lora-on one 2', 'lora-on churn 1', 'lora-on churn 2',
      'lora-on mixed 1', 'lora-on mixed 2', 'lora-off base 1', 'lora-off base 2',
    ]);
    for (const c of report.cells) {
      expect(c, key(c)).toMatchObject({ requests: 4, failed: 0, errors: [], shortOutputs: 0, outputTokens: 16, rounds: 1 });
      expect(c.outputTokS).toBeGreaterThan(0);
      expect(c.ttftMs.p50).toBeGreaterThan(0);
      expect(c.ttftMs.p99).toBeGreaterThanOrEqual(c.ttftMs.p50!);
      expect(c.itlMs.p50).not.toBeNull();
      expect(c.e2eMs.p50).toBeGreaterThanOrEqual(c.ttftMs.p50!);
      const baseline = report.cells.find((b) => b.engine === 'lora-off' && JSON.stringify(b.load) === JSON.stringify(c.load))!;
      expect(c.retention).toBeCloseTo(c.outputTokS / baseline.outputTokS, 9);
    }
    expect(report.cells.filter((c) => c.engine === 'lora-off').map((c) => c.retention)).toEqual([1, 1]);

    const roofline = report.roofline!;
    // Tied 64×1000 embedding + 2 layers of (q 64 + k 32 + v 32 + o 64 + gate/up 256 + down 64)·64 + norms, bf16.
    expect(roofline.weightBytes).toBe(2 * (1000 * 64 + 2 * (64 * 64 + 2 * 32 * 64 + 64 * 64 + 2 * 128 * 64 + 64 * 128 + 2 * 64 + 2 * 16) + 64));
    expect(roofline.kvBytesPerToken).toBe(2 * 2 * 2 * 16 * 4);  // the engine's KV on the cpu is f32, whatever the checkpoint
    expect(roofline).toMatchObject({ hbmGbps: 4800, hbmSource: 'datasheet' });  // a cpu server: nothing to measure
    expect(roofline.contextTokens).toBe(8 + 2);  // decode steps k = 1..3 of 4 tokens read 8 + k keys
    expect(roofline.cells.map((c) => `${c.engine} ${c.mix}`)).toEqual(['lora-on base', 'lora-on one', 'lora-on churn', 'lora-on mixed', 'lora-off base']);
    expect(roofline.cells[1].adapterBytes).toBeGreaterThan(0);
    expect(roofline.cells.every((c) => c.fraction > 0 && c.floorMs > 0)).toBe(true);

    const prefill = report.prefill!;
    // 2 FLOPs per decoder weight (2 layers of 36864) per token, causal attention 2·32²·16 per
    // head (4) and layer, the tied LM head on one token.
    expect(prefill).toMatchObject({ tokens: 32, peakTflops: 989, flops: 2 * 2 * 36864 * 32 + 2 * 32 * 32 * 16 * 4 * 2 + 2 * 64 * 1000 });
    expect(prefill.cells.map((c) => `${c.engine} ${c.mix}`)).toEqual(['lora-on base', 'lora-on one', 'lora-off base']);
    for (const c of prefill.cells) expect(c.fraction).toBeCloseTo(prefill.flops / (c.ttftMs / 1e3) / 1e12 / 989, 12);
    // Each engine's counters: 3 adapters over 2 slots made the pool load more than twice.
    const [on, off] = report.engines!;
    expect(on).toMatchObject({ engine: 'lora-on', preemptions: 0 });
    expect(on.steps).toBeGreaterThan(0);
    expect(on.lora!.loads).toBeGreaterThan(2);
    expect(on.lora!.evictions).toBeGreaterThan(0);
    expect(off.engine).toBe('lora-off');
    expect(off.lora).toBeUndefined();
    expect(out).toMatch(/lora-on: \d+ steps, 0 preemptions; adapter pool: \d+ slot loads \(\S+ ms of host time to start them\), \d+ evictions, \d+ time-slice hand-overs, \d+ merges into the weights \(\d+ steps merged\)\nlora-off: \d+ steps, 0 preemptions\n/);
    expect(out).toMatch(/prefill of 32 tokens alone \(0\.00 TFLOP\), bf16 peak 989 TFLOP\/s\n  lora-on  base   TTFT p50 \S+ ms -> .*\n  lora-on  one    TTFT p50 \S+ ms -> /);

    expect(out).toMatch(/engine\s+mix\s+load\s+req\s+fail\s+tok\/s\s+retention\s+TTFT p50\s+TTFT p99\s+ITL p50\s+ITL p99\s+TPOT p50\s+e2e p50\s+e2e p99/);
    expect(out).toMatch(/lora-on\s+churn\s+c=2\s+4\s+0\s/);
    expect(out).toMatch(/lora-off\s+base\s+c=1\s+4\s+0\s+\S+\s+100\.0%/);
    expect(out).toMatch(/roofline at c=1, HBM 4800 GB\/s \(datasheet\)/);
    expect(out).toMatch(/roofline: the server runs on the cpu; dividing by the H200 datasheet's 4800 GB\/s/);

    const chart = readFileSync(svg, 'utf8');
    checkWellFormed(chart);
    expect(chart).toMatch(/^<\?xml version="1.0" encoding="UTF-8"\?>\n<svg xmlns="http:\/\/www.w3.org\/2000\/svg"/);
    for (const name of ['base', 'one', 'churn', 'mixed', 'lora-off']) {
      // One series per mix in each of the two panels (retention, TTFT).
      expect(chart.match(new RegExp(`data-name="${name}"`, 'g')), name).toHaveLength(2);
    }
    expect(chart).toContain('Retention (tok/s ÷ LoRA off)');
    expect(chart).toContain('TTFT p50 (ms)');
  });
});

describe('mstar bench --serve, odd flags', () => {
  it('measures a repeated load point once', async () => {
    const json = join(dir, 'dup.json');
    vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
    try {
      expect(await runCli(['bench', '--serve', yamlFile, '--concurrency', '2,2', '--requests', '2', '--prompt-len', '6', '--output-len', '2',
        '--mix', 'base', '--json', json])).toBe(0);
    } finally {
      vi.restoreAllMocks();
    }
    const report = JSON.parse(readFileSync(json, 'utf8')) as BenchReport;
    expect(report.settings.concurrency).toEqual([2]);
    expect(report.cells.map((c) => [c.engine, c.requests])).toEqual([['lora-on', 2], ['lora-off', 2]]);
  });

  it('counts the KV bytes the engine keeps: bf16 on CUDA whatever the checkpoint, f32 on the cpu or with dtype f32', () => {
    const config = loadBenchConfig(yamlFile);
    const per = (c: typeof config) => modelBytes(c).kvBytesPerToken;
    expect(per({ ...config, device: 'auto' })).toBe(2 * 2 * 2 * 16 * 2);
    expect(per({ ...config, device: 'cpu' })).toBe(2 * 2 * 2 * 16 * 4);
    expect(per({ ...config, device: 'cuda', dtype: 'f32' })).toBe(2 * 2 * 2 * 16 * 4);
  });
});

describe('mstar bench --serve with rounds', () => {
  it('alternates which side goes first, a server for each side and round, and pools the rounds', async () => {
    const lines: string[] = [];
    const report = await runBenchmark({
      target: { kind: 'serve', configFile: yamlFile }, concurrency: [2], rates: [], promptLen: { min: 6, max: 6 }, outputLen: { min: 3, max: 3 },
      requests: 4, mixes: ['base', 'one'], rounds: 3, seed: 5, roofline: false, hbmGbps: 4800, peakTflops: 989,
    }, { status: () => {}, log: (l) => lines.push(l) });
    // on, off | off, on | on, off: each side's rounds sit as early and as late in the run.
    expect(lines.filter((l) => /: starting mstar/.test(l)).map((l) => l.split(':')[0])).toEqual(
      ['lora-on', 'lora-off', 'lora-off', 'lora-on', 'lora-on', 'lora-off']);
    for (const round of [1, 2, 3]) expect(lines.some((l) => l.startsWith(`lora-off base c=2 round ${round}/3: `))).toBe(true);
    expect(report.cells.map((c) => [c.engine, c.mix, c.rounds, c.requests, c.failed, c.outputTokens])).toEqual([
      ['lora-on', 'base', 3, 12, 0, 36], ['lora-on', 'one', 3, 12, 0, 36], ['lora-off', 'base', 3, 12, 0, 36],
    ]);
    expect(report.cells[0].roundTokS).toHaveLength(3);
    expect(report.cells.every((c) => c.retention !== null && c.retention > 0)).toBe(true);
    expect(report.cells.map((c) => c.roundRetention.length)).toEqual([3, 3, 3]);  // a ratio for each round
    expect(report.cells[2].roundRetention).toEqual([1, 1, 1]);
    // Counters add up over a side's three servers: at least a prefill and 2 decode steps a request.
    const [on, off] = report.engines!;
    expect(on.engine).toBe('lora-on');
    expect(off.engine).toBe('lora-off');
    expect(on.steps).toBeGreaterThanOrEqual(2 * 3 * 4 / 2 * 3);
    expect(off.steps).toBeGreaterThanOrEqual(3 * 4 / 2 * 3);
    expect(on.lora!.loads).toBeGreaterThanOrEqual(3);  // the 'one' adapter, loaded by each round's server
  }, 30_000);  // six servers start and stop: 2.6 s on an idle machine, 5.06 s beside an addon build
});

describe('mstar bench --url', () => {
  it('finds the model and adapters from /v1/models and runs Poisson arrivals', async () => {
    const server = await startLocalServer(loadBenchConfig(yamlFile));
    const lines: string[] = [];
    try {
      const report = await runBenchmark({
        target: { kind: 'url', url: server.url, vocab: 997 },
        concurrency: [], rates: [200], promptLen: { min: 4, max: 12 }, outputLen: { min: 2, max: 5 }, requests: 6,
        mixes: ['base', 'mixed'], rounds: 2, seed: 3, roofline: false, hbmGbps: 4800, peakTflops: 989,
      }, { status: () => {}, log: (l) => lines.push(l) });
      expect(report.target).toMatchObject({ kind: 'url', url: server.url, baselineUrl: null, model: 'tiny', adapters: ['lora-000', 'lora-001', 'lora-002'] });
      expect(report.cells.flatMap((c) => c.errors)).toEqual([]);
      expect(report.cells.map((c) => [c.mix, c.load, c.rounds, c.requests, c.failed, c.retention])).toEqual([
        ['base', { kind: 'poisson', rate: 200 }, 2, 12, 0, null],
        ['mixed', { kind: 'poisson', rate: 200 }, 2, 12, 0, null],
      ]);
      expect(report.cells[0].roundTokS).toHaveLength(2);
      expect(report.cells[0].outputTokens).toBeGreaterThanOrEqual(12 * 2);
      expect(report.cells[0].outputTokens).toBeLessThanOrEqual(12 * 5);
      expect(lines.some((l) => /^lora-on mixed 200 req\/s round 2\/2: /.test(l))).toBe(true);
    } finally {
      await server.close();
    }
  });

  it('reports a failing endpoint request by request', async () => {
    const server = await startLocalServer(loadBenchConfig(yamlFile));
    try {
      // An adapter the server does not have: every request is refused (the warm-up first).
      await expect(runBenchmark({
        target: { kind: 'url', url: server.url, model: 'tiny', vocab: 997 }, adapters: ['nope'],
        concurrency: [1], rates: [], promptLen: { min: 4, max: 4 }, outputLen: { min: 2, max: 2 }, requests: 2,
        mixes: ['one'], rounds: 1, seed: 0, roofline: false, hbmGbps: 4800, peakTflops: 989,
      }, { status: () => {}, log: () => {} })).rejects.toThrow(/warm-up request .* \(model nope\) failed: HTTP 4\d\d/);
    } finally {
      await server.close();
    }
  });
});

// The host side of CUDA-graph decode steps (graph_inputs.ts): bucket choice, which steps
// may replay a graph, and the padded inputs a replay reads. Pure TS: runs on any machine.
import { describe, expect, it } from 'vitest';

import {
  bucketFor, DecodeInputs, graphBuckets, graphIneligible, MAX_GRAPH_BATCH, tableWidth,
} from '../../lib/engine/graph_inputs.js';
import { cudaGraphsSetting, loraGemmRowsSetting, overlapSetting, profileSetting } from '../../lib/engine/options.js';
import type { ScheduledSeq } from '../../lib/engine/scheduler.js';
import { Sequence } from '../../lib/engine/sequence.js';
import { greedy } from './helpers.js';

const BS = 4;

/** A sequence with `prompt` tokens, `generated` outputs, its KV blocks, decoding its last token. */
function decoding(prompt: number[], generated: number[], blocks: number[], extra: { slot?: number; seed?: number; temperature?: number; logprobs?: number } = {}): ScheduledSeq {
  const seq = new Sequence(`s${prompt[0]}`, prompt, greedy(100, { seed: extra.seed ?? 7, temperature: extra.temperature ?? 0, logprobs: extra.logprobs ?? null }), 0);
  seq.outputIds.push(...generated);
  seq.blocks = blocks;
  seq.slot = extra.slot ?? 0;
  seq.numComputed = seq.length - 1;
  return { seq, start: seq.length - 1, count: 1, samples: true };
}

describe('graph buckets', () => {
  it('are powers of two below the limit, then the limit', () => {
    expect(graphBuckets(64, 512)).toEqual([1, 2, 4, 8, 16, 32, 64]);
    expect(graphBuckets(48, 512)).toEqual([1, 2, 4, 8, 16, 32, 48]);
    expect(graphBuckets(5, 512)).toEqual([1, 2, 4, 5]);
    expect(graphBuckets(1, 512)).toEqual([1]);
    expect(graphBuckets(64, 3)).toEqual([1, 2, 3]);  // a step never holds more rows than tokens
    expect(graphBuckets(4096, 8192).at(-1)).toBe(MAX_GRAPH_BATCH);
  });

  it('a batch takes the smallest bucket that holds it', () => {
    const b = graphBuckets(64, 512);
    expect([1, 2, 3, 4, 5, 8, 9, 33, 64].map((n) => bucketFor(b, n))).toEqual([1, 2, 4, 4, 8, 8, 16, 64, 64]);
    expect(bucketFor(b, 65)).toBeUndefined();
    expect(bucketFor(b, 0)).toBeUndefined();
  });

  it('the block table is wide enough for the longest sequence', () => {
    expect(tableWidth(256, 16)).toBe(16);
    expect(tableWidth(257, 16)).toBe(17);
    expect(tableWidth(1, 16)).toBe(1);
  });
});

describe('which steps replay a graph', () => {
  const ok = decoding([1, 2, 3], [4], [0]);

  it('a batch of decode rows does', () => {
    expect(graphIneligible([ok, decoding([5, 6], [], [1])], 8, 4, BS)).toBeUndefined();
  });

  it('prefill chunks, logprobs, too many rows or blocks do not', () => {
    const prefill: ScheduledSeq = { ...decoding([9, 9, 9], [], [2]), start: 0, count: 3 };
    expect(graphIneligible([ok, prefill], 8, 4, BS)).toBe('prefill');
    const chunk: ScheduledSeq = { ...decoding([9, 9, 9], [], [2]), start: 0, count: 1, samples: false };
    expect(graphIneligible([chunk], 8, 4, BS)).toBe('prefill');
    expect(graphIneligible([ok, decoding([7], [], [3], { logprobs: 2 })], 8, 4, BS)).toBe('logprobs requested');
    expect(graphIneligible([ok, ok, ok], 2, 4, BS)).toMatch(/above the largest graph bucket/);
    expect(graphIneligible([decoding([1], [], [0, 1, 2, 3, 4])], 8, 4, BS)).toMatch(/above the table width/);
    expect(graphIneligible([decoding([1, 2, 3, 4, 5], [], [0])], 8, 4, BS)).toBe('a token has no KV block reserved');
    expect(graphIneligible([], 8, 4, BS)).toBe('empty step');
  });
});

describe('decode inputs', () => {
  it('fill real rows as the eager runner would and pad the rest of the bucket harmlessly', () => {
    const vocab = 100;
    const d = new DecodeInputs(8, 3);
    const a = decoding([11, 12, 13, 14], [15], [5, 9], { slot: 2, seed: 42, temperature: 0.5 });  // position 4: block 9
    const b = decoding([21], [], [3]);  // position 0
    const c = decoding([31, 32], [33, 34, 35], [7, 8], { slot: 1 });  // position 4
    const adapters = d.fill([a, b, c], 4, BS, vocab);
    expect(adapters).toBe(true);
    const f = (name: (typeof DecodeInputs.FIELDS)[number]) => Array.from(d.field(name).subarray(0, 4));
    expect(f('tokens')).toEqual([15, 21, 35, 0]);
    expect(f('positions')).toEqual([4, 0, 4, 0]);
    expect(f('slots')).toEqual([9 * BS + 0, 3 * BS + 0, 8 * BS + 0, -1]);
    expect(f('contextLens')).toEqual([5, 1, 5, 1]);
    expect(f('rowSlots')).toEqual([2, 0, 1, 0]);
    expect(f('embedRows')).toEqual([2 * vocab + 15, 21, vocab + 35, 0]);
    expect(f('steps')).toEqual([1, 0, 3, 0]);
    expect(f('logitRows')).toEqual([0, 1, 2, 3]);
    expect(Array.from(d.queryStarts().subarray(0, 5))).toEqual([0, 1, 2, 3, 4]);
    expect(Array.from(d.tables.subarray(0, 12))).toEqual([5, 9, -1, 3, -1, -1, 7, 8, -1, -1, -1, -1]);
    expect(Array.from(d.temperature.subarray(0, 4))).toEqual([0.5, 0, 0, 0]);
    expect(Array.from(d.topP.subarray(0, 4))).toEqual([1, 1, 1, 1]);
    expect(Array.from(d.seeds.subarray(0, 4))).toEqual([42n, 7n, 7n, 0n]);
  });

  it('a smaller batch in the same bucket overwrites every row of the last one', () => {
    const d = new DecodeInputs(4, 2);
    d.fill([decoding([1, 2], [], [0, 1], { slot: 3 }), decoding([3], [4], [2, 3], { slot: 1 }), decoding([5], [], [1])], 4, BS, 10);
    const adapters = d.fill([decoding([6], [], [2])], 4, BS, 10);
    expect(adapters).toBe(false);
    expect(Array.from(d.field('rowSlots'))).toEqual([0, 0, 0, 0]);
    expect(Array.from(d.field('slots'))).toEqual([2 * BS, -1, -1, -1]);
    expect(Array.from(d.tables)).toEqual([2, -1, -1, -1, -1, -1, -1, -1]);
  });

  it('a token the host has not read comes from the previous step\'s row on the device', () => {
    const vocab = 10;
    const d = new DecodeInputs(4, 2);
    const known = decoding([1, 2], [], [0]);
    const first = decoding([3], [4], [1], { slot: 2 });
    const second = decoding([5], [6], [2], { slot: 1 });
    for (const e of [first, second]) {
      e.seq.unread = 1;  // the token at e.start, sampled by the last step, not read
      e.seq.numComputed = e.start;
    }
    const unread = new Map([[first.seq, 0], [second.seq, 3]]);
    d.fill([known, { ...first, start: first.seq.length - 1 }, { ...second, start: second.seq.length - 1 }], 4, BS, vocab, unread);
    const f = (name: (typeof DecodeInputs.FIELDS)[number]) => Array.from(d.field(name));
    expect(f('tokens')).toEqual([2, 0, 0, 0]);
    expect(f('fromRows')).toEqual([-1, 0, 3, -1]);
    expect(f('embedRows')).toEqual([2, 2 * vocab, vocab, 0]);  // rows 1 and 2 are made on the device with their tokens
    expect(f('positions')).toEqual([1, 2, 2, 0]);
    expect(f('steps')).toEqual([0, 2, 2, 0]);  // the unread token counts as generated
    expect(() => d.fill([{ ...second, start: second.seq.length - 1 }], 4, BS, vocab)).toThrow(/not read and has no row/);
  });

  it('refuse a batch larger than the bucket', () => {
    const d = new DecodeInputs(4, 2);
    expect(() => d.fill([decoding([1], [], [0]), decoding([2], [], [1])], 1, BS, 10)).toThrow(/2 rows in a bucket of 1/);
  });
});

describe('settings', () => {
  it('MSTAR_CUDA_GRAPHS=0 turns graphs off, MSTAR_OVERLAP=0 overlapped steps; otherwise the options', () => {
    expect(cudaGraphsSetting(undefined, {})).toBe(true);
    expect(cudaGraphsSetting(false, {})).toBe(false);
    expect(cudaGraphsSetting(true, { MSTAR_CUDA_GRAPHS: '0' })).toBe(false);
    expect(cudaGraphsSetting(undefined, { MSTAR_CUDA_GRAPHS: 'off' })).toBe(false);
    expect(cudaGraphsSetting(undefined, { MSTAR_CUDA_GRAPHS: '1' })).toBe(true);
    expect(cudaGraphsSetting(false, { MSTAR_CUDA_GRAPHS: '1' })).toBe(false);
    expect(() => cudaGraphsSetting(undefined, { MSTAR_CUDA_GRAPHS: 'maybe' })).toThrow(/MSTAR_CUDA_GRAPHS=maybe/);
    expect(overlapSetting(undefined, true, {})).toBe(true);
    expect(overlapSetting(undefined, false, {})).toBe(false);
    expect(overlapSetting(true, false, {})).toBe(true);
    expect(overlapSetting(true, true, { MSTAR_OVERLAP: '0' })).toBe(false);
    expect(profileSetting({ MSTAR_PROFILE: '1' })).toBe(true);
    expect(profileSetting({})).toBe(false);
  });

  it('MSTAR_LORA_GEMM_ROWS: a row count, or inf; by default 2^20 / hidden size rows, at most 1024', () => {
    expect(loraGemmRowsSetting(1024, {})).toBe(1024);  // Qwen3-0.6B
    expect(loraGemmRowsSetting(64, {})).toBe(1024);
    expect(loraGemmRowsSetting(4096, {})).toBe(256);  // Qwen3-8B
    expect(loraGemmRowsSetting(2560, {})).toBe(410);  // Qwen3-4B
    expect(loraGemmRowsSetting(4096, { MSTAR_LORA_GEMM_ROWS: '256' })).toBe(256);
    expect(loraGemmRowsSetting(1024, { MSTAR_LORA_GEMM_ROWS: '2048' })).toBe(2048);
    expect(loraGemmRowsSetting(4096, { MSTAR_LORA_GEMM_ROWS: 'inf' })).toBe(Infinity);
    for (const bad of ['0', '-3', 'many']) {
      expect(() => loraGemmRowsSetting(1024, { MSTAR_LORA_GEMM_ROWS: bad })).toThrow(/MSTAR_LORA_GEMM_ROWS=.* is not understood/);
    }
  });
});

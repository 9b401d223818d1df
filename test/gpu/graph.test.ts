// CUDA graphs: the native capture/replay API, asynchronous uploads and readbacks; then the
// engine's decode steps as replayed graphs (overlapped or not), which must give exactly the
// eager engine's tokens (the same kernels on the same rows: batches here stay within the
// GEMV sizes and attention's single split, so the numbers are bit for bit the same), for
// any adapter mix without a new capture, over buckets 1/2/4/8 with padded rows; and with
// f32 activations HF's tokens.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

import { Engine, type EngineLimits } from '../../lib/engine/engine.js';
import type { SamplingParams } from '../../lib/engine/types.js';
import { ALL_TARGETS } from '../../lib/lora/adapter.js';
import { cudaPlacement, loadModel, type Model } from '../../lib/models/index.js';
import { greedy, prompts } from '../engine/helpers.js';
import { FIXTURES, readParityFixture } from '../parity/fixture.js';
import { addon, describeGpu } from './helpers.js';

const values = (t: { toArray(): Float32Array | Int32Array | BigInt64Array }) => Array.from(t.toArray() as Float32Array);

describeGpu('captureGraph and copyFromAsync', () => {
  it('a replay reruns the recorded ops on what the inputs hold at that time; capturing runs nothing', () => {
    const a = addon.zeros('f32', [4], 'cuda'), b = addon.zeros('f32', [4], 'cuda');
    const out = addon.fromArray('f32', [4], Float32Array.from([9, 9, 9, 9]), 'cuda');
    const g = addon.captureGraph(() => addon.add(out, a, b));
    expect(g.nodes).toBeGreaterThan(0);
    expect(values(out)).toEqual([9, 9, 9, 9]);
    for (let k = 1; k <= 3; k++) {
      a.copyFromAsync(Float32Array.from([1, 2, 3, 4], (x) => x * k));
      b.copyFromAsync(Float32Array.from([10, 20, 30, 40]));
      g.replay();
      expect(values(out)).toEqual([1, 2, 3, 4].map((x) => x * k + 10 * x));
    }
    g.dispose();
    expect(g.disposed).toBe(true);
    expect(() => g.replay()).toThrow(/Graph was disposed/);
    [a, b, out].forEach((t) => t.dispose());
  });

  it('back-to-back uploads into one tensor each reach the ops enqueued after them (bf16, converted)', () => {
    const n = 4096;
    const t = addon.empty('bf16', [n], 'cuda'), zero = addon.zeros('bf16', [n], 'cuda');
    const outs = [0, 1, 2, 3, 4, 5].map(() => addon.empty('bf16', [n], 'cuda'));
    outs.forEach((o, k) => {
      t.copyFromAsync(new Float32Array(n).fill(k + 0.5));
      addon.add(o, t, zero);
    });
    outs.forEach((o, k) => expect(new Set(values(o))).toEqual(new Set([k + 0.5])));
    // Views: rows of one storage, uploaded separately.
    const m = addon.zeros('i32', [4, 3], 'cuda');
    m.narrow(1, 2).copyFromAsync(Int32Array.from([1, 2, 3, 4, 5, 6]));
    m.narrow(3, 1).copyFromAsync(Int32Array.from([7, 8, 9]));
    expect(values(m)).toEqual([0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    [t, zero, m, ...outs].forEach((x) => x.dispose());
  });

  it('whatever waits for the GPU throws inside a capture; the capture is discarded and the stream works on', () => {
    const t = addon.fromArray('f32', [2], Float32Array.from([1, 2]), 'cuda');
    const out = addon.zeros('f32', [2], 'cuda');
    const tries: [string, () => void][] = [
      ['toArray', () => t.toArray()],
      ['copyFrom', () => t.copyFrom(Float32Array.from([5, 5]))],
      ['copyFromAsync', () => t.copyFromAsync(Float32Array.from([5, 5]))],
      ['synchronize', () => addon.synchronize()],
      ['to(cpu)', () => t.to('cpu')],
    ];
    for (const [, f] of tries) expect(() => addon.captureGraph(f)).toThrow(/while a CUDA graph is being captured/);
    expect(() => addon.captureGraph(() => { throw new Error('boom'); })).toThrow('boom');
    addon.add(out, t, t);
    expect(values(out)).toEqual([2, 4]);
    // A capture after failed ones works.
    const g = addon.captureGraph(() => addon.add(out, out, t));
    g.replay();
    expect(values(out)).toEqual([3, 6]);
    g.dispose();
    [t, out].forEach((x) => x.dispose());
  });

  it('fence.done() is false while the marked ops run and true once they ran, without waiting', () => {
    // Sixteen 4096² GEMMs (2.2 TFLOP): milliseconds of work, queued before the mark.
    const x = addon.fromArray('bf16', [4096, 4096], new Float32Array(4096 * 4096).fill(0.01), 'cuda');
    const y = addon.empty('bf16', [4096, 4096], 'cuda');
    const fence = addon.fence();
    for (let i = 0; i < 16; i++) addon.linear(y, x, x, null);
    fence.record();
    expect(fence.done()).toBe(false);
    fence.wait();
    expect(fence.done()).toBe(true);
    fence.dispose();
    [x, y].forEach((t) => t.dispose());
  });

  it('copyToAsync and a fence bring results back while later ops are queued; feedTokens matches the cpu', () => {
    const ids = addon.fromArray('i32', [3], Int32Array.from([30, 31, 32]), 'cuda');
    const host = addon.pinnedEmpty('i32', [3]);
    const fence = addon.fence();
    fence.wait();  // never recorded: returns at once
    expect(fence.done()).toBe(true);
    ids.copyToAsync(host);
    fence.record();
    // Queued behind the copy, changing ids: the copy must have taken the old values.
    const tokens = addon.fromArray('i32', [4], Int32Array.from([7, 8, 9, 10]), 'cuda');
    const embedRows = addon.fromArray('i32', [4], Int32Array.from([1, 2, 3, 4]), 'cuda');
    const from = addon.fromArray('i32', [4], Int32Array.from([-1, 2, 0, 5]), 'cuda');  // 5: past the samples, ignored
    const slots = addon.fromArray('i32', [4], Int32Array.from([0, 1, 2, 3]), 'cuda');
    addon.feedTokens(tokens, embedRows, ids, from, slots, 100);
    ids.copyFromAsync(Int32Array.from([0, 0, 0]));
    fence.wait();
    expect(fence.done()).toBe(true);
    expect([...host.toArray()]).toEqual([30, 31, 32]);
    expect([...tokens.toArray()]).toEqual([7, 32, 30, 10]);
    expect([...embedRows.toArray()]).toEqual([1, 132, 230, 4]);
    expect(() => ids.copyToAsync(addon.empty('i32', [3]))).toThrow(/dst must be a pinned cpu tensor/);
    expect(() => ids.copyToAsync(addon.pinnedEmpty('i32', [4]))).toThrow(/dst is i32\[4\] but the tensor is i32\[3\]/);
    expect(() => addon.captureGraph(() => fence.record())).toThrow(/while a CUDA graph is being captured/);
    fence.dispose();
    expect(() => fence.wait()).toThrow(/Fence was disposed/);
    [ids, host, tokens, embedRows, from, slots].forEach((t) => t.dispose());
  });

  it('scratch allocated and freed inside a capture is fine; a buffer allocated inside and kept is refused', () => {
    const x = addon.fromArray('f32', [4], Float32Array.from([1, 2, 3, 4]), 'cuda');
    const out = addon.zeros('f32', [4], 'cuda');
    const early = addon.zeros('f32', [1024], 'cuda');
    const g = addon.captureGraph(() => {
      const tmp = addon.empty('f32', [4], 'cuda');
      addon.add(tmp, x, x);
      addon.add(out, tmp, x);
      tmp.dispose();
      early.dispose();  // made before the capture: freed after it, not by the graph
    });
    g.replay();
    g.replay();
    expect(values(out)).toEqual([3, 6, 9, 12]);
    let kept: ReturnType<typeof addon.empty> | undefined;
    expect(() => addon.captureGraph(() => { kept = addon.empty('f32', [8], 'cuda'); })).toThrow(/still alive at its end/);
    kept!.dispose();  // its address was never backed outside the graph: nothing to free
    g.replay();
    expect(values(out)).toEqual([3, 6, 9, 12]);
    g.dispose();
    [x, out].forEach((t) => t.dispose());
  });
});

interface Fixture { names: string[]; paths: Map<string, string> }

function adapters(model: string): Fixture {
  const lora = JSON.parse(readFileSync(join(FIXTURES, 'parity', `lora-${model}.json`), 'utf8')) as { adapters: Record<string, { path: string }> };
  const names = Object.keys(lora.adapters);
  return { names, paths: new Map(names.map((n) => [n, join(FIXTURES, lora.adapters[n].path)])) };
}

interface Run {
  e: Engine;
  model: Model;
  messages: string[];
  close(): void;
}

async function start(modelName: string, act: 'f32' | 'bf16', cudaGraphs: boolean, limits: Partial<EngineLimits> = {}): Promise<Run> {
  const fx = adapters(modelName);
  const model = loadModel(join(FIXTURES, 'models', modelName), { placement: cudaPlacement(act) });
  const messages: string[] = [];
  const e = new Engine(model, {
    maxModelLen: 256, maxBatchSize: 8, maxNumBatchedTokens: 1024, blockSize: 16, numBlocks: 128, prefixCache: true,
    lora: { slots: fx.names.length, maxRank: 16, hostCache: fx.names.length, targets: ALL_TARGETS },
    cudaGraphs, ...limits,
  }, { onProgress: (m) => messages.push(m) });
  for (const n of fx.names) await e.loadAdapter(n, fx.paths.get(n)!);
  return { e, model, messages, close: () => { e.close(); model.dispose(); } };
}

interface Req { id: string; prompt: number[]; adapter?: string; params: SamplingParams }

function generate(e: Engine, reqs: Req[]): Record<string, number[]> {
  return Object.fromEntries(Object.entries(generateWithLogprobs(e, reqs)).map(([id, r]) => [id, r.tokens]));
}

/** Each request's tokens and, where it asked for them, their logprobs. */
function generateWithLogprobs(e: Engine, reqs: Req[]): Record<string, { tokens: number[]; logprobs: unknown[] }> {
  for (const r of reqs) e.add({ id: r.id, promptIds: r.prompt, params: r.params, adapter: r.adapter });
  const out: Record<string, { tokens: number[]; logprobs: unknown[] }> = {};
  while (e.hasWork()) {
    for (const o of e.step()) {
      const r = (out[o.id] ??= { tokens: [], logprobs: [] });
      r.tokens.push(...o.newTokenIds);
      r.logprobs.push(...(o.logprobs ?? []));
    }
  }
  return out;
}

const sampled = (maxTokens: number, seed: number): SamplingParams => greedy(maxTokens, { temperature: 0.8, topK: 20, topP: 0.9, seed });

describeGpu('decode steps as CUDA graphs', () => {
  for (const modelName of ['tiny-qwen3', 'tiny-llama']) {
    const n = adapters(modelName).names;
    // Each phase's rows: [adapter or undefined, params]; phases run one after another.
    const phases: { label: string; rows: [string | undefined, SamplingParams][] }[] = [
      { label: 'A: 3 rows (bucket 4), base + 2 adapters', rows: [[undefined, greedy(6)], [n[0], greedy(6)], [n[1], greedy(6)]] },
      { label: 'B: 3 rows, another adapter mix, one sampled row', rows: [[n[2], greedy(6)], [n[3], sampled(6, 11)], [undefined, greedy(6)]] },
      { label: 'C: 3 base rows', rows: [[undefined, greedy(5)], [undefined, sampled(5, 3)], [undefined, greedy(5)]] },
      { label: 'D: 3 rows, a third mix', rows: [[n[4], greedy(6)], [n[4], greedy(6)], [n[1], greedy(6)]] },
      {
        label: 'E: 8 rows ending one by one (buckets 8, 4, 2, 1)',
        rows: [undefined, n[0], n[1], n[2], n[3], n[4], n[0], n[1]].map((a, i) => [a, i === 5 ? sampled(2 + i, 5) : greedy(2 + i)]),
      },
      {
        // Rows with logprobs or under min_tokens make their steps eager (not graphs).
        label: 'F: logprobs and min_tokens rows beside graph-eligible ones',
        rows: [
          [undefined, greedy(6, { logprobs: 2 })], [n[0], greedy(7, { minTokens: 5, logprobs: 0 })], [n[1], greedy(9)],
          [undefined, sampled(8, 7)],
        ],
      },
    ];
    const lengths = [3, 17, 9, 1, 30, 12, 5, 40];
    const reqsOf = (p: number) => phases[p].rows.map(([adapter, params], i): Req => ({
      id: `${p}-${i}`, prompt: prompts([lengths[i]], 512, 100 * p + i + 1)[0], adapter, params,
    }));

    for (const act of ['bf16', 'f32'] as const) {
      it(`${modelName}, ${act}: the eager engine's tokens; one capture per bucket serves every adapter mix`, async () => {
        const eagerSync = await start(modelName, act, false, { overlapSteps: false });
        const eager = await start(modelName, act, false);  // overlapped steps: on by default on cuda
        const graphs = await start(modelName, act, true);
        const sync = await start(modelName, act, true, { overlapSteps: false });
        expect(eager.e.graphStats()).toBeUndefined();
        const capturesAfter: number[] = [];
        for (let p = 0; p < phases.length; p++) {
          const want = generateWithLogprobs(eagerSync.e, reqsOf(p));
          expect(generateWithLogprobs(eager.e, reqsOf(p)), `${phases[p].label}, eager steps overlapped`).toEqual(want);
          expect(generateWithLogprobs(graphs.e, reqsOf(p)), phases[p].label).toEqual(want);
          expect(generateWithLogprobs(sync.e, reqsOf(p)), `${phases[p].label}, steps not overlapped`).toEqual(want);
          capturesAfter.push(graphs.e.graphStats()!.captures);
        }
        expect(Object.values(generateWithLogprobs(eagerSync.e, reqsOf(5))).filter((r) => r.logprobs.length > 0).length).toBe(2);
        sync.close();
        eagerSync.close();
        const s = graphs.e.graphStats()!;
        console.log(`${modelName} ${act}: ${JSON.stringify(s)}`);
        expect(s.failures).toBe(0);
        // A captured the bucket-4 LoRA graph; B (another mix) replayed it; C captured the
        // bucket-4 graph without LoRA ops; D (a third mix) replayed the LoRA one again.
        expect(s.captured.slice(0, 2)).toEqual(['4/lora', '4/base']);
        expect(capturesAfter.slice(0, 4)).toEqual([1, 1, 2, 2]);
        for (const key of ['8/lora', '2/lora', '1/lora']) expect(s.captured).toContain(key);
        expect(s.replays).toBeGreaterThan(15);
        expect(s.captured.length).toBe(new Set(s.captured).size);
        expect(graphs.messages.filter((m) => m.startsWith('cuda graph: captured')).length).toBe(s.captures);
        eager.close();
        graphs.close();
      });
    }

    it(`${modelName}: captureGraphs captures every bucket up front; the steps after it only replay`, async () => {
      const eager = await start(modelName, 'bf16', false);
      const graphs = await start(modelName, 'bf16', true);
      expect(graphs.e.captureGraphs()).toBe(8);  // buckets 1, 2, 4, 8, each with and without the LoRA ops
      expect(graphs.e.captureGraphs()).toBe(0);
      for (let p = 0; p < phases.length; p++) expect(generate(graphs.e, reqsOf(p)), phases[p].label).toEqual(generate(eager.e, reqsOf(p)));
      const s = graphs.e.graphStats()!;
      expect(s.captures).toBe(8);
      expect(s.failures).toBe(0);
      expect(s.replays).toBeGreaterThan(15);
      eager.close();
      graphs.close();
    });

    for (const maxBatchSize of [64, 5]) {
      it(`${modelName}, f32 activations, graphs, max batch ${maxBatchSize}: HF + PEFT's greedy tokens`, async () => {
        const base = readParityFixture(modelName);
        const lora = JSON.parse(readFileSync(join(FIXTURES, 'parity', `lora-${modelName}.json`), 'utf8')) as {
          adapters: Record<string, { cases: { prompt_ids: number[]; output_ids: number[] }[] }>;
        };
        const run = await start(modelName, 'f32', true, { maxBatchSize, numBlocks: 256 });
        const reqs: (Req & { want: number[] })[] = base.cases.map((c, i) => ({
          id: `base/${i}`, prompt: c.promptIds, params: greedy(c.outputIds.length), want: c.outputIds,
        }));
        for (const [name, a] of Object.entries(lora.adapters)) {
          a.cases.forEach((c, i) => reqs.push({ id: `${name}/${i}`, prompt: c.prompt_ids, adapter: name, params: greedy(c.output_ids.length), want: c.output_ids }));
        }
        const got = generate(run.e, reqs);
        for (const r of reqs) expect(got[r.id], r.id).toEqual(r.want);
        const s = run.e.graphStats()!;
        console.log(`${modelName} f32 vs HF, max batch ${maxBatchSize}: ${JSON.stringify(s)}`);
        expect(s.failures).toBe(0);
        expect(s.replays).toBeGreaterThan(0);
        if (maxBatchSize === 5) expect(s.captured).toContain('5/lora');
        run.close();
      });
    }
  }
});

describe('graph test fixtures', () => {
  it('have five adapters per model (the phases above name them)', () => {
    for (const m of ['tiny-qwen3', 'tiny-llama']) expect(adapters(m).names.length).toBe(5);
  });
});

// Random workloads through four engines on the tiny model: steps not overlapped (the
// reference), not overlapped with aborts, overlapped with aborts, and overlapped with aborts
// on a "slow GPU" (a launched step says its samples are not ready for a few polls, as a
// fence that has not passed does on cuda, so the engine returns and is called again).
// Every request that was
// not aborted gets exactly the reference's tokens, logprobs and finish; an aborted one a
// prefix of them; every engine finishes (no livelock) with no KV block held. Cases mix
// chunked prefill, shared prefixes, stop tokens that really occur, EOS, min_tokens,
// logprobs, seeded sampling, late arrivals, aborts, preemption, and in the LoRA set adapters
// over one or two slots taking time slices.
import { describe, expect, it } from 'vitest';

import type { EngineLimits } from '../../lib/engine/engine.js';
import type { SamplingParams, TokenLogprob } from '../../lib/engine/types.js';
import { locateModule } from '../../lib/checkpoint/locate.js';
import { ALL_TARGETS } from '../../lib/lora/adapter.js';
import { writeAdapter, type ModuleSpec } from '../lora/make_adapter.js';
import type { Launched } from '../../lib/engine/launched.js';
import { engine, greedy, tinyModel } from './helpers.js';

/** xorshift32: the same cases on every run. */
function random(seed: number) {
  let s = seed >>> 0 || 1;
  const f = () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s / 2 ** 32;
  };
  return { f, int: (lo: number, hi: number) => lo + Math.floor(f() * (hi - lo + 1)), pick: <T>(a: readonly T[]) => a[Math.floor(f() * a.length)] };
}

interface Req { id: string; prompt: number[]; params: SamplingParams; addAt: number; abortAt?: number; adapter?: string }
interface Got { tokens: number[]; logprobs: TokenLogprob[]; finish?: string; stop?: number; aborted: boolean }
type Mode = 'plain' | 'tight' | 'lora';

const ADAPTERS = ['qv', 'mlp', 'emb'] as const;

async function adapterDirs(): Promise<Record<string, string>> {
  const c = tinyModel().config;
  const specs = (paths: string[], rank: number): ModuleSpec[] => paths.map((path) => {
    const loc = locateModule(c, c.family, path)!;
    return loc.kind === 'embedding' ? { path, rank, in: loc.rows, out: loc.cols!, embedding: true } : { path, rank, in: loc.cols!, out: loc.rows };
  });
  const attn = (m: string) => [0, 1].map((l) => `model.layers.${l}.self_attn.${m}`);
  const mlp = (m: string) => [0, 1].map((l) => `model.layers.${l}.mlp.${m}`);
  return {
    qv: (await writeAdapter(specs([...attn('q_proj'), ...attn('v_proj')], 4), { r: 4, lora_alpha: 8, target_modules: ['q_proj', 'v_proj'] }, 1)).dir,
    mlp: (await writeAdapter(specs([...mlp('gate_proj'), ...mlp('up_proj'), ...mlp('down_proj')], 8), { r: 8, lora_alpha: 8, target_modules: ['gate_proj', 'up_proj', 'down_proj'] }, 2)).dir,
    emb: (await writeAdapter(specs(['model.embed_tokens', 'lm_head', ...attn('k_proj')], 2), { r: 2, lora_alpha: 4, target_modules: ['embed_tokens', 'lm_head', 'k_proj'] }, 3)).dir,
  };
}

function makeCase(seed: number, mode: Mode): { limits: Partial<EngineLimits>; reqs: Req[] } {
  const r = random(seed * 7919 + 17);
  const tight = mode === 'tight';
  const blockSize = r.pick([4, 8, 16]);
  const maxModelLen = tight ? r.pick([24, 40, 64]) : 160;
  const shared = Array.from({ length: r.int(0, 40) }, () => r.int(3, 511));
  const reqs: Req[] = [];
  let need = 0;
  for (let i = 0, n = tight ? r.int(3, 14) : r.int(1, 10); i < n; i++) {
    let prompt = Array.from({ length: r.pick([1, 2, 3, r.int(1, 20), r.int(20, 120)]) }, () => r.int(3, 511));
    if (r.f() < 0.3) prompt = [...shared, ...prompt].slice(0, 140);
    prompt = prompt.slice(0, maxModelLen - 1);
    const room = maxModelLen - prompt.length;
    const maxTokens = tight && r.f() < 0.4 ? room : r.int(1, Math.min(30, room));
    const params = greedy(maxTokens, {
      temperature: r.f() < 0.5 ? 0 : r.pick([0.5, 1, 1.5]), topK: r.pick([0, 0, 5, 50]), topP: r.pick([1, 1, 0.9, 0.5]),
      seed: r.int(0, 1e6), minTokens: r.f() < 0.3 ? r.int(0, maxTokens) : 0, logprobs: r.f() < 0.4 ? r.pick([0, 1, 3]) : null,
      ignoreEos: r.f() < 0.7,
    });
    need = Math.max(need, Math.ceil((prompt.length + maxTokens) / blockSize));
    reqs.push({
      id: `r${i}`, prompt, params, addAt: r.f() < 0.5 ? 0 : r.int(0, 12), abortAt: r.f() < 0.2 ? r.int(0, 25) : undefined,
      adapter: mode === 'lora' ? r.pick([undefined, ...ADAPTERS]) : undefined,
    });
  }
  const limits: Partial<EngineLimits> = {
    maxModelLen, blockSize, maxBatchSize: r.int(1, 8), maxNumBatchedTokens: r.pick([16, 24, 32, 64, 512]),
    numBlocks: tight ? need + r.int(0, 2) : r.f() < 0.6 ? need + r.int(0, 6) : 256, prefixCache: r.f() < 0.7,
    ...(mode === 'lora' ? { lora: { slots: r.int(1, 2), maxRank: 8, hostCache: 4, targets: ALL_TARGETS, sliceSteps: r.int(1, 6) } } : {}),
  };
  return { limits, reqs };
}

/** Makes each step the engine launches say "not ready" for 0-3 polls (random from `seed`). */
function slowGpu(e: ReturnType<typeof engine>, seed: number): void {
  const r = random(seed);
  const runner = (e as unknown as { runner: { launch(...a: unknown[]): Launched } }).runner;
  const launch = runner.launch.bind(runner);
  runner.launch = (...args: unknown[]) => {
    const launched = launch(...args);
    let polls = r.int(0, 3);
    return { batch: launched.batch, ready: () => polls-- <= 0 && launched.ready(), sampled: () => launched.sampled() };
  };
}

/** Steps the case to the end (at most 6000 steps); each request's outputs, and the KV blocks left. */
async function run(limits: Partial<EngineLimits>, reqs: Req[], aborts: boolean, dirs?: Record<string, string>, slowSeed?: number) {
  const e = engine(limits);
  if (slowSeed !== undefined) slowGpu(e, slowSeed);
  if (dirs) for (const [name, dir] of Object.entries(dirs)) await e.loadAdapter(name, dir);
  const got = new Map<string, Got>();
  const of = (id: string) => got.get(id) ?? got.set(id, { tokens: [], logprobs: [], aborted: false }).get(id)!;
  const lastAdd = Math.max(...reqs.map((q) => q.addAt));
  let finished = false;
  for (let step = 0; step < 6000 && !finished; step++) {
    for (const q of reqs) if (q.addAt === step) e.add({ id: q.id, promptIds: q.prompt, params: q.params, adapter: q.adapter });
    if (aborts) for (const q of reqs) if (q.abortAt === step && e.abort(q.id)) of(q.id).aborted = true;
    if (step > lastAdd && !e.hasWork()) {
      finished = true;
      break;
    }
    for (const o of e.step()) {
      const g = of(o.id);
      expect(g.finish, `${o.id}: an output after its last`).toBeUndefined();
      g.tokens.push(...o.newTokenIds);
      g.logprobs.push(...(o.logprobs ?? []));
      if (o.finishReason) [g.finish, g.stop] = [o.finishReason, o.stopTokenId];
    }
    if (dirs) await new Promise((r) => setImmediate(r));  // adapter reads finish on libuv threads
  }
  const blocksUsed = e.stats().kvBlocksUsed;
  e.close();
  return { got, blocksUsed, finished };
}

describe('random workloads, overlapped steps against synchronous ones', () => {
  const cases: [Mode, number, number][] = [['plain', 1, 40], ['tight', 5000, 40], ['lora', 1, 25]];
  it.each(cases)('%s: seeds from %i, %i cases', async (mode, first, count) => {
    const dirs = mode === 'lora' ? await adapterDirs() : undefined;
    for (let seed = first; seed < first + count; seed++) {
      const { limits, reqs } = makeCase(seed, mode);
      const ctx = `${mode} seed ${seed} ${JSON.stringify(limits)}`;
      // Stop tokens the requests really generate: from a first run without them.
      const first = await run({ ...limits, overlapSteps: false }, reqs, false, dirs);
      expect(first.finished, ctx).toBe(true);
      const r = random(seed);
      for (const q of reqs) {
        const t = first.got.get(q.id)!.tokens;
        if (t.length > 1 && r.f() < 0.5) q.params = { ...q.params, stopTokenIds: [r.pick(t)] };
      }
      const ref = await run({ ...limits, overlapSteps: false }, reqs, false, dirs);
      const engines = [['synchronous', false], ['overlapped', true], ['overlapped, slow GPU', true, seed]] as const;
      for (const [name, overlapSteps, slowSeed] of engines) {
        const res = await run({ ...limits, overlapSteps }, reqs, true, dirs, slowSeed);
        expect(res.finished, `${ctx} ${name}`).toBe(true);
        expect(res.blocksUsed, `${ctx} ${name}`).toBe(0);
        for (const q of reqs) {
          const want = ref.got.get(q.id)!, got = res.got.get(q.id);
          const at = `${ctx} ${name} ${q.id}`;
          if (got?.aborted) {
            expect(got.tokens, at).toEqual(want.tokens.slice(0, got.tokens.length));
            expect(got.logprobs, at).toEqual(want.logprobs.slice(0, got.logprobs.length));
          } else {
            expect(got && [got.tokens, got.logprobs, got.finish, got.stop], at).toEqual([want.tokens, want.logprobs, want.finish, want.stop]);
          }
        }
      }
    }
  }, 300_000);
});

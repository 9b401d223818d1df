// Adapters over HTTP: the OpenAI `model` field picks the adapter (HF + PEFT tokens), the
// model list shows them, runtime load/unload works and refuses bad adapters cleanly, and
// merge_after_steps merges an adapter running alone without changing its tokens.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { FIXTURES } from '../parity/fixture.js';
import { completionTokens, startServer, type RealServer } from './real_server.js';

interface LoraFixture {
  adapters: Record<string, { path: string; cases: { prompt_ids: number[]; output_ids: number[] }[] }>;
}
const fx = JSON.parse(readFileSync(join(FIXTURES, 'parity', 'lora-tiny-qwen3.json'), 'utf8')) as LoraFixture;
const names = Object.keys(fx.adapters);

describe('LoRA over HTTP', () => {
  let s: RealServer;
  beforeAll(async () => {
    s = await startServer((c) => {
      c.resources.lora = {
        slots: 2, max_rank: 16, host_cache: 8, slice_steps: 16, targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj', 'embed_tokens', 'lm_head'],
        adapters: names.slice(0, 3).map((n) => ({ name: n, path: join(FIXTURES, fx.adapters[n].path) })), runtime_updates: true,
      };
    });
  });
  afterAll(() => s.close());

  it('lists the base model and its adapters', async () => {
    const body = await (await fetch(`${s.url}/v1/models`)).json() as { data: { id: string; parent: string | null; root: string }[] };
    expect(body.data.map((m) => m.id)).toEqual(['tiny', ...names.slice(0, 3)]);
    expect(body.data[1]).toMatchObject({ parent: 'tiny', root: join(FIXTURES, fx.adapters[names[0]].path) });
  });

  it('serves each adapter with its HF + PEFT tokens, all at once over 2 slots', async () => {
    const reqs = names.slice(0, 3).flatMap((n) => fx.adapters[n].cases.map((c) => ({ n, c })));
    const got = await Promise.all(reqs.map(async ({ n, c }) => completionTokens(await s.post('/v1/completions', {
      model: n, prompt: c.prompt_ids, max_tokens: c.output_ids.length, temperature: 0, ignore_eos: true, logprobs: 0, return_tokens_as_token_ids: true,
    }), false)));
    reqs.forEach(({ c }, i) => expect(got[i]).toEqual(c.output_ids));
    expect(await s.metric('mstar:lora_evictions_total')).toBeGreaterThan(0);
  });

  it('loads and unloads adapters at run time', async () => {
    const name = names[3];
    const path = join(FIXTURES, fx.adapters[name].path);
    expect((await s.post('/v1/completions', { model: name, prompt: 'x' })).status).toBe(404);
    const registered = await s.metric('mstar:lora_adapters_registered');
    const load = await s.post('/v1/load_lora_adapter', { lora_name: name, lora_path: path });
    expect(load.status).toBe(200);
    // The gauge follows at once, before any request steps the engine.
    expect(await s.metric('mstar:lora_adapters_registered')).toBe(registered + 1);
    const c = fx.adapters[name].cases[0];
    const ids = await completionTokens(await s.post('/v1/completions', {
      model: name, prompt: c.prompt_ids, max_tokens: c.output_ids.length, temperature: 0, ignore_eos: true, logprobs: 0, return_tokens_as_token_ids: true,
    }), false);
    expect(ids).toEqual(c.output_ids);
    expect((await s.post('/v1/load_lora_adapter', { lora_name: name, lora_path: path })).status).toBe(400);
    expect((await s.post('/v1/unload_lora_adapter', { lora_name: name })).status).toBe(200);
    expect(await s.metric('mstar:lora_adapters_registered')).toBe(registered);
    expect((await s.post('/v1/unload_lora_adapter', { lora_name: name })).status).toBe(404);
    expect((await s.post('/v1/completions', { model: name, prompt: 'x' })).status).toBe(404);
  });

  it('refuses a bad adapter with the file and reason, changing nothing', async () => {
    const before = await (await fetch(`${s.url}/v1/models`)).json();
    const res = await s.post('/v1/load_lora_adapter', { lora_name: 'bad', lora_path: join(FIXTURES, 'adapters', 'bad', 'wrong-shape') });
    expect(res.status).toBe(400);
    const err = (await res.json()).error;
    expect(err.message).toMatch(/wrong-shape\/adapter_model\.safetensors: base_model\.model\..*: shape .* does not fit: expected/);
    expect(err.param).toBe('lora_path');
    expect(await (await fetch(`${s.url}/v1/models`)).json()).toEqual(before);
  });
});

describe('LoRA over HTTP, merge_after_steps', () => {
  const served = names.slice(0, 3);  // q/v, every linear, the MLP: none adapts the embedding or lm_head
  let s: RealServer;
  beforeAll(async () => {
    s = await startServer((c) => {
      c.resources.lora = {
        slots: 2, max_rank: 16, host_cache: 8, slice_steps: 16, merge_after_steps: 2,
        targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'],
        adapters: served.map((n) => ({ name: n, path: join(FIXTURES, fx.adapters[n].path) })), runtime_updates: false,
      };
    });
  });
  afterAll(() => s.close());

  it('an adapter alone is merged (the metric counts it); each adapter after it still gets its HF + PEFT tokens', async () => {
    expect(served.some((n) => fx.adapters[n].path.includes('embed'))).toBe(false);
    for (const n of served) {
      const c = fx.adapters[n].cases[0];
      const ids = await completionTokens(await s.post('/v1/completions', {
        model: n, prompt: c.prompt_ids, max_tokens: c.output_ids.length, temperature: 0, ignore_eos: true, logprobs: 0, return_tokens_as_token_ids: true,
      }), false);
      expect(ids).toEqual(c.output_ids);
    }
    expect(await s.metric('mstar:lora_merges_total')).toBe(served.length);
    expect(await s.metric('mstar:lora_merged_steps_total')).toBeGreaterThan(0);
  });
});

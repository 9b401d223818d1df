// What bench/prefill_step.mjs and bench/decode_step.mjs share: the model's adapter pool (SLOTS
// slots, default 2, of rank 16) with the first adapter of a `mstar synth` directory in a slot.
// The pool's targets are the adapter's own (its adapter_config.json's target_modules), as the
// serve.yaml that `mstar synth` writes beside it lists them, so that a step runs what the
// record runs' server does; TARGETS=all: every target (the server's default), the embedding
// and lm_head too. The slot count sets the widened weights' row strides (slot_weights.ts), and
// so which cuBLASLt algorithms the GEMMs get: SLOTS=1 is a serve.yaml of one adapter.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

import { ALL_TARGETS } from '../dist/lib/lora/adapter.js';
import { LoraManager } from '../dist/lib/lora/manager.js';

/** The pool of `model` with the first adapter (by name) of `adapters` in a slot: { lora, pool, slot }. */
export async function poolWithOneAdapter(model, adapters) {
  const adapter = readdirSync(adapters).sort()[0];
  const own = JSON.parse(readFileSync(join(adapters, adapter, 'adapter_config.json'), 'utf8')).target_modules;
  const targets = process.env.TARGETS === 'all' ? ALL_TARGETS : own;
  const lora = new LoraManager(model, { slots: Number(process.env.SLOTS ?? 2), maxRank: 16, hostCache: 2, targets });
  await lora.register(adapter, join(adapters, adapter));
  const slot = lora.acquire(lora.keyOf(adapter));
  if (typeof slot !== 'number') throw new Error(`${adapter}: no slot (${slot})`);
  return { lora, pool: lora.weights, slot };
}

// What bench/prefill_step.mjs and bench/decode_step.mjs share: the model's adapter pool (SLOTS
// slots, default 2, of rank 16 on every target) with the first adapter of a `mstar synth`
// directory in a slot. The slot count sets the widened weights' row strides (slot_weights.ts),
// and so which cuBLASLt algorithms the GEMMs get: SLOTS=1 is a serve.yaml of one adapter.
import { readdirSync } from 'node:fs';
import { join } from 'node:path';

import { ALL_TARGETS } from '../dist/lib/lora/adapter.js';
import { LoraManager } from '../dist/lib/lora/manager.js';

/** The pool of `model` with the first adapter (by name) of `adapters` in a slot: { lora, pool, slot }. */
export async function poolWithOneAdapter(model, adapters) {
  const lora = new LoraManager(model, { slots: Number(process.env.SLOTS ?? 2), maxRank: 16, hostCache: 2, targets: ALL_TARGETS });
  const adapter = readdirSync(adapters).sort()[0];
  await lora.register(adapter, join(adapters, adapter));
  const slot = lora.acquire(lora.keyOf(adapter));
  if (typeof slot !== 'number') throw new Error(`${adapter}: no slot (${slot})`);
  return { lora, pool: lora.weights, slot };
}

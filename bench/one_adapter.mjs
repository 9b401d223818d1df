// What bench/prefill_step.mjs and bench/decode_step.mjs share: the model's adapter pool (SLOTS
// slots, default 2, of rank 16) with the first adapter of a `mstar synth` directory in a slot.
// The pool's targets are the adapter's own (lora/pool_targets.ts: what a server listing only
// this adapter takes by default, and what the serve.yaml `mstar synth` writes lists), so that
// a step runs what the record runs' server does; TARGETS=all: every target (a server with
// runtime updates), the embedding and lm_head too. The slot count sets the widened weights'
// row strides (slot_weights.ts), and so which cuBLASLt algorithms the GEMMs get: SLOTS=1 is a
// serve.yaml of one adapter.
import { readdirSync } from 'node:fs';
import { join } from 'node:path';

import { ALL_TARGETS } from '../dist/lib/lora/adapter.js';
import { LoraManager } from '../dist/lib/lora/manager.js';
import { poolTargets } from '../dist/lib/lora/pool_targets.js';

/** The pool of `model` with the first adapter (by name) of `adapters` in a slot: { lora, pool, slot }. */
export async function poolWithOneAdapter(model, adapters) {
  const adapter = readdirSync(adapters).sort()[0];
  const path = join(adapters, adapter);
  const targets = process.env.TARGETS === 'all'
    ? ALL_TARGETS : poolTargets(model.config, { maxRank: 16, adapters: [{ name: adapter, path }] });
  const lora = new LoraManager(model, { slots: Number(process.env.SLOTS ?? 2), maxRank: 16, hostCache: 2, targets });
  await lora.register(adapter, path);
  const slot = lora.acquire(lora.keyOf(adapter));
  if (typeof slot !== 'number') throw new Error(`${adapter}: no slot (${slot})`);
  return { lora, pool: lora.weights, slot };
}

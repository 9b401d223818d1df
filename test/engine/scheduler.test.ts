// The scheduler: with overlapped steps a row after a token not read yet is speculative;
// paused sequences' KV goes before any runner is preempted.
import { describe, expect, it } from 'vitest';

import { BlockManager } from '../../lib/engine/block_manager.js';
import { Scheduler } from '../../lib/engine/scheduler.js';
import { Sequence } from '../../lib/engine/sequence.js';
import { greedy } from './helpers.js';

const limits = { maxBatchSize: 8, maxNumBatchedTokens: 64, maxModelLen: 64 };

/** Admits sequences of a 4-token prompt (one schedule), then marks each prompt computed and its first token sampled (unread or read). */
function admitted(s: Scheduler, unread: Record<string, boolean>): Sequence[] {
  const seqs = Object.keys(unread).map((id) => new Sequence(id, [1, 2, 3, 4], greedy(10), 0));
  seqs.forEach((seq) => s.add(seq));
  expect(s.schedule().map((e) => e.seq)).toEqual(seqs);
  for (const seq of seqs) {
    seq.numComputed = 4;
    if (unread[seq.id]) seq.unread = 1;
    else seq.outputIds.push(7);
  }
  return seqs;
}

describe('scheduler, overlapped steps', () => {
  it('a row after an unread token waits a step instead of taking the last block', () => {
    // Blocks of 4: each sequence holds one and needs a second for its next token; one is free.
    const blocks = new BlockManager(3, 4, false);
    const s = new Scheduler(blocks, limits);
    const [b, a] = admitted(s, { b: true, a: false });  // b first in the running list, its token not read
    expect(blocks.freeBlocks).toBe(1);
    const batch = s.schedule();
    // Without the rule b would take the block and a, the newest, would be preempted.
    expect(batch.map((e) => e.seq.id)).toEqual(['a']);
    expect(s.preemptions).toBe(0);
    expect(a.blocks).toHaveLength(2);
    expect(b.blocks).toHaveLength(1);
    expect(b.numComputed).toBe(4);
    // Once its token is read it competes like any other: nothing is free, so the newest, a, is preempted.
    b.unread = 0;
    b.outputIds.push(7);
    expect(s.schedule().map((e) => e.seq.id)).toEqual(['b']);
    expect(s.preemptions).toBe(1);
    expect(a.numComputed).toBe(0);
  });

  it('a sequence whose unread token is surely its last gets no row', () => {
    const blocks = new BlockManager(8, 4, false);
    const s = new Scheduler(blocks, limits);
    const seq = new Sequence('x', [1, 2, 3, 4], greedy(1), 0);
    s.add(seq);
    s.schedule();
    seq.numComputed = 4;
    seq.unread = 1;  // its one token (max_tokens 1), not read yet
    expect(s.schedule()).toEqual([]);
  });
});

describe('scheduler, paused sequences', () => {
  it("a runner short of blocks takes a paused sequence's KV before preempting anyone (itself included)", () => {
    // Blocks of 4, 4 in all. p's 8-token prompt (2 blocks) is computed, then p is paused
    // holding them; r's 12-token prompt runs in 4-token chunks and needs 3 blocks.
    const blocks = new BlockManager(4, 4, false);
    const s = new Scheduler(blocks, { maxBatchSize: 8, maxNumBatchedTokens: 4, maxModelLen: 64 });
    const p = new Sequence('p', [1, 2, 3, 4, 5, 6, 7, 8], greedy(4), 0);
    s.add(p);
    s.schedule();
    p.numComputed = 4;
    s.schedule();
    p.numComputed = 8;
    p.outputIds.push(9);
    expect(s.pause((seq) => seq === p)).toBe(1);
    expect(p.blocks).toHaveLength(2);
    const r = new Sequence('r', [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], greedy(4), 1);
    s.waiting.unshift(r);  // r is admitted ahead of p
    for (let chunk = 0; chunk < 3; chunk++) {
      const batch = s.schedule();
      expect(batch.map((e) => [e.seq.id, e.start, e.count])).toEqual([['r', 4 * chunk, 4]]);
      r.numComputed += 4;
    }
    // r's third block came from p, the only one it could have come from.
    expect(r.blocks).toHaveLength(3);
    expect(p.blocks).toHaveLength(0);
    expect(p.numComputed).toBe(0);
    expect(s.running).toEqual([r]);
  });
});

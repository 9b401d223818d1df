// The KV free list: least recently freed first, O(1) removal from anywhere, against a plain
// array doing the same operations; and the block manager handing blocks out in that order.
import { describe, expect, it } from 'vitest';

import { BlockManager } from '../../lib/engine/block_manager.js';
import { FreeList } from '../../lib/engine/free_list.js';
import { Sequence } from '../../lib/engine/sequence.js';
import { Rng } from '../ops/random.js';

describe('FreeList', () => {
  it('starts with every block in order, and keeps the order through removals and frees', () => {
    const f = new FreeList(5);
    expect([...f]).toEqual([0, 1, 2, 3, 4]);
    f.remove(2);
    f.remove(0);
    f.remove(4);
    expect([...f]).toEqual([1, 3]);
    expect(f.first()).toBe(1);
    f.push(4);
    f.push(0);
    expect([...f]).toEqual([1, 3, 4, 0]);
    expect(f.size).toBe(4);
    expect(f.has(2)).toBe(false);
    expect(f.has(0)).toBe(true);
    for (const b of [1, 3, 4, 0]) f.remove(b);
    expect(f.first()).toBeUndefined();
    expect(f.size).toBe(0);
    f.push(2);
    expect([...f]).toEqual([2]);
  });

  it('refuses to free a free block or take one that is not free', () => {
    const f = new FreeList(3);
    expect(() => f.push(1)).toThrow('block 1 is free already');
    f.remove(1);
    expect(() => f.remove(1)).toThrow('block 1 is not free');
  });

  it('matches an array under random frees and takes', () => {
    const n = 64, rng = new Rng(11);
    const f = new FreeList(n), ref = Array.from({ length: n }, (_, i) => i);
    for (let step = 0; step < 5000; step++) {
      const b = rng.ints(1, 0, n)[0];
      if (ref.includes(b)) {
        f.remove(b);
        ref.splice(ref.indexOf(b), 1);
      } else {
        f.push(b);
        ref.push(b);
      }
      expect(f.first()).toBe(ref[0]);
      expect(f.size).toBe(ref.length);
    }
    expect([...f]).toEqual(ref);
  });
});

describe('BlockManager', () => {
  const params = { maxTokens: 8, temperature: 0, topP: 1, topK: 0, seed: 1, stopTokenIds: [], ignoreEos: true, minTokens: 0, logprobs: null };
  const seq = (id: string) => new Sequence(id, [1, 2, 3], params, 0);

  it('hands out the least recently freed blocks first; a freed sequence\'s tail before its head', () => {
    const m = new BlockManager(8, 4, false);
    const a = seq('a'), b = seq('b'), c = seq('c');
    expect(m.reserve(a, 16)).toBe(true);
    expect(m.reserve(b, 8)).toBe(true);
    expect([a.blocks, b.blocks]).toEqual([[0, 1, 2, 3], [4, 5]]);
    m.release(a);
    expect(m.freeBlocks).toBe(6);
    expect(m.reserve(c, 12)).toBe(true);
    expect(c.blocks).toEqual([6, 7, 3]);
    expect(m.reserve(seq('d'), 16)).toBe(false);  // 3 free, 4 needed: nothing taken
    expect(m.freeBlocks).toBe(3);
  });

  it('hashes a prompt\'s blocks for the prefix lookup only up to the first miss; the rest when they are registered', () => {
    const m = new BlockManager(16, 4, true);
    const prompt = Array.from({ length: 17 }, (_, i) => i + 1);  // 4 full blocks before the last token
    const first = new Sequence('first', prompt, params, 0);
    expect(m.attachPrefix(first, '')).toBe(0);
    expect(first.blockHashes.length).toBe(1);  // block 0 missed: no later block can hit
    expect(m.reserve(first, 17)).toBe(true);
    first.numComputed = 17;
    m.registerFull(first, '');
    expect(first.blockHashes.length).toBe(4);
    // The same first 8 tokens, then others: two blocks hit, the third is the first miss.
    const second = new Sequence('second', [...prompt.slice(0, 8), ...prompt.slice(8).map((t) => t + 100)], params, 0);
    expect(m.attachPrefix(second, '')).toBe(8);
    expect(second.blocks).toEqual(first.blocks.slice(0, 2));
    expect(second.blockHashes.length).toBe(3);
  });
});

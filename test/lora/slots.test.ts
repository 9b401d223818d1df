// The slot table's turns: pins, LRU eviction of unpinned slots, and the time slice that
// hands a pinned slot to a waiting adapter.
import { describe, expect, it } from 'vitest';

import { SlotTable } from '../../lib/lora/slots.js';

describe('SlotTable', () => {
  it('pins resident adapters, evicts the least recently used unpinned one, waits when all are pinned', () => {
    const t = new SlotTable(2);
    expect(t.acquire('a', 0)).toEqual({ slot: 1, load: true });
    expect(t.acquire('b', 0)).toEqual({ slot: 2, load: true });
    expect(t.acquire('a', 1)).toEqual({ slot: 1, load: false });
    expect(t.acquire('c', 1)).toBeNull();  // both pinned
    t.release(2);
    expect(t.acquire('c', 2)).toEqual({ slot: 2, load: true });  // b was unpinned
    expect(t.evictions).toBe(1);
    expect(() => t.release(0)).not.toThrow();  // the zero adapter is never pinned
    t.release(2);
    expect(() => t.release(2)).toThrow(/released more often than acquired/);
  });

  it('hands over the slot held longest once its slice is over, and only when every slot is pinned', () => {
    const t = new SlotTable(2);
    t.acquire('a', 0);
    t.acquire('b', 3);
    expect(t.turnOver(3, 4)).toBeUndefined();  // a has held slot 1 for 3 steps of 4
    expect(t.turnOver(4, 4)).toBe(1);  // a came in first (step 0)
    t.release(2);
    expect(t.turnOver(9, 4)).toBeUndefined();  // slot 2 is unpinned: acquire takes that one
    expect(t.acquire('b', 9)).toEqual({ slot: 2, load: false });  // b's new run of use starts now
    expect(() => t.replace(1, 'c', 9, 4)).toThrow(/slot 1 still has 1 request\(s\) on a/);
    t.release(1);  // the engine paused a's requests
    t.replace(1, 'c', 9, 4);
    expect(t.acquire('a', 10)).toBeNull();  // a's queued requests cannot take it straight back
    expect(t.turnOver(10, 4)).toBeUndefined();  // b's slice (from step 9) is not over
    expect(t.acquire('c', 10)).toEqual({ slot: 1, load: false });
    expect(t.turnOver(13, 4)).toBe(2);
    expect([t.slotOf('c'), t.slotOf('a'), t.evictions]).toEqual([1, undefined, 1]);
  });

  it('a handed-over slot stays kept while its adapter\'s pins are given back unrun, until one runs (settle)', () => {
    const t = new SlotTable(1);
    t.acquire('a', 0);
    t.release(1);
    t.replace(1, 'b', 5, 4);
    expect(t.acquire('b', 5)).toEqual({ slot: 1, load: false });
    t.release(1);  // b's request found no KV blocks: the pin went back within the step
    t.settle();
    expect(t.acquire('a', 6)).toBeNull();  // still kept for b
    expect(t.acquire('b', 6)).toEqual({ slot: 1, load: false });
    t.settle();  // b's request ran this step: the reservation is over
    t.release(1);
    expect(t.acquire('a', 7)).toEqual({ slot: 1, load: true });
  });

  it('an adapter dropped from a kept slot leaves it free at once', () => {
    const t = new SlotTable(1);
    t.acquire('a', 0);
    t.release(1);
    t.replace(1, 'b', 5, 4);
    t.drop('b');  // its copy failed, or it was unloaded
    expect(t.acquire('c', 6)).toEqual({ slot: 1, load: true });
  });

  it('a slot handed over but never claimed is free again after a slice', () => {
    const t = new SlotTable(1);
    t.acquire('a', 0);
    t.release(1);
    t.replace(1, 'b', 5, 4);
    expect(t.acquire('c', 8)).toBeNull();
    expect(t.acquire('c', 9)).toEqual({ slot: 1, load: true });
  });
});

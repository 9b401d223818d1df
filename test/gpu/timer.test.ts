// addon.timer(): the GPU time between two marks in the stream (merge_after_steps 'auto' times
// decode steps, merges and unmerges with it: lib/lora/merge_costs.ts).
import { expect, it } from 'vitest';

import { addon, describeGpu } from './helpers.js';

describeGpu('cuda timer', () => {
  it('measures the work between start() and stop(), once the GPU has passed stop()', () => {
    const src = addon.zeros('f32', [4096, 4096], 'cuda'), dst = addon.zeros('f32', [4096, 4096], 'cuda');
    const t = addon.timer();
    const copies = (n: number) => {
      t.start();
      for (let i = 0; i < n; i++) addon.copyRegion(dst, src, 0, 0, 1, false);
      t.stop();
      addon.synchronize();
      expect(t.done()).toBe(true);
      return t.ms();
    };
    copies(1);  // warm up
    const one = copies(2), many = copies(40);  // a timer starts again where start() is called again
    expect(one).toBeGreaterThan(0);
    expect(many).toBeGreaterThan(5 * one);  // 128 MB copies: bandwidth-bound, ~20x the work
    expect(many).toBeLessThan(1000);
    t.dispose();
    expect(() => t.start()).toThrow(/Timer was disposed/);
    const unstopped = addon.timer();
    unstopped.start();
    addon.synchronize();
    expect(() => unstopped.ms()).toThrow(/both fences must be recorded/);
    unstopped.dispose();
    [src, dst].forEach((x) => x.dispose());
  });
});

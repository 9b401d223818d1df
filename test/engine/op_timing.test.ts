import { describe, expect, it } from 'vitest';

import { OpTimes } from '../../lib/addon/op_timing.js';

describe('OpTimes (MSTAR_PROFILE_OPS: host time of every addon call)', () => {
  it('times each function, passes its arguments and this, and leaves other members as they are', () => {
    const times = new OpTimes();
    const binding = {
      scale: 3,
      mul(x: number) { return x * this.scale; },
      busy() {
        const end = Date.now() + 20;
        while (Date.now() < end);
      },
    };
    const timed = times.wrap(binding);
    expect(timed.mul(2)).toBe(6);
    expect(timed.mul(5)).toBe(15);
    timed.busy();
    expect(timed.scale).toBe(3);
    const line = times.line('all');
    // busy, 20 ms of host time, comes first; mul twice.
    expect(line).toMatch(/^mstar profile \(addon calls, all\): busy 1 x (\d+\.\d{3}) ms .*, mul 2 x \d+\.\d{3} ms/);
    expect(Number(/busy 1 x (\d+\.\d{3})/.exec(line)![1])).toBeGreaterThanOrEqual(19);
    expect(Number(/busy 1 x [\d.]+ ms \([\d.]+ ms, longest (\d+\.\d{3})\)/.exec(line)![1])).toBeGreaterThanOrEqual(19);
  });

  it('leaves a class as it is (new and instanceof work)', () => {
    class Box {
      constructor(readonly v: number) {}
      get(): number { return this.v; }
    }
    const timed = new OpTimes().wrap({ Box });
    expect(timed.Box).toBe(Box);
    expect(new timed.Box(4)).toBeInstanceOf(Box);
  });

  it('counts a call that throws, and rethrows', () => {
    const times = new OpTimes();
    const timed = times.wrap({ fail(): void { throw new Error('bad shape'); } });
    expect(() => timed.fail()).toThrow('bad shape');
    expect(times.line('all')).toMatch(/fail 1 x /);
  });

  it('starts again from zero on reset', () => {
    const times = new OpTimes();
    const timed = times.wrap({ f() { return 1; } });
    timed.f();
    times.reset();
    expect(times.line('after')).toBe('mstar profile (addon calls, after): none');
    timed.f();
    expect(times.line('after')).toMatch(/f 1 x /);
  });

  it('says none before any call', () => {
    expect(new OpTimes().line('all')).toBe('mstar profile (addon calls, all): none');
  });
});

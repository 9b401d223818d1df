import { describe, expect, it } from 'vitest';

import { StepPhases } from '../../lib/engine/step_phases.js';

describe('StepPhases (MSTAR_PROFILE: host time of Engine.step()\'s parts)', () => {
  it('returns what the timed call returns and counts each part', () => {
    const p = new StepPhases();
    expect(p.time('schedule', () => 7)).toBe(7);
    p.time('launch', () => undefined);
    p.time('launch', () => undefined);
    const line = p.line();
    expect(line).toMatch(/schedule 1 x \d+\.\d{3} ms/);
    expect(line).toMatch(/launch 2 x \d+\.\d{3} ms/);
    expect(line).toMatch(/read 0 x - ms \(0\.0 ms\)/);
  });

  it('counts a call that throws, and rethrows', () => {
    const p = new StepPhases();
    expect(() => p.time('read', () => { throw new Error('gone'); })).toThrow('gone');
    expect(p.line()).toMatch(/read 1 x /);
  });
});

// MSTAR_PROFILE's summary lines, printed when an engine closes: each path's steps and mean
// host ms, and for eager steps also their median and the first one (which pays for the
// workspace and the GEMM plans, so a short run's mean carries it); and the engine thread's
// host time in step() by part.
import { afterEach, expect, it, vi } from 'vitest';

import { engine, greedy, prompts, runAll } from './helpers.js';

afterEach(() => {
  vi.unstubAllEnvs();
  vi.restoreAllMocks();
});

it('reports the eager steps with their median and the first one', () => {
  vi.stubEnv('MSTAR_PROFILE', '1');
  const lines: string[] = [];
  vi.spyOn(console, 'error').mockImplementation((line: unknown) => void lines.push(String(line)));
  const e = engine();
  prompts([5, 9, 3]).forEach((p, i) => e.add({ id: `${i}`, promptIds: p, params: greedy(3) }));
  runAll(e);
  e.close();
  const line = lines.find((l) => l.startsWith('mstar profile:'));
  const m = line?.match(/(\d+) eager steps \(([\d.]+) ms each, p50 ([\d.]+), first ([\d.]+)\)/);
  expect(m, line).not.toBeNull();
  const [, steps, mean, p50, first] = m!.map(Number);
  expect(steps).toBeGreaterThanOrEqual(3);  // on the CPU every step is eager
  expect([mean, p50, first].every((x) => x > 0)).toBe(true);
  const phases = lines.find((l) => l.startsWith('mstar profile (engine thread):'));
  const launches = phases?.match(/launch (\d+) x [\d.]+ ms/);
  expect(launches, phases).not.toBeNull();
  expect(Number(launches![1])).toBe(steps);  // every step launched once, each through step()
});

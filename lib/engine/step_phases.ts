// MSTAR_PROFILE's engine-thread half: host ms of Engine.step()'s parts (scheduling, with the
// adapter pool's turns; launching; reading samples), beside the model runner's per-path step
// times. A request's first token waits for whatever the engine thread does meanwhile (the
// twenty-sixth session's trace of 0.6B base requests at c = 32: the step() call launching a
// first token's step took 6-12 ms with an adapter pool, 2-10 ms without).
import { performance } from 'node:perf_hooks';

export type StepPhase = 'schedule' | 'launch' | 'read';
const PHASES: readonly StepPhase[] = ['schedule', 'launch', 'read'];

export class StepPhases {
  private readonly ms: Record<StepPhase, number> = { schedule: 0, launch: 0, read: 0 };
  private readonly calls: Record<StepPhase, number> = { schedule: 0, launch: 0, read: 0 };

  /** f's result; its host ms count towards `phase`. */
  time<T>(phase: StepPhase, f: () => T): T {
    const t0 = performance.now();
    try {
      return f();
    } finally {
      this.ms[phase] += performance.now() - t0;
      this.calls[phase]++;
    }
  }

  /** One line: each part's calls, mean and total host ms. */
  line(): string {
    const part = (p: StepPhase) => {
      const mean = this.calls[p] ? (this.ms[p] / this.calls[p]).toFixed(3) : '-';
      return `${p} ${this.calls[p]} x ${mean} ms (${this.ms[p].toFixed(1)} ms)`;
    };
    return `mstar profile (engine thread): host time in step(): ${PHASES.map(part).join(', ')}`;
  }
}

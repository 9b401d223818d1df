// MSTAR_PROFILE_OPS=1: host ms of every addon call, by function. An op that enqueues returns in
// microseconds; one that waits for the GPU (an allocation that synchronizes, a read of device
// memory) shows as milliseconds here, which is how to find a step's hidden wait. Off by
// default: the wrapper costs a closure call and two clock reads per op.
import { performance } from 'node:perf_hooks';

interface OpTime {
  calls: number;
  ms: number;
  /** The longest call: a few long waits and many short ones can make the same total. */
  maxMs: number;
}

/** Each function's calls and host ms, over the process so far. */
export class OpTimes {
  private readonly byName = new Map<string, OpTime>();

  /** binding with each function timed into these totals (other members, classes among them, as they are). */
  wrap<B extends object>(binding: B): B {
    const timed: Record<string, unknown> = {};
    for (const [name, member] of Object.entries(binding)) {
      if (typeof member !== 'function' || isClass(member)) {
        timed[name] = member;
        continue;
      }
      const f = member as (...args: unknown[]) => unknown;
      timed[name] = (...args: unknown[]) => {
        const t0 = performance.now();
        try {
          return f.apply(binding, args);
        } finally {
          this.add(name, performance.now() - t0);
        }
      };
    }
    return timed as B;
  }

  add(name: string, ms: number): void {
    const t = this.byName.get(name) ?? { calls: 0, ms: 0, maxMs: 0 };
    t.calls++;
    t.ms += ms;
    t.maxMs = Math.max(t.maxMs, ms);
    this.byName.set(name, t);
  }

  reset(): void {
    this.byName.clear();
  }

  /** One line, the functions by total host ms, largest first (the `top` largest); `when` says over what. */
  line(when: string, top = 12): string {
    const parts = [...this.byName].sort((a, b) => b[1].ms - a[1].ms).slice(0, top)
      .map(([name, t]) => `${name} ${t.calls} x ${(t.ms / t.calls).toFixed(3)} ms (${t.ms.toFixed(1)} ms, longest ${t.maxMs.toFixed(3)})`);
    return `mstar profile (addon calls, ${when}): ${parts.length ? parts.join(', ') : 'none'}`;
  }
}

/** A class (the binding's Tensor): methods on its prototype; `new` and instanceof need it as it is. */
function isClass(f: { prototype?: object }): boolean {
  return f.prototype !== undefined && Object.getOwnPropertyNames(f.prototype).length > 1;
}

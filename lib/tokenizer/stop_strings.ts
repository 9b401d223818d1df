// Stop strings over streamed text: find the earliest stop, and never release text that
// could still turn out to be the start of one.

export interface StopCheck {
  /** Text that may be sent to the client now. */
  text: string;
  /** The stop string that ended generation, or null. */
  stop: string | null;
}

export class StopStringMatcher {
  private text = '';
  private released = 0;
  private stopped = false;

  constructor(private readonly stops: readonly string[]) {}

  /**
   * Appends newly decoded text. With `check` false (still under min_tokens) a stop string
   * is not searched for, but text is held back all the same so a stop that completes with
   * the next token is still cut cleanly.
   */
  push(newText: string, check = true): StopCheck {
    if (this.stopped) return { text: '', stop: null };
    const before = this.text.length;
    this.text += newText;
    if (check) {
      const found = this.earliestStop(before);
      if (found !== null) {
        this.stopped = true;
        const out = this.text.slice(this.released, Math.max(this.released, found.index));
        this.released = Math.max(this.released, found.index);
        this.text = this.text.slice(0, this.released);
        return { text: out, stop: found.stop };
      }
    }
    const safeEnd = Math.max(this.released, this.text.length - this.heldBackLength());
    const out = this.text.slice(this.released, safeEnd);
    this.released = safeEnd;
    return { text: out, stop: null };
  }

  /** Generation ended without a stop string: the held-back tail is ordinary text after all. */
  flush(): string {
    const out = this.text.slice(this.released);
    this.released = this.text.length;
    return out;
  }

  /** Only stops that end inside the new text count: older text was already checked. */
  private earliestStop(before: number): { index: number; stop: string } | null {
    let best: { index: number; stop: string } | null = null;
    for (const stop of this.stops) {
      const index = this.text.indexOf(stop, Math.max(0, before - stop.length + 1));
      if (index >= 0 && (best === null || index < best.index)) best = { index, stop };
    }
    return best;
  }

  /** The longest tail of the text that is a proper prefix of some stop string. */
  private heldBackLength(): number {
    let held = 0;
    for (const stop of this.stops) {
      for (let k = Math.min(stop.length - 1, this.text.length); k > held; k--) {
        if (this.text.endsWith(stop.slice(0, k))) {
          held = k;
          break;
        }
      }
    }
    return held;
  }
}

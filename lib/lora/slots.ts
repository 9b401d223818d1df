// Which adapter (by its registration key) sits in which GPU slot. Slot 0 is the zero adapter and never changes hands.
// Running requests pin their slot; a free or least-recently-used unpinned slot takes a new
// adapter. When every slot is pinned, slots take turns (time slices): once an adapter has
// held its slot for a slice, a waiting adapter may take it over; the engine pauses the
// requests on it (their KV stays) and they resume at their adapter's next turn. A slot
// handed over is kept for its new adapter until its requests run in a step (a pin whose
// request then found no KV blocks does not count). So nobody waits longer than a few
// slices, and the batch never empties to hand a slot over.

export interface SlotState {
  adapter: string | null;
  pins: number;
  lastUsed: number;
  /** Engine step at which the slot's current run of use began (its adapter came in, or its first pin). */
  since: number;
  /** A slot just handed over is kept for its adapter until this step (LRU eviction skips it). */
  reservedUntil: number;
}

export type Acquired = { slot: number; load: boolean } | null;

export class SlotTable {
  readonly slots: SlotState[];
  private clock = 0;
  evictions = 0;

  constructor(count: number) {
    this.slots = Array.from({ length: count + 1 }, () => ({ adapter: null, pins: 0, lastUsed: 0, since: 0, reservedUntil: 0 }));
  }

  slotOf(adapter: string): number | undefined {
    const i = this.slots.findIndex((s, i) => i > 0 && s.adapter === adapter);
    return i > 0 ? i : undefined;
  }

  /**
   * Pins a slot holding `adapter` for one request; `load` says the adapter must be copied in
   * first. Null when the request has to wait for a slot. `step`: the engine's step count.
   */
  acquire(adapter: string, step: number): Acquired {
    const resident = this.slotOf(adapter);
    if (resident !== undefined) {
      this.pin(resident, step);
      return { slot: resident, load: false };
    }
    const free = this.pickVictim(step);
    if (free === undefined) return null;
    this.place(free, adapter, step);
    this.pin(free, step);
    return { slot: free, load: true };
  }

  release(slot: number): void {
    if (slot === 0) return;
    const s = this.slots[slot];
    if (s.pins <= 0) throw new Error(`slot ${slot} released more often than acquired`);
    s.pins--;
  }

  /** Empties an adapter's slot; the manager calls it only once no request uses the adapter. */
  drop(adapter: string): void {
    const i = this.slotOf(adapter);
    if (i === undefined) return;
    const s = this.slots[i];
    if (s.pins > 0) throw new Error(`slot ${i} still has ${s.pins} request(s) on ${adapter}`);
    Object.assign(s, { adapter: null, reservedUntil: 0 });  // a reservation for an adapter gone keeps nothing
  }

  /**
   * After a step's scheduling: the slots its requests pinned have their adapter running, so
   * their hand-over reservations are over. (A pin alone does not end one: a request that
   * pinned the slot and then found no KV blocks gave the pin back.)
   */
  settle(): void {
    for (const s of this.slots) if (s.pins > 0) s.reservedUntil = 0;
  }

  /**
   * The slot to hand to a waiting adapter when every slot is pinned: the one whose adapter
   * came in first, once it has held it for `slice` steps. Undefined while a slot is free or
   * unpinned (acquire takes those) or no turn is over yet.
   */
  turnOver(step: number, slice: number): number | undefined {
    if (this.pickVictim(step) !== undefined) return undefined;
    let oldest: number | undefined;
    for (let i = 1; i < this.slots.length; i++) {
      const s = this.slots[i];
      if (s.pins === 0) continue;  // handed over, its adapter not yet admitted
      if (oldest === undefined || s.since < this.slots[oldest].since) oldest = i;
    }
    return oldest !== undefined && step - this.slots[oldest].since >= slice ? oldest : undefined;
  }

  /**
   * Gives an unpinned slot to `adapter` (the engine paused the requests that pinned it),
   * kept for it for `slice` steps: requests of the old adapter queued ahead of its waiters
   * must not take it straight back.
   */
  replace(slot: number, adapter: string, step: number, slice: number): void {
    const s = this.slots[slot];
    if (s.pins > 0) throw new Error(`slot ${slot} still has ${s.pins} request(s) on ${s.adapter}`);
    this.place(slot, adapter, step);
    s.reservedUntil = step + slice;
  }

  get resident(): number {
    return this.slots.filter((s, i) => i > 0 && s.adapter !== null).length;
  }

  private place(i: number, adapter: string, step: number): void {
    const s = this.slots[i];
    if (s.adapter !== null) this.evictions++;
    Object.assign(s, { adapter, since: step, reservedUntil: 0 });
  }

  /** A slot's first pin starts a run of use: its time slice counts from there. */
  private pin(i: number, step: number): void {
    const s = this.slots[i];
    if (s.pins === 0) s.since = step;
    s.pins++;
    s.lastUsed = ++this.clock;
  }

  /** An empty slot, else the least recently used unpinned one that is not kept for its adapter. */
  private pickVictim(step: number): number | undefined {
    let best: number | undefined;
    for (let i = 1; i < this.slots.length; i++) {
      const s = this.slots[i];
      if (s.pins > 0 || s.reservedUntil > step) continue;
      if (s.adapter === null) return i;
      if (best === undefined || s.lastUsed < this.slots[best].lastUsed) best = i;
    }
    return best;
  }
}

// Which adapter (by its registration key) sits in which GPU slot. Slot 0 is the zero adapter and never changes hands.
// Running requests pin their slot; a free or least-recently-used unpinned slot takes a new
// adapter. When every slot is pinned, the least recently used one is marked draining: no new
// request joins it, so it empties and the oldest waiter gets it — nobody waits forever.

export interface SlotState {
  adapter: string | null;
  pins: number;
  lastUsed: number;
  draining: boolean;
}

export type Acquired = { slot: number; load: boolean } | null;

export class SlotTable {
  readonly slots: SlotState[];
  private clock = 0;
  evictions = 0;

  constructor(count: number) {
    this.slots = Array.from({ length: count + 1 }, () => ({ adapter: null, pins: 0, lastUsed: 0, draining: false }));
  }

  slotOf(adapter: string): number | undefined {
    const i = this.slots.findIndex((s, i) => i > 0 && s.adapter === adapter);
    return i > 0 ? i : undefined;
  }

  /**
   * Pins a slot holding `adapter` for one request; `load` says the adapter must be copied in
   * first. Null when the request has to wait for a slot.
   */
  acquire(adapter: string): Acquired {
    const resident = this.slotOf(adapter);
    if (resident !== undefined) {
      const s = this.slots[resident];
      // A draining slot still serves its adapter once emptied, if no older waiter took it.
      if (s.draining && s.pins > 0) return null;
      s.draining = false;
      this.pin(resident);
      return { slot: resident, load: false };
    }
    const free = this.pickVictim();
    if (free === undefined) {
      this.markDraining();
      return null;
    }
    const s = this.slots[free];
    if (s.adapter !== null) this.evictions++;
    Object.assign(s, { adapter, draining: false });
    this.pin(free);
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
    Object.assign(s, { adapter: null, draining: false });
  }

  get resident(): number {
    return this.slots.filter((s, i) => i > 0 && s.adapter !== null).length;
  }

  private pin(i: number): void {
    const s = this.slots[i];
    s.pins++;
    s.lastUsed = ++this.clock;
  }

  /** An empty slot, else the least recently used unpinned one (draining ones first). */
  private pickVictim(): number | undefined {
    let best: number | undefined;
    for (let i = 1; i < this.slots.length; i++) {
      const s = this.slots[i];
      if (s.pins > 0) continue;
      if (s.adapter === null) return i;
      const b = best === undefined ? undefined : this.slots[best];
      if (!b || (s.draining && !b.draining) || (s.draining === b.draining && s.lastUsed < b.lastUsed)) best = i;
    }
    return best;
  }

  private markDraining(): void {
    if (this.slots.some((s, i) => i > 0 && s.draining)) return;
    let lru = 0;
    for (let i = 1; i < this.slots.length; i++) {
      if (lru === 0 || this.slots[i].lastUsed < this.slots[lru].lastUsed) lru = i;
    }
    if (lru > 0) this.slots[lru].draining = true;
  }
}

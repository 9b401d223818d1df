// Runs of consecutive rows that use one adapter slot. Where a step has many rows (prefill),
// each run's shrink and expand are GEMMs on the rows it spans, x · a[slot]ᵀ and
// t · b[slot]ᵀ: the per-row kernels, made for decode's few rows, spent 100-200 µs an op at
// 4096 rows of Qwen3-0.6B (measured, bench/host_ops.mjs with SYNC=1).

export interface SlotRun {
  slot: number;
  start: number;
  count: number;
}

/** The runs of rows with an adapter (slot > 0), in order. */
export function slotRuns(slots: Int32Array): SlotRun[] {
  const runs: SlotRun[] = [];
  for (let r = 0; r < slots.length; r++) {
    const slot = slots[r];
    if (slot === 0) continue;
    const last = runs[runs.length - 1];
    if (last && last.slot === slot && last.start + last.count === r) last.count++;
    else runs.push({ slot, start: r, count: 1 });
  }
  return runs;
}

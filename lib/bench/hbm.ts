// The HBM bandwidth the c=1 roofline divides by: --hbm-gbps as given; else, where the
// server runs on a CUDA GPU, measured there before it starts (a kernel that only reads a
// buffer far larger than L2, best of several passes: what a decode step streaming its
// weights could reach); else the H200 datasheet's 4.8 TB/s, which no kernel reads at.
import type { Device } from '../config/schema.js';

/** H200 HBM3e datasheet: 4.8 TB/s. */
export const DEFAULT_HBM_GBPS = 4800;

const MEASURE_BYTES = 2 ** 31;
const MEASURE_PASSES = 5;

export interface HbmBandwidth {
  gbps: number;
  source: 'given' | 'measured' | 'datasheet';
}

/** `log` says which source was used, and why not a measurement. */
export async function hbmBandwidth(given: number | undefined, device: Device, log: (line: string) => void): Promise<HbmBandwidth> {
  if (given !== undefined) return { gbps: given, source: 'given' };
  const datasheet = (why: string): HbmBandwidth => {
    log(`roofline: ${why}; dividing by the H200 datasheet's ${DEFAULT_HBM_GBPS} GB/s (--hbm-gbps sets it)`);
    return { gbps: DEFAULT_HBM_GBPS, source: 'datasheet' };
  };
  if (device === 'cpu') return datasheet('the server runs on the cpu');
  // Loaded here, not at the top: --url runs need no addon at all.
  const { addon } = await import('../addon/index.js');
  const cuda = addon.cudaDevices();
  if (cuda.count === 0) return datasheet(`no CUDA device to measure (${cuda.error ?? 'none found'})`);
  const bytes = Math.min(MEASURE_BYTES, 2 ** Math.floor(Math.log2(addon.cudaMemInfo().free / 4)));
  const gbps = addon.cudaReadBandwidth(bytes, MEASURE_PASSES);
  log(`roofline: HBM read bandwidth measured at ${gbps.toFixed(0)} GB/s (${(bytes / 2 ** 30).toFixed(1)} GiB read, best of ${MEASURE_PASSES})`);
  return { gbps, source: 'measured' };
}

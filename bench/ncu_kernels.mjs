// Each kernel's GPU time alone, by kind, from Nsight Compute's CSV of a run (every kernel
// serialized: what a kernel costs without its neighbours; bench/decode_step.mjs's DROP=1
// gives the cost in context). On the GPU machine, e.g. one eager decode forward of Qwen3-8B at
// 8 sequences with one adapter (the first ~1200 kernels include the adapter's load):
//
//   MSTAR_GEMM_TUNE=0 SEQS=8 MODES=one REPS=1 STEPS=1 ncu --cache-control none --clock-control none \
//     --metrics gpu__time_duration.sum -c 1200 --csv --page raw node bench/decode_step.mjs DIR > k.csv
//   node bench/ncu_kernels.mjs k.csv
//
// Prints, kinds by total time: launches, mean and median µs. A kind is the kernel's name
// without namespaces, template arguments and parameters.
import { readFileSync } from 'node:fs';

const file = process.argv[2];
if (!file) throw new Error('usage: node bench/ncu_kernels.mjs NCU_CSV');

/** The fields of one CSV line (quoted fields may hold commas; "" is a quote). */
function fields(line) {
  const out = [];
  let f = '', quoted = false;
  for (let i = 0; i < line.length; i++) {
    const ch = line[i];
    if (quoted && ch === '"' && line[i + 1] === '"') f += line[++i];
    else if (ch === '"') quoted = !quoted;
    else if (ch === ',' && !quoted) out.push(f), (f = '');
    else f += ch;
  }
  return [...out, f];
}

const lines = readFileSync(file, 'utf8').split('\n');
const start = lines.findIndex((l) => l.startsWith('"ID"'));  // ncu's own messages come first
if (start < 0) throw new Error(`${file}: no ncu CSV header ("ID", ...)`);
const header = fields(lines[start]);
const nameAt = header.indexOf('Kernel Name'), timeAt = header.indexOf('gpu__time_duration.sum');
if (nameAt < 0 || timeAt < 0) throw new Error(`${file}: needs the columns Kernel Name and gpu__time_duration.sum`);
const unit = fields(lines[start + 1])[timeAt];  // the row of units: ns, us or ms
const toUs = { ns: 1e-3, us: 1, usecond: 1, ms: 1e3, msecond: 1e3, nsecond: 1e-3 }[unit] ?? 1e-3;

const kind = (name) => name.replace(/^void /, '').replace(/\((anonymous namespace|<unnamed>)\)::|<unnamed>::/g, '')
  .split(/[<(]/)[0].split('::').pop().slice(0, 48);
const byKind = new Map();
for (const line of lines.slice(start + 1)) {
  const f = fields(line);
  const us = Number(f[timeAt]?.replaceAll(',', '')) * toUs;
  if (!f[nameAt] || !Number.isFinite(us) || f[timeAt] === '') continue;
  const k = kind(f[nameAt]);
  byKind.set(k, [...(byKind.get(k) ?? []), us]);
}
const sum = (xs) => xs.reduce((a, b) => a + b, 0);
for (const [k, us] of [...byKind].sort((a, b) => sum(b[1]) - sum(a[1]))) {
  const sorted = [...us].sort((a, b) => a - b);
  console.log(`${k.padEnd(48)} ${String(us.length).padStart(5)}  mean ${(sum(us) / us.length).toFixed(2).padStart(7)}  median ${sorted[sorted.length >> 1].toFixed(2).padStart(7)} us`);
}

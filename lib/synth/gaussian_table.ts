// Normal samples as bf16 without per-element math: 65536 quantiles of N(0, std²), rounded to
// bf16 once per std. Indexing the table with 16 uniform random bits gives an exact draw from that
// 65536-point distribution (tails to ±4.3 std), which is all random weights need, at the cost of
// one table load per element.
import { toBf16Bits } from './bf16.js';

/** Φ⁻¹(p) by Acklam's rational approximation (relative error < 1.2e-9). */
export function inverseNormalCdf(p: number): number {
  const a = [-3.969683028665376e1, 2.209460984245205e2, -2.759285104469687e2, 1.38357751867269e2, -3.066479806614716e1, 2.506628277459239];
  const b = [-5.447609879822406e1, 1.615858368580409e2, -1.556989798598866e2, 6.680131188771972e1, -1.328068155288572e1];
  const c = [-7.784894002430293e-3, -3.223964580411365e-1, -2.400758277161838, -2.549732539343734, 4.374664141464968, 2.938163982698783];
  const d = [7.784695709041462e-3, 3.224671290700398e-1, 2.445134137142996, 3.754408661907416];
  const low = 0.02425;
  if (p < low) {
    const q = Math.sqrt(-2 * Math.log(p));
    return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  if (p > 1 - low) return -inverseNormalCdf(1 - p);
  const q = p - 0.5;
  const r = q * q;
  return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
    (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

const tables = new Map<number, Uint16Array>();

/** bf16 bits of N(0, std²) at the 65536 mid-quantiles; cached, since a model has few distinct stds. */
export function gaussianBf16Table(std: number): Uint16Array {
  let table = tables.get(std);
  if (table === undefined) {
    table = new Uint16Array(65536);
    for (let i = 0; i < 65536; i++) table[i] = toBf16Bits(std * inverseNormalCdf((i + 0.5) / 65536));
    tables.set(std, table);
  }
  return table;
}

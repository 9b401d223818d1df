// A decode layer's norm and the projection after it as one op (rmsNormLinear): where the
// tensor-core GEMV takes the projection, it norms the residual itself (gemvMma's RowNorm) and
// the norm costs no launch of its own; elsewhere the two ops run one by one, the norm into x.
// bench/decode_step.mjs on an H200, LoRA off, GPU ms a step, apart -> one kernel (one process,
// two machines): Qwen3-0.6B 1 row 0.684 -> 0.656 and 0.688 -> 0.660, 2 rows 0.710 -> 0.684 and
// 0.712 -> 0.685, 8 rows 0.740 -> 0.709 and 0.744 -> 0.714, 16 rows 0.867 -> 0.849 and 0.872 ->
// 0.855 (base rows alike; one adapter, whose norms add a delta, as before); Qwen3-8B equal (its
// one-row projections are the GEMV's, and from 2 rows the norm's shared memory would crowd the
// SMs: gemv_mma.cu's normFits).
// A plain projection (qkv) takes its norm only from 3 rows: below, the norm kernel launching
// the GEMV early was faster. Each fusion alone, same benchmark, GPU ms a step, both / gate_up's
// alone: Qwen3-0.6B 1 row 0.655 / 0.652, 2 rows 0.684 / 0.680, 8 rows 0.709 / 0.713, 16 rows
// 0.847 / 0.864; Llama-3.2-1B (gate_up a large weight: qkv's alone) fused / apart 1 row 0.902 /
// 0.898, 2 rows 0.886 / 0.880, 8 rows equal.
#include "common.cuh"
#include "gemv_mma.cuh"

namespace mstar::gpu {

void rmsNormLinear(DType act, void* out, const void* residual, Weights normW, float eps, Weights w, const Weights* bias,
                   int64_t n, int64_t in, int64_t outF, void* x, void* gateUp) {
  if (n == 0) return;
  const bool gated = gateUp != nullptr;
  const bool fuse = normW.dtype == DType::BF16 && (gated || n > 2);
  if (fuse && gemvMma(act, out, residual, w, bias, n, in, outF, false, {}, gated, RowNorm{normW.data, eps})) return;
  rmsNorm(act, x, residual, normW, n, in, eps, gated ? 2 * outF : outF);
  if (gated) linearSiluMul(act, out, x, w, bias, n, in, outF, gateUp);
  else linear(act, out, x, w, bias, n, in, outF);
}

}  // namespace mstar::gpu

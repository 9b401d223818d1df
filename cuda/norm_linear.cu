// A decode layer's norm and the projection after it as one op (rmsNormLinear): where the
// tensor-core GEMV takes the projection, it norms the residual itself (gemvMma's RowNorm) and
// the norm costs no launch of its own; elsewhere the two ops run one by one, the norm into x.
#include <cstdlib>

#include "common.cuh"
#include "gemv_mma.cuh"

namespace mstar::gpu {

void rmsNormLinear(DType act, void* out, const void* residual, Weights normW, float eps, Weights w, const Weights* bias,
                   int64_t n, int64_t in, int64_t outF, void* x, void* gateUp) {
  if (n == 0) return;
  const bool gated = gateUp != nullptr;
  const char* off = std::getenv("MSTAR_X_NOFUSE");  // experiment: the ops one by one
  const bool fuse = normW.dtype == DType::BF16 && !(off && *off && *off != '0');
  if (fuse && gemvMma(act, out, residual, w, bias, n, in, outF, false, {}, gated, RowNorm{normW.data, eps})) return;
  rmsNorm(act, x, residual, normW, n, in, eps, gated ? 2 * outF : outF);
  if (gated) linearSiluMul(act, out, x, w, bias, n, in, outF, gateUp);
  else linear(act, out, x, w, bias, n, in, outF);
}

}  // namespace mstar::gpu

// Row selection: out[r] = x[idx[r]] (the last token of each sequence before the logits).
#include "common.cuh"

namespace mstar::gpu {
namespace {

// One block per output row; an index outside x gives zeros rather than a fault.
template <typename T>
__global__ void gatherKernel(T* out, const T* x, int64_t xRows, const int32_t* idx, int64_t dim) {
  awaitPrior();
  int64_t r = blockIdx.x;
  int32_t i = idx[r];
  bool ok = i >= 0 && i < xRows;
  const T* src = x + (ok ? int64_t(i) : 0) * dim;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) out[r * dim + c] = ok ? src[c] : fromF<T>(0.0f);
}

}  // namespace

void gatherRows(DType act, void* out, const void* x, int64_t xRows, const int32_t* idx, int64_t m, int64_t dim) {
  if (m == 0 || dim == 0) return;
  withAct(act, [&](auto t) {
    using T = decltype(t);
    launch("gatherRows kernel", gatherKernel<T>, unsigned(m), 256, 0, static_cast<T*>(out), static_cast<const T*>(x),
        xRows, idx, dim);
  });
}

}  // namespace mstar::gpu

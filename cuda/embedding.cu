// Embedding gather: out[r] = table[ids[r]], widened or narrowed to the activation type.
#include "common.cuh"

namespace mstar::gpu {
namespace {

// One block per token; an id outside the table gives a row of zeros rather than a fault
// (the binding cannot check ids in device memory without waiting for the GPU).
template <typename T, typename W>
__global__ void embeddingKernel(T* out, const W* table, int64_t tableRows, const int32_t* ids, int64_t dim) {
  awaitPrior();
  int64_t r = blockIdx.x;
  int32_t id = ids[r];
  bool ok = id >= 0 && id < tableRows;
  const W* src = table + (ok ? int64_t(id) : 0) * dim;
  T* dst = out + r * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = fromF<T>(ok ? toF(src[i]) : 0.0f);
}

}  // namespace

void embedding(DType act, void* out, Weights table, int64_t tableRows, const int32_t* ids, int64_t n, int64_t dim) {
  if (n == 0 || dim == 0) return;
  withAct(act, [&](auto t) {
    withFloat(table.dtype, [&](auto w) {
      using T = decltype(t);
      using W = decltype(w);
      launch("embedding kernel", embeddingKernel<T, W>, unsigned(n), 256, 0, static_cast<T*>(out),
          static_cast<const W*>(table.data), tableRows, ids, dim);
    });
  });
}

}  // namespace mstar::gpu

// An adapter merged into its projection's weight: w = base + b · a, summed in f32 and rounded
// once (lib/lora/merge.ts says when the engine runs a step on merged weights). A merge is
// rare (it ends a run of steps of one adapter alone) and reads the whole weight once, so this
// kernel is plain: a block takes kRows output rows (their b entries in shared memory) and
// its threads walk the columns, each summing its column of a over the rank for all kRows.
#include "gpu_ops.h"

#include "common.cuh"

namespace mstar::gpu {
namespace {

constexpr int kRows = 8, kThreads = 256;

template <typename T>
__global__ void loraMergeKernel(T* w, int64_t ldw, const T* base, const T* b, int64_t ldb, const T* a, int64_t lda,
                                int64_t out, int64_t in, int k) {
  extern __shared__ float sb[];  // [kRows][k]: the block's rows of b
  awaitPrior();
  const int64_t o0 = int64_t(blockIdx.y) * kRows;
  for (int e = threadIdx.x; e < kRows * k; e += blockDim.x) {
    const int64_t o = o0 + e / k;
    sb[e] = o < out ? toF(b[o * ldb + e % k]) : 0.0f;
  }
  __syncthreads();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < in; i += int64_t(gridDim.x) * blockDim.x) {
    float acc[kRows] = {};
    for (int c = 0; c < k; ++c) {
      const float av = toF(a[c * lda + i]);
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[r] += sb[r * k + c] * av;
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      if (o0 + r < out) w[(o0 + r) * ldw + i] = fromF<T>(toF(base[(o0 + r) * in + i]) + acc[r]);
  }
}

}  // namespace

void loraMerge(DType dt, void* w, int64_t ldw, const void* base, const void* b, int64_t ldb, const void* a, int64_t lda,
               int64_t out, int64_t in, int64_t k) {
  if (out * in == 0) return;
  const dim3 grid(std::min<unsigned>(blocksFor(in, kThreads), 64), unsigned((out + kRows - 1) / kRows));
  withFloat(dt, [&](auto t) {
    using T = decltype(t);
    launch("loraMerge kernel", loraMergeKernel<T>, grid, kThreads, kRows * k * sizeof(float), static_cast<T*>(w), ldw,
           static_cast<const T*>(base), static_cast<const T*>(b), ldb, static_cast<const T*>(a), lda, out, in, int(k));
  });
}

}  // namespace mstar::gpu

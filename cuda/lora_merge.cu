// An adapter merged into its projection's weight: w = base + b · a, summed in f32 and rounded
// once (lib/lora/merge_policy.ts says when the engine runs a step on merged weights). A block
// takes R output rows (their b entries in shared memory) and its threads walk the columns
// in runs of V, each summing its run of a over the rank for all R rows: a is read once
// per R rows, base and w once. Qwen3-0.6B's adapted weights (0.82 GiB, bench/merge.mjs):
// 8 rows a block in single elements 4.31 ms, in runs of 8 3.08 ms (a read from L2 six times W's
// bytes at qkv's rank 48); hence 16 rows in runs of 4, the rank's loads four at a time.
#include "gpu_ops.h"

#include "common.cuh"

namespace mstar::gpu {
namespace {

constexpr int kThreads = 128;

// R output rows a block (R · k floats of b in shared memory, at most 48 KB).
template <typename T, int V, int R>
__global__ void loraMergeKernel(T* w, int64_t ldw, const T* base, const T* b, int64_t ldb, const T* a, int64_t lda,
                                int64_t out, int64_t in, int k) {
  extern __shared__ float sb[];  // [R][k]: the block's rows of b
  awaitPrior();
  const int64_t o0 = int64_t(blockIdx.y) * R;
  for (int e = threadIdx.x; e < R * k; e += blockDim.x) {
    const int64_t o = o0 + e / k;
    sb[e] = o < out ? toF(b[o * ldb + e % k]) : 0.0f;
  }
  __syncthreads();
  for (int64_t i = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) * V; i < in; i += int64_t(gridDim.x) * blockDim.x * V) {
    float acc[R][V] = {};
#pragma unroll 4
    for (int c = 0; c < k; ++c) {
      float av[V];
      loadVec<T, V>(av, a + c * lda + i);
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int v = 0; v < V; ++v) acc[r][v] += sb[r * k + c] * av[v];
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (o0 + r >= out) break;
      float bv[V];
      loadVec<T, V>(bv, base + (o0 + r) * in + i);
      T merged[V];
#pragma unroll
      for (int v = 0; v < V; ++v) merged[v] = fromF<T>(bv[v] + acc[r][v]);
      storeVec<T, V>(w + (o0 + r) * ldw + i, merged);
    }
  }
}

}  // namespace

void loraMerge(DType dt, void* w, int64_t ldw, const void* base, const void* b, int64_t ldb, const void* a, int64_t lda,
               int64_t out, int64_t in, int64_t k) {
  if (out * in == 0) return;
  const size_t elem = dtypeSize(dt);
  const bool runs = runsOf8(w, ldw, elem) && runsOf8(base, in, elem) && runsOf8(a, lda, elem);
  const int64_t units = runs ? in / 4 : in;
  // 16 rows a block where their b fits in 48 KB of shared memory (k <= 768), else 8.
  const int rows = k <= 768 ? 16 : 8;
  const dim3 grid(std::min<unsigned>(blocksFor(units, kThreads), 64), unsigned((out + rows - 1) / rows));
  withFloat(dt, [&](auto t) {
    using T = decltype(t);
    auto run = [&](auto kernel) {
      launch("loraMerge kernel", kernel, grid, kThreads, rows * k * sizeof(float), static_cast<T*>(w), ldw,
             static_cast<const T*>(base), static_cast<const T*>(b), ldb, static_cast<const T*>(a), lda, out, in, int(k));
    };
    if (runs) rows == 16 ? run(loraMergeKernel<T, 4, 16>) : run(loraMergeKernel<T, 4, 8>);
    else rows == 16 ? run(loraMergeKernel<T, 1, 16>) : run(loraMergeKernel<T, 1, 8>);
  });
}

}  // namespace mstar::gpu

// An adapter merged into its projection's weight: w = base + b · a, summed in f32 and rounded
// once (lib/lora/merge_policy.ts says when the engine runs a step on merged weights). A block
// takes R output rows (their b entries in shared memory) and its threads walk the columns
// in runs of V, each summing its run of a over the rank for all R rows: a is read once
// per R rows, base and w once. Qwen3-0.6B's adapted weights (0.82 GiB, bench/merge.mjs):
// 8 rows a block in single elements 4.31 ms, in runs of 8 3.08 ms (a read from L2 six times W's
// bytes at qkv's rank 48); hence 16 rows in runs of 4, the rank's loads four at a time: 2.72 ms,
// and Qwen3-8B's 12.94 GiB 28.8 ms (963 GB/s), k FMAs an element. In bf16, where k is 16 to 64,
// the products go to tensor cores instead (loraMergeMmaKernel): 2.42 and 22.6 ms (1231 GB/s),
// still a third of what a copy of those bytes takes (the unmerge: 0.68 and 7.1 ms).
#include "gpu_ops.h"

#include "common.cuh"
#include "mma.cuh"

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

// bf16, k = 16 KC, in a multiple of 64: a warp takes 16 rows and walks the columns 64 at a
// time, D = b[16 rows, k] · a[k, 8 columns] by mma.m16n8k16 for each 8 columns. b's rows are
// the A operand, loaded once a warp; a's 8 x 8 tiles load as rows (two neighbouring columns a
// lane) and movmatrix turns them into the column-major B operand.
constexpr int kMmaWarps = 4;

__device__ __forceinline__ uint32_t load2(const bf16* p) { return *reinterpret_cast<const uint32_t*>(p); }

template <int KC>
__global__ void loraMergeMmaKernel(bf16* w, int64_t ldw, const bf16* base, const bf16* b, int64_t ldb, const bf16* a,
                                   int64_t lda, int64_t out, int64_t in) {
  awaitPrior();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int64_t o0 = (int64_t(blockIdx.y) * kMmaWarps + warp) * 16;
  if (o0 >= out) return;
  // Rows past out read the last row (valid memory); their outputs are not stored.
  const int64_t r0 = min(o0 + g, out - 1), r8 = min(o0 + g + 8, out - 1);
  uint32_t fb[KC][4];
#pragma unroll
  for (int kc = 0; kc < KC; ++kc) {
    const bf16 *p0 = b + r0 * ldb + 16 * kc + 2 * q, *p8 = b + r8 * ldb + 16 * kc + 2 * q;
    fb[kc][0] = load2(p0);
    fb[kc][1] = load2(p8);
    fb[kc][2] = load2(p0 + 8);
    fb[kc][3] = load2(p8 + 8);
  }
  for (int64_t i0 = int64_t(blockIdx.x) * 64; i0 < in; i0 += int64_t(gridDim.x) * 64) {
    float d[8][4] = {};
#pragma unroll
    for (int kc = 0; kc < KC; ++kc) {
      const bf16* ap = a + (16 * kc + g) * lda + i0 + 2 * q;
#pragma unroll
      for (int j = 0; j < 8; ++j) mma(d[j], fb[kc], transposed8x8(load2(ap + 8 * j)), transposed8x8(load2(ap + 8 * lda + 8 * j)));
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // rows g and g + 8
      const int64_t o = o0 + g + 8 * h;
      if (o >= out) break;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int64_t col = i0 + 8 * j + 2 * q;
        const float2 loaded = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(base + o * in + col));
        *reinterpret_cast<__nv_bfloat162*>(w + o * ldw + col) =
            __floats2bfloat162_rn(loaded.x + d[j][2 * h], loaded.y + d[j][2 * h + 1]);
      }
    }
  }
}

// Whether the tensor-core kernel takes this merge: bf16, k = 16 to 64 in steps of 16, whole runs
// of 64 columns, and every pair of elements it loads or stores 4-byte aligned.
bool mergeOnMma(DType dt, const void* w, int64_t ldw, const void* base, const void* b, int64_t ldb, const void* a,
                int64_t lda, int64_t in, int64_t k) {
  const auto even = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 4 == 0; };
  return dt == DType::BF16 && k % 16 == 0 && k <= 64 && in % 64 == 0 && ldw % 2 == 0 && ldb % 2 == 0 && lda % 2 == 0 &&
         even(w) && even(base) && even(b) && even(a);
}

}  // namespace

void loraMerge(DType dt, void* w, int64_t ldw, const void* base, const void* b, int64_t ldb, const void* a, int64_t lda,
               int64_t out, int64_t in, int64_t k) {
  if (out * in == 0) return;
  if (mergeOnMma(dt, w, ldw, base, b, ldb, a, lda, in, k)) {
    const dim3 grid(unsigned(std::min<int64_t>(in / 64, 16)), unsigned((out + 16 * kMmaWarps - 1) / (16 * kMmaWarps)));
    auto run = [&](auto kernel) {
      launch("loraMerge mma kernel", kernel, grid, 32 * kMmaWarps, 0, static_cast<bf16*>(w), ldw, static_cast<const bf16*>(base),
             static_cast<const bf16*>(b), ldb, static_cast<const bf16*>(a), lda, out, in);
    };
    switch (k / 16) {
      case 1: run(loraMergeMmaKernel<1>); break;
      case 2: run(loraMergeMmaKernel<2>); break;
      case 3: run(loraMergeMmaKernel<3>); break;
      default: run(loraMergeMmaKernel<4>); break;
    }
    return;
  }
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

// An adapter merged into its projection's weight: w = base + b · a, summed in f32 and rounded
// once (lib/lora/merge_policy.ts says when the engine runs a step on merged weights). A block
// takes R output rows (their b entries in shared memory) and its threads walk the columns
// in runs of V, each summing its run of a over the rank for all R rows: a is read once
// per R rows, base and w once. Qwen3-0.6B's adapted weights (0.82 GiB, bench/merge.mjs):
// 8 rows a block in single elements 4.31 ms, in runs of 8 3.08 ms (a read from L2 six times W's
// bytes at qkv's rank 48); hence 16 rows in runs of 4, the rank's loads four at a time: 2.72 ms,
// and Qwen3-8B's 12.94 GiB 28.8 ms (963 GB/s), k FMAs an element. In bf16, where k is 16 to 64,
// the products go to tensor cores instead (loraMergeMmaKernel): 0.93 and 8.5 ms (3.3 TB/s),
// near what a copy of those bytes takes (the unmerge: 0.68 and 7.1 ms).
#include "gpu_ops.h"

#include "common.cuh"
#include "cp_async.cuh"
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

// bf16, k = 16 KC, in a multiple of 64. A block's 4 warps take 32 rows each (two 16-row
// tiles, b's rows as A fragments held for the whole kernel) and walk the columns 64 at a time.
// Each 64-column step copies a's k x 64 tile (shared by the block) and each warp's 32 x 64 of
// base into shared memory (cp.async: whole 16-byte runs, no registers held while in flight);
// D = b · a by mma.m16n8k16, a's B fragments by ldmatrix.trans; each lane adds its D pairs onto
// base in place (f32, rounded once) and the warp stores its rows in 16-byte runs; the next
// step's copies fly meanwhile. (The first tensor-core kernel loaded and stored W 4 bytes at a
// time, each instruction touching 8 rows, and re-read a from L2 for every 16 rows: 2.42 ms at
// 0.6B, 22.6 ms at 8B, a third of HBM's speed. This one: 0.93 and 8.5 ms; with one stage, 0.96
// and 9.0.)
constexpr int kMmaWarps = 4;
constexpr int kTileRows = 16, kWarpTiles = 2, kWarpRows = kTileRows * kWarpTiles;
constexpr int kCols = 64;
// A shared row is 64 columns and 8 more: 144 bytes, so 8 rows' 16-byte runs fall on distinct
// banks (ldmatrix, the 16-byte copies) and so do a D fragment's 32 pairs (rows g, columns 2q).
constexpr int kRowStride = kCols + 8;

__device__ __forceinline__ uint32_t load2(const bf16* p) { return *reinterpret_cast<const uint32_t*>(p); }

// Shared rows a stage takes: a's k rows, then each warp's rows of base (then of w).
template <int KC>
constexpr int kStageRows = 16 * KC + kMmaWarps * kWarpRows;

// Two stages: the next step's copies are in flight while this one is used.
template <int KC>
__global__ void __launch_bounds__(32 * kMmaWarps) loraMergeMmaKernel(bf16* w, int64_t ldw, const bf16* base, const bf16* b,
                                                                    int64_t ldb, const bf16* a, int64_t lda, int64_t out,
                                                                    int64_t in) {
  using Row = bf16[kRowStride];
  extern __shared__ __align__(16) unsigned char smem[];
  awaitPrior();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int64_t o0 = (int64_t(blockIdx.y) * kMmaWarps + warp) * kWarpRows;
  // Rows past out read the last row (valid memory); nothing is stored for them.
  uint32_t fb[kWarpTiles][KC][4];
#pragma unroll
  for (int t = 0; t < kWarpTiles; ++t) {
    const int64_t r0 = min(o0 + kTileRows * t + g, out - 1), r8 = min(o0 + kTileRows * t + g + 8, out - 1);
#pragma unroll
    for (int kc = 0; kc < KC; ++kc) {
      const bf16 *p0 = b + r0 * ldb + 16 * kc + 2 * q, *p8 = b + r8 * ldb + 16 * kc + 2 * q;
      fb[t][kc][0] = load2(p0);
      fb[t][kc][1] = load2(p8);
      fb[t][kc][2] = load2(p0 + 8);
      fb[t][kc][3] = load2(p8 + 8);
    }
  }
  const auto aTile = [&](int s) { return reinterpret_cast<Row*>(smem) + s * kStageRows<KC>; };
  const auto warpRows = [&](int s) { return aTile(s) + 16 * KC + warp * kWarpRows; };
  // 16-byte runs, 8 a row: the block's threads copy a's, each warp its own rows of base.
  const auto load = [&](int s, int64_t i0) {
    Row *sa = aTile(s), *rows = warpRows(s);
#pragma unroll
    for (int e = threadIdx.x; e < 16 * KC * 8; e += 32 * kMmaWarps) copy16(&sa[e / 8][e % 8 * 8], a + (e / 8) * lda + i0 + e % 8 * 8);
#pragma unroll
    for (int e = lane; e < kWarpRows * 8; e += 32) {
      const int64_t o = o0 + e / 8;
      copy16(&rows[e / 8][e % 8 * 8], base + min(o, out - 1) * in + i0 + e % 8 * 8, o < out);
    }
    commitCopies();
  };
  const int64_t stride = int64_t(gridDim.x) * kCols;
  int64_t i0 = int64_t(blockIdx.x) * kCols;
  int s = 0;
  if (i0 < in) load(0, i0);
  for (; i0 < in; i0 += stride) {
    if (i0 + stride < in) {
      load(s ^ 1, i0 + stride);
      awaitCopies<1>();
    } else {
      awaitCopies<0>();
    }
    __syncthreads();
    Row *sa = aTile(s), *rows = warpRows(s);
    float d[kWarpTiles][kCols / 8][4] = {};
#pragma unroll
    for (int kc = 0; kc < KC; ++kc) {
#pragma unroll
      for (int j = 0; j < kCols / 8; j += 2) {  // lanes 8m..8m+7: k rows 8 (m % 2) on, columns of tile j + m / 2
        uint32_t t4[4];
        loadTransposed4(t4, &sa[16 * kc + (lane / 8) % 2 * 8 + lane % 8][(j + lane / 16) * 8]);
#pragma unroll
        for (int t = 0; t < kWarpTiles; ++t) {
          mma(d[t][j], fb[t][kc], t4[0], t4[1]);
          mma(d[t][j + 1], fb[t][kc], t4[2], t4[3]);
        }
      }
    }
#pragma unroll
    for (int t = 0; t < kWarpTiles; ++t)
#pragma unroll
      for (int j = 0; j < kCols / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // rows g and g + 8
          auto* pair = reinterpret_cast<__nv_bfloat162*>(&rows[kTileRows * t + g + 8 * h][8 * j + 2 * q]);
          const float2 loaded = __bfloat1622float2(*pair);
          *pair = __floats2bfloat162_rn(loaded.x + d[t][j][2 * h], loaded.y + d[t][j][2 * h + 1]);
        }
    __syncwarp();
#pragma unroll
    for (int e = lane; e < kWarpRows * 8; e += 32) {
      const int64_t o = o0 + e / 8;
      if (o < out) *reinterpret_cast<uint4*>(w + o * ldw + i0 + e % 8 * 8) = *reinterpret_cast<const uint4*>(&rows[e / 8][e % 8 * 8]);
    }
    __syncthreads();  // every warp is done with stage s before a copy refills it
    s ^= 1;
  }
}

// Whether the tensor-core kernel takes this merge: bf16, k = 16 to 64 in steps of 16, whole runs
// of 64 columns, and every row of w, base and a starting 16-byte aligned (b's pairs: 4 bytes).
bool mergeOnMma(DType dt, const void* w, int64_t ldw, const void* base, const void* b, int64_t ldb, const void* a,
                int64_t lda, int64_t in, int64_t k) {
  const auto aligned = [](const void* p, size_t n) { return reinterpret_cast<uintptr_t>(p) % n == 0; };
  return dt == DType::BF16 && k % 16 == 0 && k <= 64 && in % kCols == 0 && ldw % 8 == 0 && lda % 8 == 0 && ldb % 2 == 0 &&
         aligned(w, 16) && aligned(base, 16) && aligned(a, 16) && aligned(b, 4);
}

}  // namespace

void loraMerge(DType dt, void* w, int64_t ldw, const void* base, const void* b, int64_t ldb, const void* a, int64_t lda,
               int64_t out, int64_t in, int64_t k) {
  if (out * in == 0) return;
  if (mergeOnMma(dt, w, ldw, base, b, ldb, a, lda, in, k)) {
    // Blocks of 128 rows; column steps shared out so that the GPU holds ~8 blocks an SM.
    const int64_t rowBlocks = (out + kWarpRows * kMmaWarps - 1) / (kWarpRows * kMmaWarps);
    const int64_t colBlocks = std::clamp<int64_t>((8 * smCount() + rowBlocks - 1) / rowBlocks, 1, in / kCols);
    const dim3 grid{unsigned(colBlocks), unsigned(rowBlocks)};
    auto run = [&](auto kc) {
      constexpr int KC = decltype(kc)::value;
      constexpr auto kernel = loraMergeMmaKernel<KC>;
      constexpr int bytes = 2 * kStageRows<KC> * kRowStride * int(sizeof(bf16));
      static const bool sized = [] {  // two stages are over the 48 KB a launch gets without asking
        check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), "loraMerge mma kernel: shared memory");
        return true;
      }();
      (void)sized;
      launch("loraMerge mma kernel", kernel, grid, 32 * kMmaWarps, size_t(bytes), static_cast<bf16*>(w), ldw,
             static_cast<const bf16*>(base), static_cast<const bf16*>(b), ldb, static_cast<const bf16*>(a), lda, out, in);
    };
    switch (k / 16) {
      case 1: run(std::integral_constant<int, 1>()); break;
      case 2: run(std::integral_constant<int, 2>()); break;
      case 3: run(std::integral_constant<int, 3>()); break;
      default: run(std::integral_constant<int, 4>()); break;
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

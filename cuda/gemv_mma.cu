// The decode GEMM on tensor cores for 2 to 4 rows of large weights. Like the GEMV it reads
// each weight once, but it multiplies on tensor cores, so a weight element's cost does not
// grow with the rows: the GEMV re-reads every row of x through L1 for each weight load.
// Graph-timed on an H200 (bench/gemv.mjs, n = 4, µs, this kernel / the GEMV / cuBLASLt):
// Qwen3-8B qkv 18.4 / 25.6 / 16.4, o 15.3 / 16.8 / 13.2, gate_up 55.8 / 77.3 / 52.6, down
// 39.1 / 43.2 / 32.1. cuBLASLt is faster alone (114 against 132 µs a layer) but does not
// let the next kernel start early, and end to end 8B decode at 4 sequences ran 6.46 -> 5.51
// ms a step by this kernel (an adapter's consumers 6.53 -> 5.48). At one row the GEMV is
// faster; on Qwen3-0.6B's weights (2-6 MB, 64-384 blocks of this kernel) the GEMV is.
//
// A block takes 16 outputs (weight rows) and all of `in`; its warps take turns along k, 32
// at a time, so that together they read 512 neighbouring bytes of each row (each warp a span
// of its own ran 20-40% slower on 8B's gate_up and down). A warp's mma.m16n8k16 takes 16
// weight rows × 16 k as A and 8 rows of x as B. A dot product sums over k in any order, so
// each lane's k are the 8 consecutive elements it loads with one 16-byte load (lanes
// 4g..4g+3: 32 consecutive k of row g), fed to the fragment's k slots the same way for W
// and for x: no shuffle, no shared memory until the warps' partial sums meet at the end.
#include "gemv_mma.cuh"

#include <algorithm>

#include "mma.cuh"

namespace mstar::gpu {
namespace {

constexpr int kWarps = 8;
constexpr int kMinRows = 2, kMaxRows = 4;  // the kernel takes up to 8
constexpr int64_t kMinWeightBytes = int64_t(32) << 20;
constexpr int kBatch = 8;  // 32-k steps a warp whose weight loads are in flight together

// 16 bytes of a weight, not kept in L1 (no other warp of the SM reads them). Volatile, as the
// mma is, so that the batch's loads stay ahead of its products in the PTX; ptxas still gives
// the kernel 32 registers, so not all of them are in flight at once (8 a batch measured as 4).
__device__ __forceinline__ uint4 loadStream(const bf16* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

__global__ __launch_bounds__(kWarps * 32) void gemvMmaKernel(bf16* out, const bf16* x, const bf16* w, int64_t ldw,
                                                             const void* bias, DType biasType, int n, int64_t in,
                                                             int64_t outF, bool accumulate, unsigned prefetchBlocks) {
  __shared__ float partial[kWarps][4][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  // The warp's k: `steps` runs of 32 elements, `stride` apart, from 32 · warp.
  const int64_t o0 = int64_t(blockIdx.x) * 16, steps = in / (32 * kWarps), stride = 32 * kWarps;
  // Rows past outF read the last row (valid memory); their outputs are not stored.
  auto row = [&](int r) { return w + min(o0 + r, outF - 1) * ldw + 32 * warp; };
  // While the kernel before runs: the block's rows towards L2 (weights: no op of a step
  // writes them), in the first prefetchBlocks blocks; the even warps' runs start lines.
  if (blockIdx.x < prefetchBlocks && warp % 2 == 0)
    for (int64_t i = lane; i < 16 * steps; i += 32) prefetchL2(row(int(i % 16)) + (i / 16) * stride);
  awaitPrior();
  const bf16* w0 = row(g) + 8 * q;
  const bf16* w8 = row(g + 8) + 8 * q;
  const bf16* xr = g < n ? x + g * in + 32 * warp + 8 * q : nullptr;
  float acc[4] = {};
  // A batch's weight loads go out before its products: the mma waits for its operands and a
  // warp issues in order, so a load after it would wait too.
  for (int64_t j0 = 0; j0 < steps; j0 += kBatch) {
    uint4 a[kBatch][2];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const bool live = j0 + u < steps;
      a[u][0] = live ? loadStream(w0 + (j0 + u) * stride) : make_uint4(0, 0, 0, 0);
      a[u][1] = live ? loadStream(w8 + (j0 + u) * stride) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const uint4 b = xr && j0 + u < steps ? *reinterpret_cast<const uint4*>(xr + (j0 + u) * stride)
                                           : make_uint4(0, 0, 0, 0);
      // k slots 2q, 2q+1 | 2q+8, 2q+9 take elements 0, 1 | 2, 3 of the lane's 8, then 4, 5 | 6, 7.
      mma(acc, {a[u][0].x, a[u][1].x, a[u][0].y, a[u][1].y}, b.x, b.y);
      mma(acc, {a[u][0].z, a[u][1].z, a[u][0].w, a[u][1].w}, b.z, b.w);
    }
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) partial[warp][j][lane] = acc[j];
  __syncthreads();
  // Each output's partial sums in warp order. D's element j of lane l is row 2 (l % 4) +
  // (j & 1) of x, output l / 4 + 8 (j >> 1) of the block's 16.
  const int l = threadIdx.x % 32, j = threadIdx.x / 32;
  if (j >= 4) return;
  const int r = 2 * (l % 4) + (j & 1);
  const int64_t o = o0 + l / 4 + 8 * (j >> 1);
  if (r >= n || o >= outF) return;
  float s = 0;
#pragma unroll
  for (int p = 0; p < kWarps; ++p) s += partial[p][j][l];
  const bf16 y = fromF<bf16>(s + (bias ? loadAny(bias, biasType, o) : 0.0f));
  bf16* dst = out + r * outF + o;
  *dst = accumulate ? fromF<bf16>(toF(*dst) + toF(y)) : y;
}

}  // namespace

bool gemvMma(DType act, void* out, const void* x, Weights w, const Weights* bias, int64_t n, int64_t in, int64_t outF,
             bool accumulate) {
  const int64_t ldw = w.ld ? w.ld : in;
  if (act != DType::BF16 || w.dtype != DType::BF16 || n < kMinRows || n > kMaxRows || in % (kWarps * 32) != 0 ||
      in * outF * int64_t(sizeof(bf16)) < kMinWeightBytes || !runsOf8(x, in, sizeof(bf16)) ||
      !runsOf8(w.data, ldw, sizeof(bf16)))
    return false;
  const unsigned grid = blocksFor(outF, 16);
  const unsigned prefetch = unsigned(std::min<int64_t>(grid, kPrefetchBytes / (16 * in * int64_t(sizeof(bf16)))));
  launch("linear tensor-core GEMV kernel", gemvMmaKernel, grid, kWarps * 32, 0, static_cast<bf16*>(out),
      static_cast<const bf16*>(x), static_cast<const bf16*>(w.data), ldw, bias ? bias->data : nullptr,
      bias ? bias->dtype : DType::F32, int(n), in, outF, accumulate, prefetch);
  return true;
}

}  // namespace mstar::gpu

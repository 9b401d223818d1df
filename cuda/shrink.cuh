// The LoRA shrink of one rank row of one row, t[k] = x · a[k], shared by loraShrink and by
// the kernels that make x (RMSNorm, SiLU·mul) and shrink it where they make it.
// xAt(i) gives element i of x as the producing op stores it (rounded to the activation
// type), so a fused shrink reads the same values a separate one would.
#pragma once
#include "common.cuh"

namespace mstar::gpu {

// Rank row k of row r into t (t[r, k] = x · a[slot, k]), by the whole block: warp w takes
// every (blockDim / 32)-th run of the row (256 elements a run where vec: a's rows allow
// 16-byte loads, 8 consecutive elements a lane), and the warps' sums meet in shared
// memory. A small batch's shrink is a few dozen such dot products: spread over whole
// blocks, each warp issues a load or two instead of walking a 1-3K row alone. Slot 0, or
// a slot outside the table, gives zeros. The whole block must call it.
template <typename T, typename A, typename F>
__device__ void shrinkRowByBlock(T* t, const A* a, int64_t numSlots, int32_t slot, int64_t r, int64_t k,
                                 int64_t rankRows, int64_t in, bool vec, F&& xAt) {
  __shared__ float partial[32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  float acc = 0;
  if (slot > 0 && slot < numSlots) {
    const A* aRow = a + (int64_t(slot) * rankRows + k) * in;
    if (vec) {
      for (int64_t i = (int64_t(warp) * 32 + lane) * 8; i < in; i += int64_t(warps) * 32 * 8) {
        float av[8];
        loadVec<A, 8>(av, aRow + i);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc += xAt(i + j) * av[j];
      }
    } else {
      for (int64_t i = int64_t(warp) * 32 + lane; i < in; i += int64_t(warps) * 32) acc += xAt(i) * toF(aRow[i]);
    }
  }
  acc = blockSum(acc, partial);
  if (threadIdx.x == 0) t[r * rankRows + k] = fromF<T>(acc);
}

inline bool rowsAligned16(const void* p, int64_t in, size_t elem) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0 && (in * int64_t(elem)) % 16 == 0;
}

}  // namespace mstar::gpu

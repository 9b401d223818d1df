// The LoRA shrink of one row as a warp computes it, t[k] = x · a[k], shared by loraShrink
// and by the kernels that make x (RMSNorm, SiLU·mul) and shrink it where they make it.
// xAt(i) gives element i of x as the producing op stores it (rounded to the activation
// type), so a fused shrink reads the same values a separate one would.
#pragma once
#include "common.cuh"

namespace mstar::gpu {

// vec: a's row allows 16-byte loads (in % 8 == 0, aligned); each lane then takes 8
// consecutive elements per step, several steps in flight.
template <typename A, typename F>
__device__ __forceinline__ float shrinkDot(const A* aRow, int64_t in, int lane, bool vec, F&& xAt) {
  float acc = 0;
  if (vec) {
#pragma unroll 4
    for (int64_t i = int64_t(lane) * 8; i < in; i += 32 * 8) {
      float av[8];
      loadVec<A, 8>(av, aRow + i);
#pragma unroll
      for (int j = 0; j < 8; ++j) acc += xAt(i + j) * av[j];
    }
  } else {
    for (int64_t i = lane; i < in; i += 32) acc += xAt(i) * toF(aRow[i]);
  }
  return warpSum(acc);
}

// Rank row k of row r into t: zeros for slot 0 or a slot outside the table. Whole warps.
template <typename T, typename A, typename F>
__device__ __forceinline__ void shrinkRow(T* t, const A* a, int64_t numSlots, int32_t slot, int64_t r, int64_t k,
                                          int64_t rankRows, int64_t in, int lane, bool vec, F&& xAt) {
  float acc = 0;
  if (slot > 0 && slot < numSlots) acc = shrinkDot(a + (int64_t(slot) * rankRows + k) * in, in, lane, vec, xAt);
  if (lane == 0) t[r * rankRows + k] = fromF<T>(acc);
}

inline bool rowsAligned16(const void* p, int64_t in, size_t elem) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0 && (in * int64_t(elem)) % 16 == 0;
}

}  // namespace mstar::gpu

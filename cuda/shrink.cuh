// The LoRA shrink of one rank row of one row, t[k] = x · a[k], shared by loraShrink and by
// the kernels that make x (RMSNorm, SiLU·mul) and shrink it where they make it.
// xAt(i) gives element i of x as the producing op stores it (rounded to the activation
// type), so a fused shrink reads the same values a separate one would.
#pragma once
#include "common.cuh"

namespace mstar::gpu {

// This lane's share of x · aRow over the runs part, part + parts, ... of the row: a run is
// 256 elements where vec (a's rows allow 16-byte loads, 8 consecutive elements a lane),
// else 32.
template <typename A, typename F>
__device__ __forceinline__ float shrinkPart(const A* aRow, int64_t in, int part, int parts, int lane, bool vec,
                                            F&& xAt) {
  float acc = 0;
  if (vec) {
#pragma unroll 2
    for (int64_t i = (int64_t(part) * 32 + lane) * 8; i < in; i += int64_t(parts) * 32 * 8) {
      float av[8];
      loadVec<A, 8>(av, aRow + i);
#pragma unroll
      for (int j = 0; j < 8; ++j) acc += xAt(i + j) * av[j];
    }
  } else {
    for (int64_t i = int64_t(part) * 32 + lane; i < in; i += int64_t(parts) * 32) acc += xAt(i) * toF(aRow[i]);
  }
  return acc;
}

// Whether rank row k of `slot` is one the slot's adapter has (rows past its rank in a slice
// are zero padding: not read).
__device__ __forceinline__ bool hasRankRow(const SlotRanks& sr, int32_t slot, int64_t k, int64_t rankRows) {
  if (!sr.ranks) return true;
  const int64_t R = rankRows / sr.slices;
  return k % R < sr.ranks[int64_t(slot) * sr.slices + k / R];
}

// Rank row k of row r into t (t[r, k] = x · a[slot, k]), by the whole block: warp w takes
// every (blockDim / 32)-th run, and the warps' sums meet in shared memory. A small batch's
// shrink is a few dozen such dot products: spread over whole blocks, each warp issues a
// load or two instead of walking a 1-12K row alone. Slot 0, a slot outside the table, or a
// padding row gives zeros. The whole block must call it.
template <typename T, typename A, typename F>
__device__ void shrinkRowByBlock(T* t, const A* a, int64_t numSlots, int32_t slot, int64_t r, int64_t k,
                                 int64_t rankRows, int64_t in, bool vec, const SlotRanks& sr, F&& xAt) {
  __shared__ float partial[32];
  float acc = 0;
  if (slot > 0 && slot < numSlots && hasRankRow(sr, slot, k, rankRows))
    acc = shrinkPart(a + (int64_t(slot) * rankRows + k) * in, in, threadIdx.x / 32, blockDim.x / 32, threadIdx.x % 32,
                     vec, xAt);
  acc = blockSum(acc, partial);
  if (threadIdx.x == 0) t[r * rankRows + k] = fromF<T>(acc);
}

// Rank row k of row r into t by one warp (lanes over the row, their sums met by shuffles):
// for batches whose rows already give many blocks. Slot 0, a slot outside the table, or a
// padding row gives zeros.
template <typename T, typename A, typename F>
__device__ void shrinkRowByWarp(T* t, const A* a, int64_t numSlots, int32_t slot, int64_t r, int64_t k,
                                int64_t rankRows, int64_t in, bool vec, const SlotRanks& sr, F&& xAt) {
  const int lane = threadIdx.x % 32;
  float acc = 0;
  if (slot > 0 && slot < numSlots && hasRankRow(sr, slot, k, rankRows))
    acc = shrinkPart(a + (int64_t(slot) * rankRows + k) * in, in, 0, 1, lane, vec, xAt);
  acc = warpSum(acc);
  if (lane == 0) t[r * rankRows + k] = fromF<T>(acc);
}

// Up to this many rows the producing kernels shrink where they make x, each of a row's
// rank-row blocks recomputing what it needs of the row, and loraShrink gives each rank row
// a block. Up to kFusedWarpRows (decode batches) they still shrink where they make x, a
// warp to a rank row, 8 to a block. Above (prefill) the rows give the parallelism: x is
// made once, then loraShrink's warps take a rank row each for a tile of rows.
constexpr int64_t kFusedShrinkRows = 16;
constexpr int64_t kFusedWarpRows = 64;
constexpr int kFusedWarps = 8;  // rank rows to a block in the warp layout

inline bool rowsAligned16(const void* p, int64_t in, size_t elem) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0 && (in * int64_t(elem)) % 16 == 0;
}

}  // namespace mstar::gpu

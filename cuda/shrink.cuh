// The LoRA shrink of a row, t[k] = x · a[k], by rank row or by a block's rank rows: the
// per-row layouts of loraShrink (lora.cu), which a decode-sized step runs where a projection
// has no A beneath its W (see LoraDelta), and lm_head's. xAt(i) gives element i of x.
#pragma once
#include "common.cuh"

namespace mstar::gpu {

// Where a shrink stores t[r, k] (rank row k of row r, for the row's slot). Narrow: t is
// [n, rankRows], the row's own slot only. Wide (slots > 0): t is the tail of a wide row
// [x | every slot's rank rows], rows ld apart: the row's value goes to its slot's columns
// and zeros to every other slot's, so that one GEMM by [W | b over every slot] adds the
// row's own adapter (the input of a projection whose weight carries b beside W).
template <typename T>
struct RankOut {
  T* t;
  int64_t ld;     // row stride of t, in elements
  int64_t slots;  // 0: narrow

  __device__ __forceinline__ void store(int64_t r, int32_t slot, int64_t k, int64_t rankRows, float v) const {
    if (!slots) {
      t[r * ld + k] = fromF<T>(v);
      return;
    }
    for (int64_t s = 0; s < slots; ++s) t[r * ld + s * rankRows + k] = fromF<T>(s == slot ? v : 0.0f);
  }
};

// Where a shrink of rows of `in` values stores t: narrow, t itself [n, rankRows]; or wide,
// the rows of t being wide rows, after their first in columns.
template <typename T>
RankOut<T> rankOutOf(void* t, bool wide, int64_t in, int64_t numSlots, int64_t rankRows) {
  if (!wide) return {static_cast<T*>(t), rankRows, 0};
  return {static_cast<T*>(t) + in, wideRowWidth(in, numSlots, rankRows), numSlots};
}

// This lane's share of x · aRow over the runs part, part + parts, ... of the row: a run is
// 256 elements where vec (a's rows allow 16-byte loads, 8 consecutive elements a lane),
// else 32. xAt(i) gives x's element i; x8(i, xv), where vecX, its elements i .. i + 7 from
// 16-byte loads (with them, Qwen3-8B's o shrink at 1 row took 2.1 us instead of 4.3).
template <typename A, typename F, typename F8>
__device__ __forceinline__ float shrinkPart(const A* aRow, int64_t in, int part, int parts, int lane, bool vec,
                                            bool vecX, F&& xAt, F8&& x8) {
  float acc = 0;
  if (vec) {
#pragma unroll 4
    for (int64_t i = (int64_t(part) * 32 + lane) * 8; i < in; i += int64_t(parts) * 32 * 8) {
      float av[8], xv[8];
      loadVec<A, 8>(av, aRow + i);
      if (vecX) {
        x8(i, xv);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) xv[j] = xAt(i + j);
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) acc += xv[j] * av[j];
    }
  } else {
    for (int64_t i = int64_t(part) * 32 + lane; i < in; i += int64_t(parts) * 32) acc += xAt(i) * toF(aRow[i]);
  }
  return acc;
}

// Rank rows k0 .. k0 + count of every slot's A (slot 0 has none) towards L2, by the threads of
// one block, before awaitPrior(): A is no op's output, and between two steps the weights
// evict it, so without this a shrink's first loads of A wait for HBM after the kernel
// before it has ended. Every slot's, since which slot a row runs is not read yet; only the
// blocks of row 0 call it (the other rows' blocks read the same rank rows).
template <typename A>
__device__ __forceinline__ void prefetchRankRows(const A* a, int64_t numSlots, int64_t rankRows, int64_t in, int64_t k0,
                                                 int64_t count) {
  count = min(count, rankRows - k0);
  const int64_t rowBytes = in * int64_t(sizeof(A));
  for (int64_t s = 1; s < numSlots; ++s)
    for (int64_t j = 0; j < count; ++j) {
      const char* row = reinterpret_cast<const char*>(a + (s * rankRows + k0 + j) * in);
      for (int64_t byte = int64_t(threadIdx.x) * 128; byte < rowBytes; byte += int64_t(blockDim.x) * 128)
        prefetchL2(row + byte);
    }
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
template <typename T, typename A, typename F, typename F8>
__device__ void shrinkRowByBlock(const RankOut<T>& t, const A* a, int64_t numSlots, int32_t slot, int64_t r, int64_t k,
                                 int64_t rankRows, int64_t in, bool vec, bool vecX, const SlotRanks& sr, F&& xAt,
                                 F8&& x8) {
  __shared__ float partial[32];
  float acc = 0;
  if (slot > 0 && slot < numSlots && hasRankRow(sr, slot, k, rankRows))
    acc = shrinkPart(a + (int64_t(slot) * rankRows + k) * in, in, threadIdx.x / 32, blockDim.x / 32, threadIdx.x % 32,
                     vec, vecX, xAt, x8);
  acc = blockSum(acc, partial);
  if (threadIdx.x == 0) t.store(r, slot, k, rankRows, acc);
}

// Rank rows k0 .. k0 + rb of row r into t (rb <= kBlockRankRows), by the whole block: each
// thread takes its runs of the row (8 elements where vec, else 1), reads its x values once
// for all the rank rows, and has the rank rows' loads of A in flight together (one round
// trip a run, where a warp walking a 2-3K row alone for each rank row waited for several).
// The warps' sums meet in shared memory. Slot 0, a slot outside the table, a padding row or a
// rank row the slot's adapter lacks gives zeros. The whole block must call it. (Loading
// A's first run before the row is made, to overlap the two, took 30 more registers a
// thread and made the kernels slower: fewer blocks fit an SM.)
constexpr int kBlockRankRows = 8;
template <typename T, typename A, typename F>
__device__ void shrinkRowsByBlock(const RankOut<T>& t, const A* a, int64_t numSlots, int32_t slot, int64_t r, int64_t k0, int rb,
                                  int64_t rankRows, int64_t in, bool vec, const SlotRanks& sr, F&& xAt) {
  constexpr int RB = kBlockRankRows;
  const A* aRow[RB];
  const bool on = slot > 0 && slot < numSlots;
#pragma unroll
  for (int j = 0; j < RB; ++j) {
    const int64_t k = k0 + j;
    aRow[j] = on && j < rb && k < rankRows && hasRankRow(sr, slot, k, rankRows) ? a + (int64_t(slot) * rankRows + k) * in
                                                                                : nullptr;
  }
  float acc[RB] = {};
  if (vec) {
#pragma unroll 2
    for (int64_t i = int64_t(threadIdx.x) * 8; i < in; i += int64_t(blockDim.x) * 8) {
      float xv[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) xv[e] = xAt(i + e);
#pragma unroll
      for (int j = 0; j < RB; ++j) {
        if (!aRow[j]) continue;
        float av[8];
        loadVec<A, 8>(av, aRow[j] + i);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[j] += xv[e] * av[e];
      }
    }
  } else {
    for (int64_t i = threadIdx.x; i < in; i += blockDim.x) {
      const float xv = xAt(i);
#pragma unroll
      for (int j = 0; j < RB; ++j)
        if (aRow[j]) acc[j] += xv * toF(aRow[j][i]);
    }
  }
  __shared__ float partial[RB][32];  // [rank row][warp]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < RB; ++j) {
    const float sum = warpSum(acc[j]);
    if (lane == 0) partial[j][warp] = sum;
  }
  __syncthreads();
  if (threadIdx.x < rb && k0 + threadIdx.x < rankRows) {
    float sum = 0;
    for (int w = 0; w < int(blockDim.x / 32); ++w) sum += partial[threadIdx.x][w];
    t.store(r, slot, k0 + threadIdx.x, rankRows, sum);
  }
}

// loraShrink's layouts. While rows × rank rows stay within twice the SMs, each rank row of
// a row gets a block (shrinkByBlock). Past that, up to kStagedShrinkRows (decode batches), a
// block takes 8, 4 or 2 rank rows of a row (shrinkRowsByBlock, stagedRankRows). Above
// (prefill), the rows give the parallelism: a warp takes a rank row for a tile of rows.
// Graph-timed (H200, rank 16; the ninth session), both per-row layouts do well up to about
// two blocks an SM and lose past it: by block, Qwen3-0.6B's qkv shrink (48 rank rows) at 4
// rows (192 blocks) 3.1 us against 3.9-4.3 by 8 rank rows, at 8 rows (384) 5.5 against 4.0,
// at 16 rows 8.0 against 4.3 (Qwen3-8B: 16.4 against 7.3).
bool fewBlocks(int64_t blocks);  // at most two an SM
inline bool shrinkByBlock(int64_t n, int64_t rankRows) { return fewBlocks(n * rankRows); }
constexpr int64_t kStagedShrinkRows = 64;
// Rank rows to a block in the staged layout: 8, or 4 or 2 where n rows of 8 would leave
// SMs without a block (measured: 16 rank rows at 32 rows were 64 blocks).
int stagedRankRows(int64_t n, int64_t rankRows);
// Blocks a row takes in the staged layout, rb rank rows each.
inline int64_t stagedBlocksPerRow(int64_t rankRows, int rb) { return std::max<int64_t>(1, (rankRows + rb - 1) / rb); }

}  // namespace mstar::gpu

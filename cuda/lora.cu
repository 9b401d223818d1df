// Segmented LoRA for a batch whose rows each run their own adapter slot (slot 0 = none),
// plus what loading a slot needs on the device: region copies, fills, comparisons.
// Grids depend only on the batch size and the weight shapes, never on the adapter mix,
// so one captured graph serves every mix: the mix lives in slotOfRow.
#include <cmath>
#include <cstring>
#include <type_traits>

#include "common.cuh"
#include "shrink.cuh"

namespace mstar::gpu {
namespace {

constexpr int kShrinkThreads = 256;
constexpr int kShrinkWarps = kShrinkThreads / 32;
constexpr int kExpandThreads = 256;
// Rows to a block of the many-row shrink and of the expand: what a block loads of A or B
// serves this many rows (8 keeps the shrink's per-row sums in registers). Only where the
// grid still has kFillBlocksPerSm blocks per SM: a decode batch's few rows need the
// blocks more than the reuse (measured: 8-row tiles cost one adapter 15% of decode
// throughput at 8 and 32 rows of Qwen3-0.6B).
constexpr int kMaxTileRows = 8;
constexpr int kFillBlocksPerSm = 2;

// The largest of 8, 2 and 1 rows to a block that still gives `blocksPerRowTile` × tiles
// enough blocks to fill the GPU.
int64_t tileRowsFor(int64_t n, int64_t blocksPerRowTile) {
  const int64_t want = int64_t(smCount()) * kFillBlocksPerSm;
  for (int64_t tile : {int64_t(kMaxTileRows), int64_t(2)})
    if ((n + tile - 1) / tile * blocksPerRowTile >= want) return tile;
  return 1;
}

// Rows r0 .. r0 + rows of x (ldx apart) into copy (ld apart), by the threads of one block: a
// wide shrink's input row joining its rank rows (the first rank-row block of a row does it).
template <typename T>
__device__ void copyRows(T* copy, int64_t ld, const T* x, int64_t ldx, int64_t r0, int64_t rows, int64_t in) {
  // 16 bytes at a time where both sides' rows allow.
  constexpr int64_t kRun = 16 / int64_t(sizeof(T));
  const bool vec = (reinterpret_cast<uintptr_t>(copy) | reinterpret_cast<uintptr_t>(x)) % 16 == 0 && in % kRun == 0 &&
                   ld % kRun == 0 && ldx % kRun == 0;
  for (int64_t r = r0; r < r0 + rows; ++r) {
    if (vec)
      for (int64_t i = threadIdx.x * kRun; i < in; i += int64_t(blockDim.x) * kRun)
        *reinterpret_cast<uint4*>(copy + r * ld + i) = *reinterpret_cast<const uint4*>(x + r * ldx + i);
    else
      for (int64_t i = threadIdx.x; i < in; i += blockDim.x) copy[r * ld + i] = x[r * ldx + i];
  }
}

// Few rows (shrinkByBlock): t[r, k] = x[r] · a[slot, k], one block per (row, rank row).
// Rows of slot 0 (or of a slot outside the table) get zeros. x's rows are ldx apart; copy
// (when set): where x's rows go (t.ld apart).
template <typename T, typename A>
__global__ void shrinkKernel(RankOut<T> t, T* copy, const T* x, int64_t ldx, const A* a, int64_t numSlots,
                             const int32_t* slotOfRow, int64_t in, int64_t rankRows, bool vec, bool vecX,
                             SlotRanks sr) {
  if (blockIdx.x == 0) prefetchRankRows(a, numSlots, rankRows, in, blockIdx.y, 1);
  awaitPrior();
  const int64_t r = blockIdx.x;  // rows on x: y and z are limited to 65535
  const T* xr = x + r * ldx;
  if (copy && blockIdx.y == 0) copyRows(copy, t.ld, x, ldx, r, 1, in);
  shrinkRowByBlock(t, a, numSlots, slotOfRow[r], r, blockIdx.y, rankRows, in, vec, vecX, sr,
                   [&](int64_t i) { return toF(xr[i]); }, [&](int64_t i, float(&xv)[8]) { loadVec<T, 8>(xv, xr + i); });
}

// Up to kStagedShrinkRows rows: t[r, k0 .. k0 + rb] by block (r, k0 / rb).
template <typename T, typename A>
__global__ void shrinkRowsKernel(RankOut<T> t, T* copy, const T* x, int64_t ldx, const A* a, int64_t numSlots,
                                 const int32_t* slotOfRow, int64_t in, int64_t rankRows, int rb, bool vec,
                                 SlotRanks sr) {
  if (blockIdx.x == 0) prefetchRankRows(a, numSlots, rankRows, in, int64_t(blockIdx.y) * rb, rb);
  awaitPrior();
  const int64_t r = blockIdx.x;
  const T* xr = x + r * ldx;
  if (copy && blockIdx.y == 0) copyRows(copy, t.ld, x, ldx, r, 1, in);
  shrinkRowsByBlock(t, a, numSlots, slotOfRow[r], r, int64_t(blockIdx.y) * rb, rb, rankRows, in, vec, sr,
                    [&](int64_t i) { return toF(xr[i]); });
}

// Many rows: warp w takes rank row k = blockIdx.y * kShrinkWarps + w for the TR rows from
// blockIdx.x * TR. A lane loads each run of a[slot, k] once for the tile's rows of that slot
// (again only where the slot changes from one row to the next), so A is read from L2 once
// per tile rather than once per row. vec: a's and x's rows allow 16-byte loads. Each lane
// sums in shrinkPart's order, so t is what a warp per row would give.
template <typename T, typename A, int TR>
__global__ void __launch_bounds__(kShrinkThreads)
    shrinkTileKernel(RankOut<T> t, T* copy, const T* x, int64_t ldx, const A* a, int64_t numSlots,
                     const int32_t* slotOfRow, int64_t n, int64_t in, int64_t rankRows, bool vec, SlotRanks sr) {
  if (blockIdx.x == 0) prefetchRankRows(a, numSlots, rankRows, in, int64_t(blockIdx.y) * kShrinkWarps, kShrinkWarps);
  awaitPrior();
  if (copy && blockIdx.y == 0)
    copyRows(copy, t.ld, x, ldx, int64_t(blockIdx.x) * TR, min(int64_t(TR), n - int64_t(blockIdx.x) * TR), in);
  const int lane = threadIdx.x % 32;
  const int64_t k = int64_t(blockIdx.y) * kShrinkWarps + threadIdx.x / 32;
  if (k >= rankRows) return;  // the whole warp, and nothing below syncs the block
  const int64_t r0 = int64_t(blockIdx.x) * TR;
  // Each row's rank row of A; null: the row gets zeros (slot off, padding row, past n).
  const A* aRow[TR];
#pragma unroll
  for (int j = 0; j < TR; ++j) {
    aRow[j] = nullptr;
    if (r0 + j < n) {
      const int32_t slot = slotOfRow[r0 + j];
      if (slot > 0 && slot < numSlots && hasRankRow(sr, slot, k, rankRows))
        aRow[j] = a + (int64_t(slot) * rankRows + k) * in;
    }
  }
  const T* xt = x + r0 * ldx;
  float acc[TR] = {};
  if (vec) {
#pragma unroll 4  // loads of several runs in flight: a 1-row tile walks a 2-3K row alone
    for (int64_t i = int64_t(lane) * 8; i < in; i += 32 * 8) {
      const A* cur = nullptr;
      float av[8] = {};
#pragma unroll
      for (int j = 0; j < TR; ++j) {
        if (!aRow[j]) continue;
        if (aRow[j] != cur) {
          cur = aRow[j];
          loadVec<A, 8>(av, cur + i);
        }
        float xv[8];
        loadVec<T, 8>(xv, xt + j * ldx + i);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[j] += xv[e] * av[e];
      }
    }
  } else {
    for (int64_t i = lane; i < in; i += 32) {
      const A* cur = nullptr;
      float av = 0;
#pragma unroll
      for (int j = 0; j < TR; ++j) {
        if (!aRow[j]) continue;
        if (aRow[j] != cur) {
          cur = aRow[j];
          av = toF(cur[i]);
        }
        acc[j] += toF(xt[j * ldx + i]) * av;
      }
    }
  }
#pragma unroll
  for (int j = 0; j < TR; ++j) {
    const float sum = warpSum(acc[j]);
    if (lane == 0 && r0 + j < n) t.store(r0 + j, slotOfRow[r0 + j], k, rankRows, sum);
  }
}

// out[r, o] += t[r, slice(o)] · b[o, slot, slice(o)]: one thread per output column, for the
// tileRows rows from blockIdx.x * tileRows (rows on x: y is limited to 65535); b[slot, o]
// comes from L1 after the tile's first row of that slot. A row's loads (its slot, t's
// slice, b's row, out) wait for nothing of another thread: staging t in shared memory
// first made every expand two L2 round trips and a block sync long instead of one.
// slices say which rank block each column reads. Columns
// outside every slice get nothing. With delta: out[r, o] += (delta[r, o] + that), the
// inner sum rounded first (a projection plus its adapter, then the residual taking it),
// for every row, slot 0 included. vec: t's and b's rank rows allow 16-byte loads.
template <typename T, typename W>
__global__ void __launch_bounds__(kExpandThreads)
    expandKernel(T* __restrict__ out, const T* __restrict__ delta, const T* __restrict__ t, const W* __restrict__ b,
                 int64_t numSlots, const int32_t* slotOfRow, SliceStarts slices, int64_t n, int64_t outF,
                 int64_t rank, int tileRows, bool vec, SlotRanks sr) {
  awaitPrior();
  const int64_t o = blockIdx.y * int64_t(blockDim.x) + threadIdx.x;
  if (o >= outF) return;
  const int s = slices.of(o), numSlices = slices.count;
  const int64_t r0 = int64_t(blockIdx.x) * tileRows, r1 = min(n, r0 + tileRows), width = numSlices * rank;
  for (int64_t r = r0; r < r1; ++r) {
    const int32_t slot = slotOfRow[r];
    const bool adapted = slot > 0 && slot < numSlots && s < numSlices;
    if (!adapted && !delta) continue;
    float acc = 0;
    if (adapted) {
      const W* br = b + ((o * numSlots + slot) * numSlices + s) * rank;  // b: [outF, slots, slices * rank]
      const T* tr = t + r * width + int64_t(s) * rank;
      const int64_t used = sr.ranks ? min(rank, int64_t(sr.ranks[int64_t(slot) * sr.slices + s])) : rank;
      int64_t k = 0;  // in k's order either way
      if (vec) {
        for (; k + 8 <= used; k += 8) {
          float tv[8], bv[8];
          loadVec<T, 8>(tv, tr + k);
          loadVec<W, 8>(bv, br + k);
#pragma unroll
          for (int e = 0; e < 8; ++e) acc += tv[e] * bv[e];
        }
      }
      for (; k < used; ++k) acc += toF(tr[k]) * toF(br[k]);
    }
    T* dst = out + r * outF + o;
    if (delta) *dst = fromF<T>(toF(*dst) + toF(fromF<T>(toF(delta[r * outF + o]) + acc)));
    else *dst = fromF<T>(toF(*dst) + acc);
  }
}

// wide row r = x[r], then s[r] (every slot's `width` columns) keeping only its slot's (slot 0
// or out of range: none). A block a row at a time, V elements a thread a pass: 16 bytes where
// every row's parts start on 16-byte boundaries (a unit then lies in x or in one slot's
// columns), else 1. Per element, 64-bit division and 2-byte accesses ran Qwen3-8B's 4096-row
// join of x at ~0.3 TB/s, 12 ms of a 116 ms prefill.
template <typename T, int V>
__global__ void joinKernel(T* __restrict__ wide, const T* __restrict__ x, const T* __restrict__ s,
                           const int32_t* slotOfRow, int n, int in, int width, int ld) {
  using Unit = std::conditional_t<V == 1, T, uint4>;
  awaitPrior();
  const int cols = ld - in;  // s's rows: every slot's columns
  for (int r = blockIdx.x; r < n; r += gridDim.x) {
    const int slot = slotOfRow[r];
    const int64_t lo = slot > 0 ? in + int64_t(slot) * width : ld;  // the row's own slot's columns: [lo, lo + width)
    T* w = wide + int64_t(r) * ld;
    const T* xr = x + int64_t(r) * in;
    const T* sr = s + int64_t(r) * cols;
    for (int c = threadIdx.x * V; c < ld; c += blockDim.x * V) {
      Unit u{};
      if (c < in) u = *reinterpret_cast<const Unit*>(xr + c);
      else if (c >= lo && c < lo + width) u = *reinterpret_cast<const Unit*>(sr + (c - in));
      *reinterpret_cast<Unit*>(w + c) = u;
    }
  }
}

__global__ void copyRegionKernel(void* dst, DType dt, int64_t dstCols, const void* src, DType st, int64_t rows,
                                 int64_t cols, int64_t srcLd, int64_t rowOffset, int64_t colOffset, float scale,
                                 bool transpose) {
  awaitPrior();
  int64_t outRows = transpose ? cols : rows, outCols = transpose ? rows : cols;
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < outRows * outCols;
       j += int64_t(gridDim.x) * blockDim.x) {
    int64_t i = j / outCols, c = j % outCols;
    float v = scale * loadAny(src, st, transpose ? c * srcLd + i : i * srcLd + c);
    storeAny(dst, dt, (rowOffset + i) * dstCols + colOffset + c, v);
  }
}

// copyRegion's plain copy of whole 16-byte units (unmerging an adapter puts W back so: 0.82
// GiB at Qwen3-0.6B took the general kernel 1.69 ms, an element at a time with divisions, and
// cudaMemcpy2DAsync 1.37 ms): a block a row, strides and widths in units.
__global__ void copyRowsKernel(uint4* dst, int64_t dstLd, const uint4* src, int64_t srcLd, int64_t rows, int64_t units) {
  awaitPrior();
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x)
    for (int64_t u = threadIdx.x; u < units; u += blockDim.x) dst[r * dstLd + u] = src[r * srcLd + u];
}

__global__ void fillKernel(void* t, DType dt, int64_t n, float value) {
  awaitPrior();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    storeAny(t, dt, i, value);
}

// The largest |a - b| in f64, as the CPU computes it. Non-negative doubles order like
// their bit patterns, so an integer atomicMax finds it; a NaN sets the flag instead.
__global__ void maxAbsDiffKernel(const void* a, DType at, const void* b, DType bt, int64_t n,
                                 unsigned long long* result) {
  awaitPrior();
  double m = 0;
  bool nan = false;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    double d = fabs(double(loadAny(a, at, i)) - double(loadAny(b, bt, i)));
    if (isnan(d)) nan = true;
    else m = fmax(m, d);
  }
  if (nan) atomicOr(result + 1, 1ull);
  atomicMax(result, static_cast<unsigned long long>(__double_as_longlong(m)));
}

unsigned strideGrid(int64_t n) { return unsigned(std::max<int64_t>(1, std::min<int64_t>(blocksFor(n, 256), smCount() * 8))); }

}  // namespace

bool fewBlocks(int64_t blocks) { return blocks <= 2 * int64_t(smCount()); }

int stagedRankRows(int64_t n, int64_t rankRows) {
  for (int rb : {kBlockRankRows, kBlockRankRows / 2})
    if (n * stagedBlocksPerRow(rankRows, rb) >= smCount()) return rb;
  return kBlockRankRows / 4;
}

void loraShrink(DType act, void* t, const void* x, Weights a, int64_t numSlots, const int32_t* slotOfRow, int64_t n,
                int64_t in, int64_t rankRows, SlotRanks ranks, bool wide) {
  if (n == 0 || rankRows == 0) return;
  withAct(act, [&](auto tt) {
    withFloat(a.dtype, [&](auto wt) {
      using T = decltype(tt);
      using W = decltype(wt);
      // Wide: t's rows are wide rows; x joins them there unless it is there already.
      const RankOut<T> to = rankOutOf<T>(t, wide, in, numSlots, rankRows);
      const bool inPlace = wide && x == t;
      T* copy = wide && !inPlace ? static_cast<T*>(t) : nullptr;
      const int64_t ldx = inPlace ? to.ld : in;
      const T* xp = static_cast<const T*>(x);
      const W* ap = static_cast<const W*>(a.data);
      const bool vecA = runsOf8(a.data, in, sizeof(W)), vec = vecA && runsOf8(x, ldx, sizeof(T));
      // Braces: with parentheses these lines would declare functions.
      if (shrinkByBlock(n, rankRows)) {
        const dim3 grid{unsigned(n), unsigned(rankRows)};
        launch("loraShrink kernel", shrinkKernel<T, W>, grid, kShrinkThreads, 0, to, copy, xp, ldx, ap, numSlots,
            slotOfRow, in, rankRows, vecA, vec, ranks);
      } else if (n <= kStagedShrinkRows) {
        const int rb = stagedRankRows(n, rankRows);
        const dim3 grid{unsigned(n), unsigned(stagedBlocksPerRow(rankRows, rb))};
        launch("loraShrink kernel", shrinkRowsKernel<T, W>, grid, kShrinkThreads, 0, to, copy, xp, ldx, ap, numSlots,
            slotOfRow, in, rankRows, rb, vec, ranks);
      } else {
        const int64_t groups = (rankRows + kShrinkWarps - 1) / kShrinkWarps, tile = tileRowsFor(n, groups);
        const dim3 grid{unsigned((n + tile - 1) / tile), unsigned(groups)};
        auto tiled = [&](auto kernel) {
          launch("loraShrink tile kernel", kernel, grid, kShrinkThreads, 0, to, copy, xp, ldx, ap, numSlots, slotOfRow,
              n, in, rankRows, vec, ranks);
        };
        if (tile == kMaxTileRows) tiled(shrinkTileKernel<T, W, kMaxTileRows>);
        else if (tile == 2) tiled(shrinkTileKernel<T, W, 2>);
        else tiled(shrinkTileKernel<T, W, 1>);
      }
    });
  });
}

void loraExpandAdd(DType act, void* out, const void* delta, const void* t, Weights b, int64_t numSlots,
                   const int32_t* slotOfRow, const SliceStarts& slices, int64_t n, int64_t outF, int64_t rank,
                   SlotRanks ranks) {
  if (n == 0 || outF == 0) return;
  const int64_t tileRows = tileRowsFor(n, blocksFor(outF, kExpandThreads));
  const dim3 grid{unsigned((n + tileRows - 1) / tileRows), blocksFor(outF, kExpandThreads)};
  withAct(act, [&](auto tt) {
    withFloat(b.dtype, [&](auto wt) {
      using T = decltype(tt);
      using W = decltype(wt);
      const bool vec = runsOf8(b.data, rank, sizeof(W)) && runsOf8(t, rank, sizeof(T));
      launch("loraExpand kernel", expandKernel<T, W>, grid, kExpandThreads, 0, static_cast<T*>(out),
          static_cast<const T*>(delta), static_cast<const T*>(t), static_cast<const W*>(b.data), numSlots, slotOfRow,
          slices, n, outF, rank, int(tileRows), vec, ranks);
    });
  });
}

void loraJoin(DType act, void* wide, const void* x, const void* s, const int32_t* slotOfRow, int64_t numSlots,
              int64_t n, int64_t in, int64_t width) {
  const int64_t ld = wideRowWidth(in, numSlots, width);
  if (n * ld == 0) return;
  const unsigned grid = unsigned(std::min<int64_t>(n, smCount() * 8));
  withAct(act, [&](auto tt) {
    using T = decltype(tt);
    constexpr int V = 16 / sizeof(T);
    const bool units = in % V == 0 && width % V == 0 && (reinterpret_cast<uintptr_t>(wide) | reinterpret_cast<uintptr_t>(x) |
                                                         reinterpret_cast<uintptr_t>(s)) % 16 == 0;
    auto run = [&](auto kernel) {
      launch("loraJoin kernel", kernel, grid, 128, 0, static_cast<T*>(wide), static_cast<const T*>(x),
          static_cast<const T*>(s), slotOfRow, int(n), int(in), int(width), int(ld));
    };
    if (units) run(joinKernel<T, V>);
    else run(joinKernel<T, 1>);
  });
}

void loraExpand(DType act, void* out, const void* t, Weights b, int64_t numSlots, const int32_t* slotOfRow,
                const SliceStarts& slices, int64_t n, int64_t outF, int64_t rank, SlotRanks ranks) {
  loraExpandAdd(act, out, nullptr, t, b, numSlots, slotOfRow, slices, n, outF, rank, ranks);
}

void copyRegion(void* dst, DType dt, int64_t dstCols, const void* src, DType st, int64_t rows, int64_t cols,
                int64_t rowOffset, int64_t colOffset, float scale, bool transpose, int64_t srcLd) {
  if (rows * cols == 0) return;
  const size_t elem = dtypeSize(dt);
  const int64_t ld = srcLd ? srcLd : cols;
  void* at = static_cast<char*>(dst) + (rowOffset * dstCols + colOffset) * elem;
  if (dt == st && scale == 1.0f && !transpose && runsOf8(at, dstCols, elem) && runsOf8(src, ld, elem) && cols % 8 == 0) {
    launch("copyRows kernel", copyRowsKernel, unsigned(std::min<int64_t>(rows, 65535)), 128, 0, static_cast<uint4*>(at),
           dstCols * int64_t(elem) / 16, static_cast<const uint4*>(src), ld * int64_t(elem) / 16, rows, cols * int64_t(elem) / 16);
    return;
  }
  launch("copyRegion kernel", copyRegionKernel, strideGrid(rows * cols), 256, 0, dst, dt, dstCols, src, st, rows, cols,
      srcLd ? srcLd : cols, rowOffset, colOffset, scale, transpose);
}

void fill(void* t, DType dt, int64_t n, float value) {
  if (n == 0) return;
  launch("fill kernel", fillKernel, strideGrid(n), 256, 0, t, dt, n, value);
}

double maxAbsDiff(const void* a, DType at, const void* b, DType bt, int64_t n) {
  if (n == 0) return 0;
  Scratch result(2 * sizeof(unsigned long long), "maxAbsDiff scratch");
  check(cudaMemsetAsync(result.as<void>(), 0, 2 * sizeof(unsigned long long), stream()), "cudaMemsetAsync");
  launch("maxAbsDiff kernel", maxAbsDiffKernel, strideGrid(n), 256, 0, a, at, b, bt, n,
      result.as<unsigned long long>());
  unsigned long long host[2];
  copyToHost(host, result.as<void>(), sizeof host);
  if (host[1]) return NAN;
  double m;
  std::memcpy(&m, &host[0], sizeof m);
  return m;
}

}  // namespace mstar::gpu

// Segmented LoRA for a batch whose rows each run their own adapter slot (slot 0 = none),
// plus what loading a slot needs on the device: region copies, fills, comparisons.
// Grids depend only on the batch size and the weight shapes, never on the adapter mix,
// so one captured graph serves every mix: the mix lives in slotOfRow.
#include <cmath>
#include <cstring>

#include "common.cuh"
#include "shrink.cuh"

namespace mstar::gpu {
namespace {

constexpr int kShrinkThreads = 256;

// t[r, k] = x[r] · a[slot, k]. byBlock: one block per (row, rank row); else one warp per
// (row, rank row), 8 rank rows to a block. Rows of slot 0 (or of a slot outside the table)
// get zeros.
template <typename T, typename A>
__global__ void shrinkKernel(T* t, const T* x, const A* a, int64_t numSlots, const int32_t* slotOfRow, int64_t in,
                             int64_t rankRows, bool vec, bool byBlock, SlotRanks sr) {
  const int64_t r = blockIdx.x;  // rows on x: y and z are limited to 65535
  const T* xr = x + r * in;
  auto xAt = [&](int64_t i) { return toF(xr[i]); };
  if (byBlock) return shrinkRowByBlock(t, a, numSlots, slotOfRow[r], r, blockIdx.y, rankRows, in, vec, sr, xAt);
  const int64_t k = int64_t(blockIdx.y) * (blockDim.x / 32) + threadIdx.x / 32;
  if (k < rankRows) shrinkRowByWarp(t, a, numSlots, slotOfRow[r], r, k, rankRows, in, vec, sr, xAt);
}

// out[r, o] += t[r, slice(o)] · b[slot, o]: one thread per (row, output column). The
// row's t is staged in shared memory; sliceStarts (numSlices + 1 entries) say which
// rank block each column reads. Columns outside every slice get nothing. With delta:
// out[r, o] += (delta[r, o] + that), the inner sum rounded first (a projection plus its
// adapter, then the residual taking it), for every row, slot 0 included.
template <typename T, typename W>
__global__ void expandKernel(T* out, const T* delta, const T* t, const W* b, int64_t numSlots, const int32_t* slotOfRow,
                             const int32_t* sliceStarts, int numSlices, int64_t outF, int64_t rank, SlotRanks sr) {
  extern __shared__ float tRow[];
  const int64_t r = blockIdx.x;
  const int32_t slot = slotOfRow[r];
  const bool on = slot > 0 && slot < numSlots;
  if (!on && !delta) return;  // uniform over the block
  if (on)
    for (int64_t i = threadIdx.x; i < numSlices * rank; i += blockDim.x) tRow[i] = toF(t[r * numSlices * rank + i]);
  __syncthreads();
  const int64_t o = blockIdx.y * int64_t(blockDim.x) + threadIdx.x;
  if (o >= outF) return;
  int s = 0;
  while (s < numSlices && !(sliceStarts[s] <= o && o < sliceStarts[s + 1])) ++s;
  float acc = 0;
  if (on && s < numSlices) {
    const W* br = b + (int64_t(slot) * outF + o) * rank;
    const float* ts = tRow + int64_t(s) * rank;
    const int64_t used = sr.ranks ? min(rank, int64_t(sr.ranks[int64_t(slot) * sr.slices + s])) : rank;
    for (int64_t k = 0; k < used; ++k) acc += ts[k] * toF(br[k]);
  }
  T* dst = out + r * outF + o;
  if (delta) *dst = fromF<T>(toF(*dst) + toF(fromF<T>(toF(delta[r * outF + o]) + acc)));
  else if (s < numSlices) *dst = fromF<T>(toF(*dst) + acc);
}

__global__ void copyRegionKernel(void* dst, DType dt, int64_t dstCols, const void* src, DType st, int64_t rows,
                                 int64_t cols, int64_t rowOffset, int64_t colOffset, float scale, bool transpose) {
  int64_t outRows = transpose ? cols : rows, outCols = transpose ? rows : cols;
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < outRows * outCols;
       j += int64_t(gridDim.x) * blockDim.x) {
    int64_t i = j / outCols, c = j % outCols;
    float v = scale * loadAny(src, st, transpose ? c * cols + i : i * cols + c);
    storeAny(dst, dt, (rowOffset + i) * dstCols + colOffset + c, v);
  }
}

__global__ void fillKernel(void* t, DType dt, int64_t n, float value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    storeAny(t, dt, i, value);
}

// The largest |a - b| in f64, as the CPU computes it. Non-negative doubles order like
// their bit patterns, so an integer atomicMax finds it; a NaN sets the flag instead.
__global__ void maxAbsDiffKernel(const void* a, DType at, const void* b, DType bt, int64_t n,
                                 unsigned long long* result) {
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

void loraShrink(DType act, void* t, const void* x, Weights a, int64_t numSlots, const int32_t* slotOfRow, int64_t n,
                int64_t in, int64_t rankRows, SlotRanks ranks) {
  if (n == 0 || rankRows == 0) return;
  const bool byBlock = n <= kFusedShrinkRows;
  // Braces: with parentheses this line would declare a function.
  const dim3 grid{unsigned(n), unsigned(byBlock ? rankRows : (rankRows + kShrinkThreads / 32 - 1) / (kShrinkThreads / 32))};
  withAct(act, [&](auto tt) {
    withFloat(a.dtype, [&](auto wt) {
      using T = decltype(tt);
      using W = decltype(wt);
      const bool vec = rowsAligned16(a.data, in, sizeof(W));
      shrinkKernel<T, W><<<grid, kShrinkThreads, 0, stream()>>>(static_cast<T*>(t), static_cast<const T*>(x),
                                                                      static_cast<const W*>(a.data), numSlots, slotOfRow,
                                                                      in, rankRows, vec, byBlock, ranks);
    });
  });
  checkLaunch("loraShrink kernel");
}

void loraExpandAdd(DType act, void* out, const void* delta, const void* t, Weights b, int64_t numSlots,
                   const int32_t* slotOfRow, const int32_t* sliceStarts, int64_t numSlices, int64_t n, int64_t outF,
                   int64_t rank, SlotRanks ranks) {
  if (n == 0 || outF == 0) return;
  size_t shared = size_t(numSlices * rank) * sizeof(float);
  if (shared > 48 * 1024) throw Error("loraExpand: slices * rank = " + std::to_string(numSlices * rank) + " is above 12288");
  dim3 grid(unsigned(n), blocksFor(outF, 256));
  withAct(act, [&](auto tt) {
    withFloat(b.dtype, [&](auto wt) {
      using T = decltype(tt);
      using W = decltype(wt);
      expandKernel<T, W><<<grid, 256, shared, stream()>>>(static_cast<T*>(out), static_cast<const T*>(delta),
                                                           static_cast<const T*>(t), static_cast<const W*>(b.data),
                                                           numSlots, slotOfRow, sliceStarts, int(numSlices), outF, rank,
                                                           ranks);
    });
  });
  checkLaunch("loraExpand kernel");
}

void loraExpand(DType act, void* out, const void* t, Weights b, int64_t numSlots, const int32_t* slotOfRow,
                const int32_t* sliceStarts, int64_t numSlices, int64_t n, int64_t outF, int64_t rank, SlotRanks ranks) {
  loraExpandAdd(act, out, nullptr, t, b, numSlots, slotOfRow, sliceStarts, numSlices, n, outF, rank, ranks);
}

void copyRegion(void* dst, DType dt, int64_t dstCols, const void* src, DType st, int64_t rows, int64_t cols,
                int64_t rowOffset, int64_t colOffset, float scale, bool transpose) {
  if (rows * cols == 0) return;
  copyRegionKernel<<<strideGrid(rows * cols), 256, 0, stream()>>>(dst, dt, dstCols, src, st, rows, cols, rowOffset,
                                                                  colOffset, scale, transpose);
  checkLaunch("copyRegion kernel");
}

void fill(void* t, DType dt, int64_t n, float value) {
  if (n == 0) return;
  fillKernel<<<strideGrid(n), 256, 0, stream()>>>(t, dt, n, value);
  checkLaunch("fill kernel");
}

double maxAbsDiff(const void* a, DType at, const void* b, DType bt, int64_t n) {
  if (n == 0) return 0;
  Scratch result(2 * sizeof(unsigned long long), "maxAbsDiff scratch");
  check(cudaMemsetAsync(result.as<void>(), 0, 2 * sizeof(unsigned long long), stream()), "cudaMemsetAsync");
  maxAbsDiffKernel<<<strideGrid(n), 256, 0, stream()>>>(a, at, b, bt, n, result.as<unsigned long long>());
  checkLaunch("maxAbsDiff kernel");
  unsigned long long host[2];
  copyToHost(host, result.as<void>(), sizeof host);
  if (host[1]) return NAN;
  double m;
  std::memcpy(&m, &host[0], sizeof m);
  return m;
}

}  // namespace mstar::gpu

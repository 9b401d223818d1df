// Element-wise ops: SiLU(gate) * up, and a plain add (the residual of a block).
#include "common.cuh"
#include "lora_delta.cuh"

namespace mstar::gpu {
namespace {

// gateUp rows are [gate | up], ldg apart; the CPU's formula g / (1 + e^-g) * u, with expf.
template <typename T>
__device__ __forceinline__ T silu(float g, float u) {
  return fromF<T>(g / (1.0f + expf(-g)) * u);
}

template <typename T>
__global__ void siluMulKernel(T* out, const T* gateUp, int64_t ldg, int64_t n, int64_t inter) {
  awaitPrior();
  int64_t total = n * inter;
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < total; j += int64_t(gridDim.x) * blockDim.x) {
    int64_t r = j / inter, i = j % inter;
    out[j] = silu<T>(toF(gateUp[r * ldg + i]), toF(gateUp[r * ldg + inter + i]));
  }
}

// siluMul of an adapted gate_up projection's output: gate and up each with its delta
// (LoraDelta), rounded as the projection with its adapter is stored. A thread takes 8
// consecutive columns of one row, of gate (the first 16 lanes of a warp) or of up (the
// other 16, the same columns), so that its delta is one run of loads (loraDeltasRun); the
// two halves then swap values. Blocks of 64 threads, 256 columns: a one-row step's 1.5 MB of
// bT (Qwen3-8B) spreads over 48 SMs. (A thread for gate and up of 4 rows, one after the
// other, took 13 us at 8 rows of Qwen3-0.6B against 1.0 plain.)
constexpr int kDeltaCols = 8, kDeltaThreads = 64, kDeltaBlockCols = kDeltaThreads / 2 * kDeltaCols;
template <typename T>
__global__ void siluMulDeltaKernel(T* out, const T* gateUp, int64_t ldg, int64_t inter, LoraDelta delta,
                                   bool deltaVec, bool vecRows) {
  const int lane = threadIdx.x % 32, up = lane / 16;
  const int64_t at = blockIdx.x * int64_t(kDeltaBlockCols) + (threadIdx.x / 32) * 16 * kDeltaCols + (lane % 16) * kDeltaCols;
  // Columns past the row work on column 0 and store nothing: every lane reaches the swap.
  const bool live = at < inter;
  const int64_t i0 = live ? at : 0, r = blockIdx.y, o0 = up * inter + i0;  // gate's or up's columns i0 ..
  const int32_t slot = delta.slotOfRow[r];
  if (live) prefetchDeltas<T>(delta, slot, o0);
  awaitPrior();
  const T* row = gateUp + r * ldg;
  float v[kDeltaCols];
  if (vecRows) {
    loadVec<T, kDeltaCols>(v, row + o0);
  } else {
#pragma unroll
    for (int e = 0; e < kDeltaCols; ++e) v[e] = toF(row[up * inter + min(i0 + e, inter - 1)]);
  }
  addDeltasRun<T, kDeltaCols>(delta, deltaVec, r, slot, o0, v);
  float other[kDeltaCols];
#pragma unroll
  for (int e = 0; e < kDeltaCols; ++e) other[e] = __shfl_xor_sync(0xffffffffu, v[e], 16, 32);
  if (up || !live) return;
  T y[kDeltaCols];
#pragma unroll
  for (int e = 0; e < kDeltaCols; ++e) y[e] = silu<T>(v[e], other[e]);
  if (vecRows) {
    storeVec(out + r * inter + i0, y);
  } else {
#pragma unroll
    for (int e = 0; e < kDeltaCols; ++e)
      if (i0 + e < inter) out[r * inter + i0 + e] = y[e];
  }
}

template <typename T>
__global__ void addKernel(T* out, const T* a, const T* b, int64_t n) {
  awaitPrior();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = fromF<T>(toF(a[i]) + toF(b[i]));
}

// Enough blocks to fill the GPU a few times over; the loops stride over the rest.
unsigned gridFor(int64_t n) { return unsigned(std::min<int64_t>(blocksFor(n, 256), int64_t(smCount()) * 16)); }

}  // namespace

void siluMul(DType act, void* out, const void* gateUp, int64_t n, int64_t inter, int64_t ldg, const LoraDelta& d) {
  if (n * inter == 0) return;
  if (!ldg) ldg = 2 * inter;
  withAct(act, [&](auto t) {
    using T = decltype(t);
    if (d.t) {
      const dim3 grid{blocksFor(inter, kDeltaBlockCols), unsigned(n)};
      const bool vecRows = runsOf8(gateUp, ldg, sizeof(T)) && runsOf8(out, inter, sizeof(T));
      launch("siluMul kernel", siluMulDeltaKernel<T>, grid, kDeltaThreads, 0, static_cast<T*>(out),
          static_cast<const T*>(gateUp), ldg, inter, d, inter % 8 == 0 && deltaRunsOf(d, 8, sizeof(T)), vecRows);
      return;
    }
    launch("siluMul kernel", siluMulKernel<T>, gridFor(n * inter), 256, 0, static_cast<T*>(out),
        static_cast<const T*>(gateUp), ldg, n, inter);
  });
}

void add(DType act, void* out, const void* a, const void* b, int64_t n) {
  if (n == 0) return;
  withAct(act, [&](auto t) {
    using T = decltype(t);
    launch("add kernel", addKernel<T>, gridFor(n), 256, 0, static_cast<T*>(out), static_cast<const T*>(a),
        static_cast<const T*>(b), n);
  });
}

}  // namespace mstar::gpu

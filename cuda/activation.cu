// Element-wise ops: SiLU(gate) * up, and a plain add (the residual of a block).
#include <type_traits>

#include "common.cuh"
#include "lora_delta.cuh"

namespace mstar::gpu {
namespace {

// gateUp rows are [gate | up], ldg apart.
template <typename T>
__device__ __forceinline__ T silu(float g, float u) {
  return fromF<T>(siluTimes(g, u));
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

// siluMulKernel for prefill-sized steps: a thread takes 8 consecutive columns of one row (16-byte
// loads of gate and up where the rows allow), blockIdx.y the row. Element by element, with a
// 64-bit division each, Qwen3-0.6B's 4096-row step spent 46 us a layer here, ~1.6 TB/s.
constexpr int kRowsThreads = 128;

template <typename T>
__global__ __launch_bounds__(kRowsThreads) void siluMulRowsKernel(T* out, const T* gateUp, int64_t ldg, int inter) {
  awaitPrior();
  const int c = (blockIdx.x * kRowsThreads + threadIdx.x) * 8;
  if (c >= inter) return;
  const int64_t r = blockIdx.y;
  float g[8], u[8];
  loadVec<T, 8>(g, gateUp + r * ldg + c);
  loadVec<T, 8>(u, gateUp + r * ldg + inter + c);
  T y[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) y[e] = silu<T>(g[e], u[e]);
  storeVec<T, 8>(out + r * inter + c, y);
}

// siluMul of an adapted gate_up projection's output: gate and up each with its delta
// (LoraDelta), rounded as the projection with its adapter is stored. A thread takes 8
// consecutive columns of G rows, of gate (the first 16 lanes of a warp) or of up (the
// other 16, the same columns), so that its delta is one run of loads (loraDeltasRun), shared
// by rows of one slot; the two halves then swap values. Blocks of 64 threads, 256 columns: a
// one-row step's 1.5 MB of bT (Qwen3-8B) spreads over 48 SMs. (A thread for gate and up of 4
// rows, one after the other, took 13 us at 8 rows of Qwen3-0.6B against 1.0 plain.)
constexpr int kDeltaCols = 8, kDeltaThreads = 64, kDeltaBlockCols = kDeltaThreads / 2 * kDeltaCols;
template <typename T, int G>
__global__ void siluMulDeltaKernel(T* out, const T* gateUp, int64_t ldg, int64_t n, int64_t inter, LoraDelta delta,
                                   bool deltaVec, bool vecRows) {
  const int lane = threadIdx.x % 32, up = lane / 16;
  const int64_t at = blockIdx.x * int64_t(kDeltaBlockCols) + (threadIdx.x / 32) * 16 * kDeltaCols + (lane % 16) * kDeltaCols;
  // Columns past the row work on column 0, and rows past n on row n - 1, storing nothing:
  // every lane reaches the swap.
  const bool live = at < inter;
  const int64_t i0 = live ? at : 0, o0 = up * inter + i0;  // gate's or up's columns i0 ..
  int64_t r[G];
  int32_t slot[G];
  DeltaPlan plan[G];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    r[g] = min(blockIdx.y * int64_t(G) + g, n - 1);
    slot[g] = delta.slotOfRow[r[g]];
    plan[g] = deltaPlan(delta, deltaVec, slot[g], o0, o0 + kDeltaCols);
    if (live && (g == 0 || slot[g] != slot[g - 1])) prefetchDeltas<T>(delta, plan[g], o0);
  }
  awaitPrior();
  float v[G][kDeltaCols];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const T* row = gateUp + r[g] * ldg;
    if (vecRows) {
      loadVec<T, kDeltaCols>(v[g], row + o0);
    } else {
#pragma unroll
      for (int e = 0; e < kDeltaCols; ++e) v[g][e] = toF(row[up * inter + min(i0 + e, inter - 1)]);
    }
  }
  addDeltasRows<T, kDeltaCols, G>(delta, plan, r, slot, o0, v);
#pragma unroll
  for (int g = 0; g < G; ++g) {
    float other[kDeltaCols];
#pragma unroll
    for (int e = 0; e < kDeltaCols; ++e) other[e] = __shfl_xor_sync(0xffffffffu, v[g][e], 16, 32);
    if (up || !live || blockIdx.y * int64_t(G) + g >= n) continue;
    T y[kDeltaCols];
#pragma unroll
    for (int e = 0; e < kDeltaCols; ++e) y[e] = silu<T>(v[g][e], other[e]);
    T* o = out + r[g] * inter + i0;
    if (vecRows) {
      storeVec(o, y);
    } else {
#pragma unroll
      for (int e = 0; e < kDeltaCols; ++e)
        if (i0 + e < inter) o[e] = y[e];
    }
  }
}

// siluMul of an adapted gate_up's bf16 output where the deltas go to tensor cores (deltaTilesOf): a
// warp takes 16 columns of 8 rows, its gate and up deltas two tiles (deltaTiles), and then holds
// gate and up of the same (row, column) pairs, four a lane. Blocks of two warps, as above. (H200,
// bench/lora_ops.mjs, Qwen3-0.6B's gate_up GEMM with this op, at 8 / 32 / 64 rows: 7.65 / 10.0 /
// 10.4 us against 7.9 / 10.8 / 12.1 with siluMulDeltaKernel, 6.9 / 7.8 / 8.1 plain. Two warps a
// tile, each finishing two pairs a lane, ran 0.4-0.7 us slower at 32-64 rows.)
constexpr int kTileWarps = 2;
__global__ void siluMulDeltaTilesKernel(bf16* out, const bf16* gateUp, int64_t ldg, int64_t n, int64_t inter,
                                        LoraDelta delta) {
  const int64_t i0 = (blockIdx.x * int64_t(kTileWarps) + threadIdx.x / 32) * 16, r0 = blockIdx.y * int64_t(8);
  const int64_t o0[2] = {i0, inter + i0};
  const TilePlan<2> plan = tilePlan(delta, o0, r0, n);
  awaitPrior();
  if (i0 >= inter) return;  // whole warps
  // The lane's four (row, column) pairs, as its deltas' (tileRow, tileOutput).
  int64_t r[4], i[4];
  float gate[4], up[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    r[e] = min(r0 + tileRow(e), n - 1);
    i[e] = i0 + tileOutput(e);
    gate[e] = toF(gateUp[r[e] * ldg + i[e]]);
    up[e] = toF(gateUp[r[e] * ldg + inter + i[e]]);
  }
  float acc[2][4];
  deltaTiles(delta, plan, acc);
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    if (r0 + tileRow(e) >= n) continue;
    out[r[e] * inter + i[e]] = silu<bf16>(toF(fromF<bf16>(gate[e] + acc[0][e])), toF(fromF<bf16>(up[e] + acc[1][e])));
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
    if constexpr (std::is_same_v<T, bf16>) {
      if (d.t && deltaTilesOf(d, inter)) {
        const dim3 grid{blocksFor(inter, kTileWarps * 16), unsigned((n + 7) / 8)};
        return launch("siluMul kernel", siluMulDeltaTilesKernel, grid, kTileWarps * 32, 0, static_cast<bf16*>(out),
            static_cast<const bf16*>(gateUp), ldg, n, inter, d);
      }
    }
    if (d.t) {
      auto run = [&](auto kernel, int64_t rowsPerBlock) {
        const dim3 grid{blocksFor(inter, kDeltaBlockCols), unsigned((n + rowsPerBlock - 1) / rowsPerBlock)};
        launch("siluMul kernel", kernel, grid, kDeltaThreads, 0, static_cast<T*>(out), static_cast<const T*>(gateUp),
            ldg, n, inter, d, inter % 8 == 0 && deltaRunsOf(d, 8, sizeof(T)),
            runsOf8(gateUp, ldg, sizeof(T)) && runsOf8(out, inter, sizeof(T)));
      };
      // Two rows a block where a row a block would re-read more than 8 MiB of bT from L2
      // (H200, bench/lora_ops.mjs: Qwen3-8B at 32 rows, 48 MiB, 9.6 -> 6.1 us; at 8 rows 4.2 ->
      // 4.1). Below, halving the blocks costs more than the re-reads (Qwen3-0.6B at 8 rows 2.9
      // -> 3.5 us); four rows a block took 5.4-6.8 us at every size measured, above two's.
      const int64_t rereads = n * 2 * inter * d.rank * int64_t(sizeof(T));
      if (n >= 2 && rereads >= (int64_t(8) << 20)) return run(siluMulDeltaKernel<T, 2>, 2);
      return run(siluMulDeltaKernel<T, 1>, 1);
    }
    if (n >= kPrefillRows && n <= 65535 && runsOf8(gateUp, ldg, sizeof(T)) && runsOf8(out, inter, sizeof(T))) {
      const dim3 grid{blocksFor(inter / 8, kRowsThreads), unsigned(n)};
      return launch("siluMul kernel", siluMulRowsKernel<T>, grid, kRowsThreads, 0, static_cast<T*>(out),
          static_cast<const T*>(gateUp), ldg, int(inter));
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

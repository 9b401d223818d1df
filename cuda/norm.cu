// RMSNorm variants, as transformers computes them: x * (1 / sqrt(mean(x^2) + eps)), then * w.
// Sums of squares in f32 (the CPU sums in f64; the difference is far below bf16's step).
#include <algorithm>
#include <type_traits>

#include "common.cuh"
#include "gemv_mma.cuh"
#include "lora_delta.cuh"

namespace mstar::gpu {
namespace {

constexpr int kThreads = 256;

// A decode step's norm (a block a row) lets the projection after it launch at once where
// that projection runs on the tensor-core GEMV (the caller says: `early`): the GEMV's first
// weight stages then stream while this norm still waits for the projection before it.
// bench/decode_step.mjs on an H200, GPU ms a step, LoRA off, before -> after: Qwen3-0.6B 1 row
// 0.778 -> 0.695 (the GEMV from one row too), 2 rows 0.783 -> 0.769, 8 rows 0.868 -> 0.811,
// 16 rows 1.024 -> 0.992; Qwen3-8B (12 layers) 4 rows 1.947 -> 1.900. Ahead of any other
// projection it waits: the one-row GEMV prefetches its whole weight into L2 before its wait,
// which so early slowed the projection still running (Qwen3-8B 1 row 1.631 -> 1.660); ahead
// of cuBLASLt it gained nothing. (A norm with a delta issuing its bT loads before it lets
// the GEMV launch: one adapter 0.836 -> 0.823 at 2 rows, but 0.908 -> 0.920 at 8 and 1.834 ->
// 1.900 at 8 rows of 4096 keys.)

// One block per row. The second pass re-reads x (from L1/L2) instead of keeping it in
// registers, so any row width works.
template <typename T, typename W>
__global__ void rmsNormKernel(T* out, const T* x, const W* w, int64_t dim, float eps, bool /*early*/) {
  __shared__ float partial[32];
  awaitPrior();
  const T* xr = x + blockIdx.x * dim;
  T* o = out + blockIdx.x * dim;
  float ss = 0;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    float v = toF(xr[i]);
    ss += v * v;
  }
  float r = 1.0f / sqrtf(blockSum(ss, partial) / float(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) o[i] = fromF<T>(toF(w[i]) * (toF(xr[i]) * r));
}

// A thread's share of a row held in registers, for rows that allow 16-byte loads (runsOf8)
// of at most RUNS runs of 8 a thread (run j at at(j)): w's runs load before the wait (a
// weight: no op writes it), while the kernel before this one finishes; x's once, in one
// round trip, after it. (A loop of one element a step took 6.6 us for a 4096-wide row of
// Qwen3-8B at 1-64 rows against 2.3 us for Qwen3-0.6B's 1024: a round trip each.)
template <typename T, typename W, int RUNS>
struct RowRuns {
  float w[RUNS][8], x[RUNS][8];
  int64_t dim;

  __device__ static int64_t at(int j) { return threadIdx.x * 8 + int64_t(j) * blockDim.x * 8; }
  __device__ void loadWeight(const W* weight) {
#pragma unroll
    for (int j = 0; j < RUNS; ++j)
      if (at(j) < dim) loadVec<W, 8>(w[j], weight + at(j));
  }
  // Loads the row and returns its scale 1 / sqrt(mean(x^2) + eps) (the whole block calls it).
  __device__ float loadRow(const T* row, float eps, float* partial) {
    float ss = 0;
#pragma unroll
    for (int j = 0; j < RUNS; ++j) {
      if (at(j) >= dim) continue;
      loadVec<T, 8>(x[j], row + at(j));
#pragma unroll
      for (int e = 0; e < 8; ++e) ss += x[j][e] * x[j][e];
    }
    return 1.0f / sqrtf(blockSum(ss, partial) / float(dim) + eps);
  }
  // Run j normed as the op stores it, into v; x[j] then holds the same values.
  __device__ void norm(int j, float r, T (&v)[8]) {
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      v[e] = fromF<T>(w[j][e] * (x[j][e] * r));
      x[j][e] = toF(v[e]);
    }
  }
};

// Calls f(std::integral_constant<int, RUNS>{}) with the RUNS of the RowRuns that holds a row
// of dim elements (1, 2 or 4 runs a thread of kThreads) and returns true; false where none does.
template <typename F>
bool withRowRuns(int64_t dim, F&& f) {
  const int64_t runs = (dim + kThreads * 8 - 1) / (kThreads * 8);
  if (runs <= 1) f(std::integral_constant<int, 1>{});
  else if (runs <= 2) f(std::integral_constant<int, 2>{});
  else if (runs <= 4) f(std::integral_constant<int, 4>{});
  else return false;
  return true;
}

// rmsNormKernel for rows RowRuns can hold.
template <typename T, typename W, int RUNS>
__global__ void rmsNormRunsKernel(T* out, const T* x, const W* w, int64_t dim, float eps, bool early) {
  if (early) launchNextEarly();
  __shared__ float partial[32];
  RowRuns<T, W, RUNS> runs{{}, {}, dim};
  runs.loadWeight(w);
  awaitPrior();
  const float r = runs.loadRow(x + blockIdx.x * dim, eps, partial);
  T* o = out + blockIdx.x * dim;
#pragma unroll
  for (int j = 0; j < RUNS; ++j) {
    if (runs.at(j) >= dim) continue;
    T v[8];
    runs.norm(j, r, v);
    storeVec(o + runs.at(j), v);
  }
}

// Rows from which rmsNorm takes a warp a row, and the widest row it holds so (bytes a lane: 256).
constexpr int64_t kWarpRows = 256;
constexpr int64_t kWarpRowBytes = 32 * 256;
constexpr int kWarpRowsThreads = 128;

// rmsNormKernel for many rows (prefill-sized steps): a warp a row at a time, the blocks (of
// kWarpRowsThreads / 32 warps) as many as the SMs hold at once, each warp taking rows in turn.
// A lane's share of its row (runs of 8 at (32 j + lane) 8) loads at once and stays as stored;
// w comes from shared memory, copied there before the wait (no op writes a weight). On
// Qwen3-8B's 4096 rows of 4096 (H200, a 4096-token step's 73 norms): 1.56 ms, against 1.88
// for blocks of 4 rows that read w from L2 after the row's sum, and 2.04 for a block a row
// with its block-barrier pair; Qwen3-0.6B's 1024-wide rows 0.33 ms either way.
template <typename T, typename W, int RUNS>
__global__ void rmsNormWarpRowsKernel(T* out, const T* x, const W* w, int64_t rows, int64_t dim, float eps) {
  extern __shared__ uint4 wShared[];  // w's dim elements as stored
  for (int64_t i = threadIdx.x; i < dim * int64_t(sizeof(W)) / 16; i += blockDim.x)
    wShared[i] = reinterpret_cast<const uint4*>(w)[i];
  awaitPrior();
  __syncthreads();
  const W* ws = reinterpret_cast<const W*>(wShared);
  const int lane = threadIdx.x % 32, warps = blockDim.x / 32;
  auto at = [&](int j) { return (int64_t(j) * 32 + lane) * 8; };
  constexpr int kChunks = 8 * int(sizeof(T)) / 16;  // 16-byte loads a run
  for (int64_t row = blockIdx.x * int64_t(warps) + threadIdx.x / 32; row < rows; row += int64_t(gridDim.x) * warps) {
    uint4 raw[RUNS][kChunks];
#pragma unroll
    for (int j = 0; j < RUNS; ++j)
      if (at(j) < dim)
#pragma unroll
        for (int c = 0; c < kChunks; ++c) raw[j][c] = reinterpret_cast<const uint4*>(x + row * dim + at(j))[c];
    float ss = 0;
#pragma unroll
    for (int j = 0; j < RUNS; ++j) {
      if (at(j) >= dim) continue;
      const T* v = reinterpret_cast<const T*>(raw[j]);
#pragma unroll
      for (int e = 0; e < 8; ++e) ss += toF(v[e]) * toF(v[e]);
    }
    const float r = 1.0f / sqrtf(warpSum(ss) / float(dim) + eps);
#pragma unroll
    for (int j = 0; j < RUNS; ++j) {
      if (at(j) >= dim) continue;
      const T* v = reinterpret_cast<const T*>(raw[j]);
      float wf[8];
      loadVec<W, 8>(wf, ws + at(j));
      T o[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) o[e] = fromF<T>(wf[e] * (toF(v[e]) * r));
      storeVec(out + row * dim + at(j), o);
    }
  }
}

// rmsNormWarpRowsKernel in as many blocks as the SMs hold at once (its registers bind them,
// not the up to 16 KB of w), fewer where the rows are fewer.
template <typename T, typename W, int RUNS>
void launchWarpRows(T* out, const T* x, const W* w, int64_t rows, int64_t dim, float eps) {
  constexpr auto kernel = rmsNormWarpRowsKernel<T, W, RUNS>;
  static const int perSm = [] {
    int n = 0;
    check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kWarpRowsThreads, kWarpRowBytes / sizeof(T) * sizeof(W)),
          "rmsNorm kernel occupancy");
    return std::max(n, 1);
  }();
  constexpr int perBlock = kWarpRowsThreads / 32;
  const int64_t blocks = std::min((rows + perBlock - 1) / perBlock, int64_t(perSm) * smCount());
  launch("rmsNorm kernel", kernel, unsigned(blocks), kWarpRowsThreads, size_t(dim) * sizeof(W), out, x, w, rows, dim, eps);
}

// residual += x (stored in T, rounded as a bf16 model's residual stream is), then the
// norm of the stored residual into out. Each thread re-reads only what it wrote itself.
// With a delta (an adapted projection's output x, LoraDelta), x plus its delta is rounded
// first, as the projection with its adapter is stored. x's rows are ldx apart. (deltaVec:
// the runs kernel's; this one reads a delta an output at a time.)
template <typename T, typename W>
__global__ void addRmsNormKernel(T* residual, const T* x, int64_t ldx, const W* w, T* out, int64_t dim, float eps,
                                 LoraDelta delta, bool /*deltaVec*/, bool /*early*/) {
  __shared__ float partial[32];
  awaitPrior();
  const int64_t row = blockIdx.x;
  const int32_t slot = delta.t ? delta.slotOfRow[row] : 0;
  T* res = residual + row * dim;
  const T* xr = x + row * ldx;
  T* o = out + row * dim;
  float ss = 0;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const int64_t col[1] = {i};
    float y[1] = {toF(xr[i])};
    addDeltas<T, 1>(delta, row, slot, col, y);
    T sum = fromF<T>(toF(res[i]) + y[0]);
    res[i] = sum;
    float v = toF(sum);
    ss += v * v;
  }
  float r = 1.0f / sqrtf(blockSum(ss, partial) / float(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) o[i] = fromF<T>(toF(w[i]) * (toF(res[i]) * r));
}

// addRmsNormKernel for rows RowRuns can hold, in blocks of up to kRunsThreads (the delta's
// rounds take up to 128 registers a thread): w before the wait, then the residual's and x's
// runs all in flight at once (the loop above waits on a round trip an element). LOADED (bf16
// with a delta, one run a thread): bT's entries for the thread's run load before the wait too
// (LoadedDeltas; Qwen3-8B's decode step with one adapter at 1 / 8 sequences 4.551 / 5.200 ms
// -> 4.522 / 5.164, bench/decode_step.mjs).
constexpr int kRunsThreads = 512;
template <typename T, typename W, int RUNS, bool LOADED = false>
__global__ __launch_bounds__(kRunsThreads) void addRmsNormRunsKernel(
    T* residual, const T* x, int64_t ldx, const W* w, T* out, int64_t dim, float eps, LoraDelta delta, bool deltaVec,
    bool early) {
  if (early) launchNextEarly();
  __shared__ float partial[32];
  RowRuns<T, W, RUNS> runs{{}, {}, dim};
  runs.loadWeight(w);
  const int64_t row = blockIdx.x;
  const int32_t slot = delta.t ? delta.slotOfRow[row] : 0;
  DeltaPlan plan[RUNS];
  LoadedDeltas loaded[LOADED ? RUNS : 1];
#pragma unroll
  for (int j = 0; j < RUNS; ++j) {
    if (runs.at(j) >= dim) continue;
    plan[j] = deltaPlan(delta, deltaVec, slot, runs.at(j), runs.at(j) + 8);
    if constexpr (LOADED) loaded[j].load(delta, plan[j], runs.at(j));
    if (!LOADED || !loaded[j].loaded) prefetchDeltas<T>(delta, plan[j], runs.at(j));
  }
  awaitPrior();
  T* res = residual + row * dim;
  const T* xr = x + row * ldx;
  float ss = 0;
#pragma unroll
  for (int j = 0; j < RUNS; ++j) {
    const int64_t i = runs.at(j);
    if (i >= dim) continue;
    float rv[8], xv[8];
    loadVec<T, 8>(rv, res + i);
    loadVec<T, 8>(xv, xr + i);
    if (LOADED && loaded[j].loaded) loaded[j].addTo(delta, plan[j], row, xv);
    else addDeltasRun<T, 8>(delta, plan[j], row, slot, i, xv);
    T sum[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      sum[e] = fromF<T>(rv[e] + xv[e]);
      runs.x[j][e] = toF(sum[e]);
      ss += runs.x[j][e] * runs.x[j][e];
    }
    storeVec(res + i, sum);
  }
  const float r = 1.0f / sqrtf(blockSum(ss, partial) / float(dim) + eps);
#pragma unroll
  for (int j = 0; j < RUNS; ++j) {
    if (runs.at(j) >= dim) continue;
    T v[8];
    runs.norm(j, r, v);
    storeVec(out + row * dim + runs.at(j), v);
  }
}

// One warp per (token, head) over the q heads then the k heads of fused qkv rows, in place.
template <typename T, typename W>
__global__ void headRmsNormKernel(T* qkv, const W* qw, const W* kw, int64_t n, int numHeads, int numKvHeads,
                                  int headDim, int64_t rowWidth, float eps) {
  awaitPrior();
  int heads = numHeads + numKvHeads;
  int64_t j = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;
  int lane = threadIdx.x % 32;
  if (j >= n * heads) return;  // whole warps leave together
  int64_t row = j / heads;
  int h = int(j % heads);
  T* x = qkv + row * rowWidth + int64_t(h) * headDim;
  const W* w = h < numHeads ? qw : kw;
  float ss = 0;
  for (int d = lane; d < headDim; d += 32) {
    float v = toF(x[d]);
    ss += v * v;
  }
  float r = 1.0f / sqrtf(warpSum(ss) / float(headDim) + eps);
  for (int d = lane; d < headDim; d += 32) x[d] = fromF<T>(toF(w[d]) * (toF(x[d]) * r));
}

// Whether a norm of rows x dim lets the projection after it (next outputs wide; 0: none)
// launch early: where the tensor-core GEMV takes it.
bool earlyFor(DType act, int64_t rows, int64_t dim, int64_t next) {
  return act == DType::BF16 && next && gemvMmaFit(rows, dim, next) != GemvMmaFit::None;
}

}  // namespace

void rmsNorm(DType act, void* out, const void* x, Weights w, int64_t rows, int64_t dim, float eps, int64_t next) {
  if (rows == 0) return;
  withAct(act, [&](auto t) {
    withFloat(w.dtype, [&](auto wt) {
      using T = decltype(t);
      using W = decltype(wt);
      auto args = [&](auto kernel) {
        launch("rmsNorm kernel", kernel, unsigned(rows), kThreads, 0, static_cast<T*>(out), static_cast<const T*>(x),
            static_cast<const W*>(w.data), dim, eps, earlyFor(act, rows, dim, next));
      };
      const bool vec = runsOf8(x, dim, sizeof(T)) && runsOf8(out, dim, sizeof(T)) && runsOf8(w.data, dim, sizeof(W));
      if (vec && rows >= kWarpRows && dim % 256 == 0 && dim * int64_t(sizeof(T)) <= kWarpRowBytes) {
        auto warpRows = [&](auto runs) {
          launchWarpRows<T, W, decltype(runs)::value>(static_cast<T*>(out), static_cast<const T*>(x),
              static_cast<const W*>(w.data), rows, dim, eps);
        };
        const int64_t runs = dim / 256;  // a lane's runs of 8; up to 16 (bf16) or 8 (f32)
        if (runs <= 4) warpRows(std::integral_constant<int, 4>{});
        else if (runs <= 8) warpRows(std::integral_constant<int, 8>{});
        else warpRows(std::integral_constant<int, int(kWarpRowBytes / 32 / (8 * sizeof(T)))>{});
        return;
      }
      if (vec && withRowRuns(dim, [&](auto runs) { args(rmsNormRunsKernel<T, W, decltype(runs)::value>); })) return;
      args(rmsNormKernel<T, W>);
    });
  });
}

// Threads for `runs` runs of 8 each where a row fits a block of kRunsThreads, else 0: the
// fewest runs a thread, so that the row's loads all start at once (Qwen3-8B's 4096 in 512
// threads, not two runs each of 256) and a delta's rounds of rank entries wait once, not once
// a run. (Blocks of 1024 threads of one run, as wider rows took before, asked for more
// registers than an SM has: the launch failed from 4097 wide.)
static unsigned runThreads(int64_t dim, int runs) {
  const int64_t threads = (dim + 8 * 32 * runs - 1) / (8 * 32 * runs) * 32;
  return threads <= kRunsThreads ? unsigned(threads) : 0;
}

void addRmsNorm(DType act, void* residual, const void* x, Weights w, void* out, int64_t rows, int64_t dim, float eps,
                int64_t ldx, const LoraDelta& d, int64_t next) {
  if (rows == 0) return;
  if (!ldx) ldx = dim;
  withAct(act, [&](auto t) {
    withFloat(w.dtype, [&](auto wt) {
      using T = decltype(t);
      using W = decltype(wt);
      auto args = [&](auto kernel, unsigned threads = kThreads) {
        launch("addRmsNorm kernel", kernel, unsigned(rows), threads, 0, static_cast<T*>(residual),
            static_cast<const T*>(x), ldx, static_cast<const W*>(w.data), static_cast<T*>(out), dim, eps, d,
            deltaRunsOf(d, 8, sizeof(T)), earlyFor(act, rows, dim, next));
      };
      const bool vec = runsOf8(x, ldx, sizeof(T)) && runsOf8(residual, dim, sizeof(T)) &&
                       runsOf8(out, dim, sizeof(T)) && runsOf8(w.data, dim, sizeof(W));
      if (const unsigned threads = vec ? runThreads(dim, 1) : 0) {
        if constexpr (std::is_same_v<T, bf16>)
          if (d.t && d.rank <= kLoadedRank && deltaRunsOf(d, 8, sizeof(T)))
            return args(addRmsNormRunsKernel<T, W, 1, true>, threads);
        return args(addRmsNormRunsKernel<T, W, 1>, threads);
      }
      if (const unsigned threads = vec ? runThreads(dim, 2) : 0) return args(addRmsNormRunsKernel<T, W, 2>, threads);
      if (const unsigned threads = vec ? runThreads(dim, 4) : 0) return args(addRmsNormRunsKernel<T, W, 4>, threads);
      args(addRmsNormKernel<T, W>);
    });
  });
}

void headRmsNorm(DType act, void* qkv, Weights qw, Weights kw, int64_t n, HeadLayout l, float eps) {
  int64_t warps = n * (l.numHeads + l.numKvHeads);
  if (warps == 0) return;
  withAct(act, [&](auto t) {
    withFloat(qw.dtype, [&](auto wt) {
      using T = decltype(t);
      using W = decltype(wt);
      launch("headRmsNorm kernel", headRmsNormKernel<T, W>, blocksFor(warps * 32, kThreads), kThreads, 0,
          static_cast<T*>(qkv), static_cast<const W*>(qw.data), static_cast<const W*>(kw.data), n, l.numHeads,
          l.numKvHeads, l.headDim, l.stride(), eps);
    });
  });
}

}  // namespace mstar::gpu

// The attention prologue in one launch: an adapted qkv projection's delta (LoraDelta), per-head
// RMSNorm of q and k (Qwen3; optional), RoPE on q and k, and the k and v rows into their
// paged-cache slot. It replaces headRmsNorm + rope + kvWrite (three launches a layer) and
// rounds between the stages as those do (qkv is stored in the activation type after each),
// so either path gives the same values (up to the order in which a head's sum of squares
// is added: ropeKvRowsKernel's lanes each sum a 16-byte run of the head first, so a q/k-normed
// value may land one rounding step apart).
#include <algorithm>
#include <type_traits>

#include "common.cuh"
#include "lora_delta.cuh"

namespace mstar::gpu {
namespace {

constexpr int kMaxWarps = 8;

// What both kernels take besides the delta.
template <typename T, typename C, typename W>
struct RopeKvArgs {
  T* qkv;
  const int32_t* positions;
  const float* invFreq;
  int half;
  const W* qNorm;
  const W* kNorm;
  float eps;
  C* kCache;
  C* vCache;
  const int32_t* slots;
  int64_t numSlots, n;
  HeadLayout l;
  int64_t rowWidth;
};

// Token t's head h once its row, with any delta (rounded as qkv stores it), is in row[] (the
// warp's own, in shared memory; ss its sum of squares, the warp's lanes' parts): a v row goes
// back to qkv where a delta changed it, and to the token's paged-cache slot; q and k take their
// norm and RoPE (at pos) into qkv, k into the cache too. (The callers load pos and slot before
// the row's work: nothing waits on them first.)
template <typename T, typename C, typename W>
__device__ __forceinline__ void finishHead(const RopeKvArgs<T, C, W>& a, int64_t t, int h, float* row, float ss,
                                           bool hasDelta, float pos, int64_t tokenSlot) {
  const int lane = threadIdx.x % 32, hd = a.l.headDim;
  const bool isQ = h < a.l.numHeads, isV = h >= a.l.numHeads + a.l.numKvHeads;
  T* x = a.qkv + t * a.rowWidth + int64_t(h) * hd;
  const W* norm = isQ ? a.qNorm : a.kNorm;
  const int64_t slot = isQ ? -1 : tokenSlot;
  const bool cache = slot >= 0 && slot < a.numSlots;
  C* cacheRow = (isV ? a.vCache : a.kCache) + slot * a.l.numKvHeads * hd +
                int64_t(h - a.l.numHeads - (isV ? a.l.numKvHeads : 0)) * hd;
  __syncwarp();
  if (isV) {  // no norm, no RoPE
    for (int d = lane; d < hd; d += 32) {
      const T stored = fromF<T>(row[d]);
      if (hasDelta) x[d] = stored;
      if (cache) cacheRow[d] = fromF<C>(toF(stored));
    }
    return;
  }
  if (norm) {
    const float r = 1.0f / sqrtf(warpSum(ss) / float(hd) + a.eps);
    for (int d = lane; d < hd; d += 32) row[d] = toF(fromF<T>(toF(norm[d]) * (row[d] * r)));
  }
  __syncwarp();
  // Dim d's value v, rotated or not, to qkv, and a k head's to the cache.
  auto store = [&](int d, float v) {
    const T stored = fromF<T>(v);
    x[d] = stored;
    if (cache) cacheRow[d] = fromF<C>(toF(stored));
  };
  // RoPE turns dims i and i + half by one angle: one (precise) sincos for both. In a
  // 4k-token prefill, a sin and a cos for every dim were most of this kernel's time.
  for (int i = lane; i < a.half; i += 32) {
    float s, c;
    sincosf(pos * a.invFreq[i], &s, &c);
    const float x0 = row[i], x1 = row[i + a.half];
    store(i, x0 * c - x1 * s);
    store(i + a.half, x1 * c + x0 * s);
  }
  for (int d = 2 * a.half + lane; d < hd; d += 32) store(d, row[d]);  // past the rotary dims
}

// One warp per (token, head) over the q heads, the k heads, then the v heads of fused qkv
// rows, in place. A head's row goes through shared memory because RoPE pairs dim i with
// i + half, which another lane may hold. (A v row taken by its k head's warp made that warp's
// delta two round trips, one after the other.)
template <typename T, typename C, typename W>
__global__ __launch_bounds__(kMaxWarps * 32) void ropeKvKernel(RopeKvArgs<T, C, W> a, LoraDelta delta, bool deltaVec) {
  extern __shared__ float rows[];  // [warps][headDim]: each warp's head row
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int heads = a.l.numHeads + 2 * a.l.numKvHeads, hd = a.l.headDim;
  const int64_t j = min(blockIdx.x * int64_t(warps) + warp, a.n * heads - 1);
  const int64_t t = j / heads;
  const int h = int(j % heads);
  const int64_t col = int64_t(h) * hd;
  const int32_t loraSlot = delta.t ? delta.slotOfRow[t] : 0;
  const DeltaPlan plan = deltaPlan(delta, deltaVec, loraSlot, col, col + hd);
  for (int d = lane; d < hd; d += 32) prefetchDeltas<T>(delta, plan, col + d);
  awaitPrior();
  if (blockIdx.x * int64_t(warps) + warp >= a.n * heads) return;  // whole warps leave together; no block-wide sync below
  const T* x = a.qkv + t * a.rowWidth + col;
  float* row = rows + warp * hd;
  const float pos = float(a.positions[t]);
  const int64_t slot = a.slots[t];
  // The head's row with its delta into shared memory, kDims consecutive dims a lane a round (a
  // delta's loads of bT then cover the lane's dims at once).
  constexpr int kDims = 4;
  float ss = 0;
  for (int d0 = lane * kDims; d0 < hd; d0 += 32 * kDims) {
    float v[kDims];
#pragma unroll
    for (int e = 0; e < kDims; ++e) v[e] = toF(x[min(d0 + e, hd - 1)]);
    addDeltasRun<T, kDims>(delta, plan, t, loraSlot, col + d0, v);
#pragma unroll
    for (int e = 0; e < kDims; ++e)
      if (d0 + e < hd) {
        row[d0 + e] = v[e];
        ss += v[e] * v[e];
      }
  }
  finishHead(a, t, h, row, ss, delta.t != nullptr, pos, slot);
}

// ropeKvKernel with an adapted bf16 qkv's deltas on tensor cores (deltaTilesOf): a block takes
// one head of 8 tokens, a warp a tile of 16 dims (deltaTiles; headDim / 16 warps, up to 32), the
// rows with their deltas going to shared memory; then a warp a token finishes the head. (H200,
// bench/lora_ops.mjs, Qwen3-0.6B's qkv GEMM with this op against the plain pair, at 8 / 64
// rows: +0.95 / +2.2 us with each lane's 4 dims of 16 rank entries in FMAs; +0.6 / +1.6 here.)
// From kTilesMinRows rows: at one or two, the FMAs' blocks of 2 warps (ropeKvKernel) finish
// sooner in the step (bench/decode_step.mjs, one adapter, GPU ms a step, tiles -> FMAs below 3
// rows: Qwen3-0.6B 1 row 0.868 -> 0.852, 2 rows 0.855 -> 0.840, at 4096 keys 1.061 -> 1.041
// and 1.144 -> 1.143; Qwen3-8B equal). At 4 to 16 rows the FMAs lost at long contexts (0.6B,
// 4096 keys: 4 rows 1.373 -> 1.413, 8 rows 1.832 -> 1.990) while gaining at short ones.
constexpr int64_t kTilesMinRows = 3;
template <typename C, typename W>
__global__ __launch_bounds__(1024) void ropeKvTilesKernel(RopeKvArgs<bf16, C, W> a, LoraDelta delta) {
  extern __shared__ float rows[];  // [8][headDim]: the 8 tokens' head rows
  __shared__ float pos[8];
  __shared__ int64_t slot[8];
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int h = blockIdx.x, hd = a.l.headDim;
  const int64_t r0 = blockIdx.y * int64_t(8), col = int64_t(h) * hd;
  const int64_t o0[1] = {col + 16 * warp};  // the warp's tile: dims 16 warp ..
  const TilePlan<1> plan = tilePlan(delta, o0, r0, a.n);
  awaitPrior();
  if (threadIdx.x < 8) {
    const int64_t t = min(r0 + threadIdx.x, a.n - 1);
    pos[threadIdx.x] = float(a.positions[t]);
    slot[threadIdx.x] = a.slots[t];
  }
  // The lane's 4 (token, dim) pairs, as its deltas' (tileRow, tileOutput).
  int tok[4], d[4];
  float y[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    tok[e] = tileRow(e);
    d[e] = 16 * warp + tileOutput(e);
    y[e] = toF(a.qkv[min(r0 + tok[e], a.n - 1) * a.rowWidth + col + d[e]]);
  }
  float acc[1][4];
  deltaTiles(delta, plan, acc);
#pragma unroll
  for (int e = 0; e < 4; ++e) rows[tok[e] * hd + d[e]] = toF(fromF<bf16>(y[e] + acc[0][e]));
  __syncthreads();
  for (int k = warp; k < 8 && r0 + k < a.n; k += warps) {
    float* row = rows + k * hd;
    float ss = 0;
    for (int i = lane; i < hd; i += 32) ss += row[i] * row[i];
    finishHead(a, r0 + k, h, row, ss, true, pos[k], slot[k]);
    __syncwarp();
  }
}

// ropeKvKernel for steps of many rows with no delta (kRowsKernelFrom): a block a token, its
// angles' cos and sin once into shared memory (every q and k head turns by the same ones). The
// token's qkv row is read in 16-byte chunks of D elements, L = headDim / D lanes a head, and
// each thread issues the loads of all its chunks (up to kRowChunks) before it works on any:
// Qwen3-8B's 12 KB row is then in flight at once. A dim's RoPE partner is half / D lanes away
// and a head's sum of squares is over its L lanes: shuffles. H200, over a 4096-token step
// (bench/prefill_step.mjs, OPS=1): Qwen3-8B 2.09 -> 1.81 ms, Qwen3-0.6B 0.98 -> 0.88 against a
// warp a head at a time with 8 bytes a lane (one load a warp in flight); before that, a warp a
// head with its own sincos and its row through shared memory had taken 131 us a layer at
// Qwen3-0.6B (now 31).
constexpr int kRowsThreads = 256;
constexpr int kRowChunks = 4;  // Qwen3-8B's 48 heads of 128 dims are 768 chunks: 3 a thread
constexpr int kMaxHalf = 128;

template <typename T, typename C, typename W>
__global__ __launch_bounds__(kRowsThreads) void ropeKvRowsKernel(RopeKvArgs<T, C, W> a) {
  constexpr int D = 16 / sizeof(T);
  __shared__ float cosAt[kMaxHalf], sinAt[kMaxHalf];
  const int64_t t = blockIdx.x;
  const int hd = a.l.headDim, half = a.half, lanes = hd / D, partner = half / D;
  const int chunks = (a.l.numHeads + 2 * a.l.numKvHeads) * lanes;
  const bool normed = a.qNorm || a.kNorm;
  T* row = a.qkv + t * a.rowWidth;  // chunk c: head c / L, dims D (c % L) ..
  const int threads = blockDim.x;
  uint4 raw[kRowChunks];
  // Chunks base + k threads + threadIdx.x; the same k are past the row for the whole block.
  auto load = [&](int base) {
#pragma unroll
    for (int k = 0; k < kRowChunks; ++k)
      if (base + k * threads < chunks)
        raw[k] = reinterpret_cast<const uint4*>(row)[min(base + k * threads + int(threadIdx.x), chunks - 1)];
  };
  awaitPrior();
  load(0);
  const float pos = float(a.positions[t]);
  const int64_t slot = a.slots[t];
  const bool cached = slot >= 0 && slot < a.numSlots;
  for (int i = threadIdx.x; i < half; i += blockDim.x) sincosf(pos * a.invFreq[i], &sinAt[i], &cosAt[i]);
  __syncthreads();
  for (int base = 0; base < chunks; base += kRowChunks * threads) {
    if (base > 0) load(base);
#pragma unroll
    for (int k = 0; k < kRowChunks; ++k) {
      if (base + k * threads >= chunks) break;
      // Lanes past the row work on its last chunk (their warp's shuffles need them) and store nothing.
      const int c = base + k * threads + int(threadIdx.x), h = min(c, chunks - 1) / lanes;
      const int d0 = min(c, chunks - 1) % lanes * D;
      const bool isQ = h < a.l.numHeads, isV = h >= a.l.numHeads + a.l.numKvHeads;
      const T* e = reinterpret_cast<const T*>(&raw[k]);
      float v[D];
#pragma unroll
      for (int i = 0; i < D; ++i) v[i] = toF(e[i]);
      if (normed) {
        float ss = 0;
#pragma unroll
        for (int i = 0; i < D; ++i) ss += v[i] * v[i];
        for (int o = lanes / 2; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        const W* norm = isQ ? a.qNorm : a.kNorm;
        if (!isV && norm) {
          const float r = 1.0f / sqrtf(ss / float(hd) + a.eps);
#pragma unroll
          for (int i = 0; i < D; ++i) v[i] = toF(fromF<T>(toF(norm[d0 + i]) * (v[i] * r)));
        }
      }
      float other[D];
#pragma unroll
      for (int i = 0; i < D; ++i) other[i] = __shfl_xor_sync(0xffffffffu, v[i], partner);
      if (c >= chunks) continue;
      if (!isV) {
        if (d0 < 2 * half) {
          const bool low = d0 < half;
          const int angle = low ? d0 : d0 - half;  // the chunk's dims' angles: angle ..
#pragma unroll
          for (int i = 0; i < D; ++i) {
            const float cs = cosAt[angle + i], sn = sinAt[angle + i];
            v[i] = low ? v[i] * cs - other[i] * sn : v[i] * cs + other[i] * sn;
          }
        }
        T stored[D];
#pragma unroll
        for (int i = 0; i < D; ++i) stored[i] = fromF<T>(v[i]);
        storeVec<T, D>(row + int64_t(c) * D, stored);
#pragma unroll
        for (int i = 0; i < D; ++i) v[i] = toF(stored[i]);
      }
      if (!isQ && cached) {
        C* cacheRow = (isV ? a.vCache : a.kCache) + slot * a.l.numKvHeads * hd +
                      int64_t(h - a.l.numHeads - (isV ? a.l.numKvHeads : 0)) * hd + d0;
        C out[D];
#pragma unroll
        for (int i = 0; i < D; ++i) out[i] = fromF<C>(v[i]);
        storeVec<C, D>(cacheRow, out);
      }
    }
  }
}

// The rows (tokens) from which a step with no delta takes ropeKvRowsKernel: decode steps of 32
// and more gained. H200, bench/decode_step.mjs, LoRA off, context 192, GPU ms a step, a warp a
// head -> a block a token: Qwen3-0.6B 12 rows 0.822 -> 0.865, 16 0.872 -> 0.916, 24 1.296 ->
// 1.296, 32 1.366 -> 1.343, 48 1.506 -> 1.472, 64 1.537 -> 1.518, 96 2.048 -> 1.924; Qwen3-8B
// (12 layers) 16 1.831 -> 1.842, 32 1.985 -> 1.990, 64 2.108 -> 2.083.
constexpr int64_t kRowsKernelFrom = 32;

// Threads a block of ropeKvRowsKernel: kRowChunks chunks each (whole warps, 64 to kRowsThreads),
// so that small rows make small blocks and more of them fit an SM (Qwen3-0.6B's 512 chunks in
// 128 threads: 0.87 -> 0.79 ms a 4096-token step against 256; Qwen3-8B's 768 in 192: 1.80 ->
// 1.79).
unsigned rowsThreads(HeadLayout l, size_t elem) {
  const int64_t chunks = int64_t(l.numHeads + 2 * l.numKvHeads) * l.headDim / int64_t(16 / elem);
  const int64_t warps = (chunks + kRowChunks * 32 - 1) / (kRowChunks * 32);
  return unsigned(std::clamp<int64_t>(warps * 32, 64, kRowsThreads));
}

// Whether ropeKvRowsKernel takes this layout: 16-byte chunks of D elements, headDim / D lanes a
// head and the rotary half / D lanes each a power of two up to a warp, the rows and the caches'
// D-element runs aligned (a cache row starts a whole number of heads in).
bool rowsKernelTakes(const void* qkv, size_t elem, int64_t rowWidth, const KvCache& c, size_t cacheElem, HeadLayout l,
                     int half) {
  const int D = int(16 / elem), lanes = l.headDim / D;
  const auto pow2 = [](int x) { return x > 0 && (x & (x - 1)) == 0; };
  const auto aligned = [&](const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; };
  return l.headDim % D == 0 && pow2(lanes) && lanes <= 32 && half <= kMaxHalf && half % D == 0 && pow2(half / D) &&
         rowWidth % D == 0 && aligned(qkv, 16) && aligned(c.k, D * cacheElem) && aligned(c.v, D * cacheElem);
}

}  // namespace

void ropeKvWrite(DType act, void* qkv, const int32_t* positions, const float* invFreq, int half, const Weights* qNorm,
                 const Weights* kNorm, float eps, KvCache c, const int32_t* slots, int64_t n, HeadLayout l,
                 const LoraDelta& d) {
  const int heads = l.numHeads + 2 * l.numKvHeads;
  const int64_t warps = n * heads;
  if (warps == 0) return;
  withAct(act, [&](auto tt) {
    withAct(c.dtype, [&](auto ct) {
      withFloat(qNorm ? qNorm->dtype : DType::F32, [&](auto wt) {
        using T = decltype(tt);
        using C = decltype(ct);
        using W = decltype(wt);
        const RopeKvArgs<T, C, W> a{static_cast<T*>(qkv), positions, invFreq, half,
            qNorm ? static_cast<const W*>(qNorm->data) : nullptr, kNorm ? static_cast<const W*>(kNorm->data) : nullptr,
            eps, static_cast<C*>(c.k), static_cast<C*>(c.v), slots, c.numBlocks * c.blockSize, n, l, l.stride()};
        if constexpr (std::is_same_v<T, bf16>) {
          if (d.t && deltaTilesOf(d, l.headDim) && l.headDim <= 512 && n >= kTilesMinRows) {
            const dim3 grid{unsigned(heads), unsigned((n + 7) / 8)};
            return launch("ropeKvWrite kernel", ropeKvTilesKernel<C, W>, grid, l.headDim / 16 * 32,
                size_t(8) * l.headDim * sizeof(float), a, d);
          }
        }
        if (!d.t && n >= kRowsKernelFrom) {  // ropeKvRowsKernel; below, a warp a head
          if (rowsKernelTakes(qkv, sizeof(T), a.rowWidth, c, sizeof(C), l, half))
            return launch("ropeKvWrite kernel", ropeKvRowsKernel<T, C, W>, unsigned(n), rowsThreads(l, sizeof(T)), 0, a);
        }
        // Few rows (decode) with a delta: blocks of 2 warps, so that its bT spreads over more SMs (a
        // block of 8 at one row read a sixth of Qwen3-8B's 196 KB through one SM's share of L2).
        // Without one, blocks of 8 (bench/decode_step.mjs, Qwen3-0.6B LoRA off, GPU ms a step, 2 ->
        // 8 warps: 8 rows 0.816 -> 0.806, 32 rows 1.427 -> 1.412; 1 and 4 rows and Qwen3-8B equal).
        const int perBlock = !d.t || warps >= int64_t(kMaxWarps) * smCount() ? kMaxWarps : 2;
        launch("ropeKvWrite kernel", ropeKvKernel<T, C, W>, blocksFor(warps, perBlock), perBlock * 32,
            size_t(perBlock) * l.headDim * sizeof(float), a, d, l.headDim % 4 == 0 && deltaRunsOf(d, 4, sizeof(T)));
      });
    });
  });
}

}  // namespace mstar::gpu

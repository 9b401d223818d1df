// The attention prologue in one launch: an adapted qkv projection's delta (LoraDelta), per-head
// RMSNorm of q and k (Qwen3; optional), RoPE on q and k, and the k and v rows into their
// paged-cache slot. It replaces headRmsNorm + rope + kvWrite (three launches a layer) and
// rounds between the stages as those do (qkv is stored in the activation type after each),
// so either path gives the same values.
#include "common.cuh"
#include "lora_delta.cuh"

namespace mstar::gpu {
namespace {

constexpr int kMaxWarps = 8;

// One warp per (token, head) over the q heads, the k heads, then the v heads of fused qkv
// rows, in place: q and k take their delta, norm and RoPE, k and v go to their paged-cache
// slot (v, with a delta, back to qkv too). A head's row goes through shared memory because
// RoPE pairs dim i with i + half, which another lane may hold. (A v row taken by its k head's
// warp made that warp's delta two round trips, one after the other.)
template <typename T, typename C, typename W>
__global__ __launch_bounds__(kMaxWarps * 32) void ropeKvKernel(T* qkv, const int32_t* positions, const float* invFreq,
                                                               int half, const W* qNorm, const W* kNorm, float eps,
                                                               C* kCache, C* vCache, const int32_t* slots,
                                                               int64_t numSlots, int64_t n, HeadLayout l,
                                                               int64_t rowWidth, LoraDelta delta, bool deltaVec) {
  extern __shared__ float rows[];  // [warps][headDim]: each warp's head row
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int heads = l.numHeads + 2 * l.numKvHeads, hd = l.headDim;
  const int64_t j = min(blockIdx.x * int64_t(warps) + warp, n * heads - 1);
  const int64_t t = j / heads;
  const int h = int(j % heads);
  const bool isQ = h < l.numHeads, isV = h >= l.numHeads + l.numKvHeads;
  const int64_t col = int64_t(h) * hd;
  const int32_t loraSlot = delta.t ? delta.slotOfRow[t] : 0;
  const DeltaPlan plan = deltaPlan(delta, deltaVec, loraSlot, col, col + hd);
  for (int d = lane; d < hd; d += 32) prefetchDeltas<T>(delta, plan, col + d);
  awaitPrior();
  if (blockIdx.x * int64_t(warps) + warp >= n * heads) return;  // whole warps leave together; no block-wide sync below
  T* x = qkv + t * rowWidth + col;
  float* row = rows + warp * hd;

  const float pos = float(positions[t]);  // loaded early: nothing below waits on it first
  const W* norm = isQ ? qNorm : kNorm;
  const int64_t slot = isQ ? -1 : slots[t];
  const bool cache = slot >= 0 && slot < numSlots;
  C* cacheRow = (isV ? vCache : kCache) + slot * l.numKvHeads * hd +
                int64_t(h - l.numHeads - (isV ? l.numKvHeads : 0)) * hd;
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
  __syncwarp();
  if (isV) {  // no norm, no RoPE
    for (int d = lane; d < hd; d += 32) {
      const T stored = fromF<T>(row[d]);
      if (delta.t) x[d] = stored;
      if (cache) cacheRow[d] = fromF<C>(toF(stored));
    }
    return;
  }
  if (norm) {
    const float r = 1.0f / sqrtf(warpSum(ss) / float(hd) + eps);
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
  for (int i = lane; i < half; i += 32) {
    float s, c;
    sincosf(pos * invFreq[i], &s, &c);
    const float a = row[i], b = row[i + half];
    store(i, a * c - b * s);
    store(i + half, b * c + a * s);
  }
  for (int d = 2 * half + lane; d < hd; d += 32) store(d, row[d]);  // past the rotary dims
}

}  // namespace

void ropeKvWrite(DType act, void* qkv, const int32_t* positions, const float* invFreq, int half, const Weights* qNorm,
                 const Weights* kNorm, float eps, KvCache c, const int32_t* slots, int64_t n, HeadLayout l,
                 const LoraDelta& d) {
  const int64_t warps = n * (l.numHeads + 2 * l.numKvHeads);
  if (warps == 0) return;
  // Few rows (decode): blocks of 2 warps, so that a delta's bT spreads over more SMs (a block of
  // 8 at one row read a sixth of Qwen3-8B's 196 KB through one SM's share of L2).
  const int perBlock = warps >= int64_t(kMaxWarps) * smCount() ? kMaxWarps : 2;
  const size_t shared = size_t(perBlock) * l.headDim * sizeof(float);
  withAct(act, [&](auto tt) {
    withAct(c.dtype, [&](auto ct) {
      withFloat(qNorm ? qNorm->dtype : DType::F32, [&](auto wt) {
        using T = decltype(tt);
        using C = decltype(ct);
        using W = decltype(wt);
        launch("ropeKvWrite kernel", ropeKvKernel<T, C, W>, blocksFor(warps, perBlock), perBlock * 32, shared,
            static_cast<T*>(qkv), positions, invFreq, half, qNorm ? static_cast<const W*>(qNorm->data) : nullptr,
            kNorm ? static_cast<const W*>(kNorm->data) : nullptr, eps, static_cast<C*>(c.k), static_cast<C*>(c.v),
            slots, c.numBlocks * c.blockSize, n, l, l.stride(), d, l.headDim % 4 == 0 && deltaRunsOf(d, 4, sizeof(T)));
      });
    });
  });
}

}  // namespace mstar::gpu

// The attention prologue in one launch: an adapted qkv projection's delta (LoraDelta), per-head
// RMSNorm of q and k (Qwen3; optional), RoPE on q and k, and the k and v rows into their
// paged-cache slot. It replaces headRmsNorm + rope + kvWrite (three launches a layer) and
// rounds between the stages as those do (qkv is stored in the activation type after each),
// so either path gives the same values.
#include "common.cuh"
#include "lora_delta.cuh"

namespace mstar::gpu {
namespace {

constexpr int kWarps = 8;

// One warp per (token, q or k head). The head row goes through shared memory because
// RoPE pairs dim i with i + half, which another lane may hold. A k-head warp also writes
// its k row and the matching v row to the cache (and, with a delta, the v row back to qkv).
template <typename T, typename C, typename W>
__global__ __launch_bounds__(kWarps * 32) void ropeKvKernel(T* qkv, const int32_t* positions, const float* invFreq,
                                                            int half, const W* qNorm, const W* kNorm, float eps,
                                                            C* kCache, C* vCache, const int32_t* slots,
                                                            int64_t numSlots, int64_t n, HeadLayout l, int64_t rowWidth,
                                                            LoraDelta delta, bool deltaVec) {
  extern __shared__ float rows[];  // [kWarps][2][headDim]: the head's row, and a k head's v row
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int heads = l.numHeads + l.numKvHeads, hd = l.headDim;
  const int64_t j = min(blockIdx.x * int64_t(kWarps) + warp, n * heads - 1);
  const int64_t t = j / heads;
  const int h = int(j % heads);
  const bool isK = h >= l.numHeads;
  const int64_t col = int64_t(h) * hd, kvWidth = int64_t(l.numKvHeads) * hd;
  const int32_t loraSlot = delta.t ? delta.slotOfRow[t] : 0;
  for (int d = lane; d < hd; d += 32) {
    prefetchDeltas<T>(delta, loraSlot, col + d);
    if (isK) prefetchDeltas<T>(delta, loraSlot, col + kvWidth + d);
  }
  awaitPrior();
  if (blockIdx.x * int64_t(kWarps) + warp >= n * heads) return;  // whole warps leave together; no block-wide sync below
  T* x = qkv + t * rowWidth + int64_t(h) * hd;
  float* row = rows + warp * 2 * hd;
  float* vRowOf = row + hd;

  const float pos = float(positions[t]);  // loaded early: nothing below waits on it first
  const W* norm = isK ? kNorm : qNorm;
  const int64_t slot = isK ? slots[t] : -1;
  const bool cache = slot >= 0 && slot < numSlots;
  const bool vRow = isK && (cache || delta.t);  // this k head's v row: to the cache, and its delta back to qkv
  // The head's row (and the v row) with the delta into shared memory, kDims consecutive dims
  // a lane a round (a delta's loads of bT then cover the lane's dims at once).
  constexpr int kDims = 4;
  auto withDeltas = [&](int d0, int64_t base, float* dst) {
    float v[kDims];
#pragma unroll
    for (int e = 0; e < kDims; ++e) v[e] = toF(x[base + min(d0 + e, hd - 1)]);
    addDeltasRun<T, kDims>(delta, deltaVec, t, loraSlot, col + base + d0, v);
    float sq = 0;
#pragma unroll
    for (int e = 0; e < kDims; ++e)
      if (d0 + e < hd) {
        dst[d0 + e] = v[e];
        sq += v[e] * v[e];
      }
    return sq;
  };
  float ss = 0;
  for (int d0 = lane * kDims; d0 < hd; d0 += 32 * kDims) {
    ss += withDeltas(d0, 0, row);
    if (vRow) withDeltas(d0, kvWidth, vRowOf);
  }
  __syncwarp();
  if (norm) {
    const float r = 1.0f / sqrtf(warpSum(ss) / float(hd) + eps);
    for (int d = lane; d < hd; d += 32) row[d] = toF(fromF<T>(toF(norm[d]) * (row[d] * r)));
  }
  __syncwarp();
  const int64_t at = slot * kvWidth + int64_t(h - l.numHeads) * hd;
  // Dim d's value v, rotated or not, to qkv, and a k head's (with its v row) to the cache.
  auto store = [&](int d, float v) {
    const T stored = fromF<T>(v);
    x[d] = stored;
    if (!vRow) return;
    const T vStored = fromF<T>(vRowOf[d]);
    if (delta.t) x[kvWidth + d] = vStored;
    if (cache) {
      kCache[at + d] = fromF<C>(toF(stored));
      vCache[at + d] = fromF<C>(toF(vStored));
    }
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
  const int64_t warps = n * (l.numHeads + l.numKvHeads);
  if (warps == 0) return;
  const size_t shared = size_t(kWarps) * 2 * l.headDim * sizeof(float);
  withAct(act, [&](auto tt) {
    withAct(c.dtype, [&](auto ct) {
      withFloat(qNorm ? qNorm->dtype : DType::F32, [&](auto wt) {
        using T = decltype(tt);
        using C = decltype(ct);
        using W = decltype(wt);
        launch("ropeKvWrite kernel", ropeKvKernel<T, C, W>, blocksFor(warps, kWarps), kWarps * 32, shared,
            static_cast<T*>(qkv), positions, invFreq, half, qNorm ? static_cast<const W*>(qNorm->data) : nullptr,
            kNorm ? static_cast<const W*>(kNorm->data) : nullptr, eps, static_cast<C*>(c.k), static_cast<C*>(c.v),
            slots, c.numBlocks * c.blockSize, n, l, l.stride(), d, l.headDim % 4 == 0 && deltaRunsOf(d, 4, sizeof(T)));
      });
    });
  });
}

}  // namespace mstar::gpu

// The attention prologue in one launch: per-head RMSNorm of q and k (Qwen3; optional),
// RoPE on q and k, and the k and v rows into their paged-cache slot. It replaces
// headRmsNorm + rope + kvWrite (three launches a layer) and rounds between the stages as
// those do (qkv is stored in the activation type after each), so either path gives the
// same values.
#include "common.cuh"

namespace mstar::gpu {
namespace {

constexpr int kWarps = 8;

// One warp per (token, q or k head). The head row goes through shared memory because
// RoPE pairs dim i with i + half, which another lane may hold. A k-head warp also writes
// its k row and the matching v row to the cache.
template <typename T, typename C, typename W>
__global__ __launch_bounds__(kWarps * 32) void ropeKvKernel(T* qkv, const int32_t* positions, const float* invFreq,
                                                            int half, const W* qNorm, const W* kNorm, float eps,
                                                            C* kCache, C* vCache, const int32_t* slots,
                                                            int64_t numSlots, int64_t n, HeadLayout l, int64_t rowWidth) {
  awaitPrior();
  extern __shared__ float rows[];  // [kWarps][headDim]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int heads = l.numHeads + l.numKvHeads, hd = l.headDim;
  const int64_t j = blockIdx.x * int64_t(kWarps) + warp;
  if (j >= n * heads) return;  // whole warps leave together; no block-wide sync below
  const int64_t t = j / heads;
  const int h = int(j % heads);
  const bool isK = h >= l.numHeads;
  T* x = qkv + t * rowWidth + int64_t(h) * hd;
  float* row = rows + warp * hd;

  const float pos = float(positions[t]);  // loaded early: nothing below waits on it first
  const W* norm = isK ? kNorm : qNorm;
  float r = 1;
  if (norm) {
    float ss = 0;
    for (int d = lane; d < hd; d += 32) {
      float v = toF(x[d]);
      ss += v * v;
    }
    r = 1.0f / sqrtf(warpSum(ss) / float(hd) + eps);
  }
  for (int d = lane; d < hd; d += 32) {
    float v = toF(x[d]);
    row[d] = norm ? toF(fromF<T>(toF(norm[d]) * (v * r))) : v;
  }
  __syncwarp();
  const int64_t slot = isK ? slots[t] : -1;
  const bool cache = slot >= 0 && slot < numSlots;
  const int64_t kvWidth = int64_t(l.numKvHeads) * hd;
  const int64_t at = slot * kvWidth + int64_t(h - l.numHeads) * hd;
  for (int d = lane; d < hd; d += 32) {
    float v = row[d];
    if (d < 2 * half) {
      const int i = d % half;
      const float angle = pos * invFreq[i];
      const float c = cosf(angle), s = sinf(angle);
      v = d < half ? v * c - row[d + half] * s : v * c + row[d - half] * s;
    }
    const T stored = fromF<T>(v);
    x[d] = stored;
    if (cache) {
      kCache[at + d] = fromF<C>(toF(stored));
      vCache[at + d] = fromF<C>(toF(x[kvWidth + d]));  // this k head's v row
    }
  }
}

}  // namespace

void ropeKvWrite(DType act, void* qkv, const int32_t* positions, const float* invFreq, int half, const Weights* qNorm,
                 const Weights* kNorm, float eps, KvCache c, const int32_t* slots, int64_t n, HeadLayout l) {
  const int64_t warps = n * (l.numHeads + l.numKvHeads);
  if (warps == 0) return;
  const size_t shared = size_t(kWarps) * l.headDim * sizeof(float);
  withAct(act, [&](auto tt) {
    withAct(c.dtype, [&](auto ct) {
      withFloat(qNorm ? qNorm->dtype : DType::F32, [&](auto wt) {
        using T = decltype(tt);
        using C = decltype(ct);
        using W = decltype(wt);
        launch("ropeKvWrite kernel", ropeKvKernel<T, C, W>, blocksFor(warps, kWarps), kWarps * 32, shared,
            static_cast<T*>(qkv), positions, invFreq, half, qNorm ? static_cast<const W*>(qNorm->data) : nullptr,
            kNorm ? static_cast<const W*>(kNorm->data) : nullptr, eps, static_cast<C*>(c.k), static_cast<C*>(c.v),
            slots, c.numBlocks * c.blockSize, n, l, l.rowWidth());
      });
    });
  });
}

}  // namespace mstar::gpu

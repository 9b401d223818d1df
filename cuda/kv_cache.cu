// KV write: each token's k and v heads go to its slot (block * blockSize + offset) of
// the paged cache. A negative slot (padding) is skipped, as on the CPU; so is a slot
// past the cache, which the binding cannot check without waiting for the GPU.
#include "common.cuh"

namespace mstar::gpu {
namespace {

template <typename T, typename C>
__global__ void kvWriteKernel(C* kCache, C* vCache, const T* qkv, const int32_t* slots, int64_t numSlots,
                              int64_t kOffset, int64_t rowWidth, int64_t kvWidth) {
  awaitPrior();
  int64_t t = blockIdx.x;
  int64_t slot = slots[t];
  if (slot < 0 || slot >= numSlots) return;
  const T* k = qkv + t * rowWidth + kOffset;
  const T* v = k + kvWidth;
  for (int64_t i = threadIdx.x; i < kvWidth; i += blockDim.x) {
    kCache[slot * kvWidth + i] = fromF<C>(toF(k[i]));
    vCache[slot * kvWidth + i] = fromF<C>(toF(v[i]));
  }
}

}  // namespace

void kvWrite(DType act, KvCache c, const void* qkv, const int32_t* slots, int64_t n, HeadLayout l) {
  if (n == 0) return;
  int64_t kvWidth = int64_t(l.numKvHeads) * l.headDim;
  withAct(act, [&](auto t) {
    withAct(c.dtype, [&](auto cache) {
      using T = decltype(t);
      using C = decltype(cache);
      launch("kvWrite kernel", kvWriteKernel<T, C>, unsigned(n), 128, 0, static_cast<C*>(c.k), static_cast<C*>(c.v),
          static_cast<const T*>(qkv), slots, c.numBlocks * c.blockSize, int64_t(l.numHeads) * l.headDim, l.stride(),
          kvWidth);
    });
  });
}

}  // namespace mstar::gpu

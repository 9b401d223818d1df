// Rotary position embedding, rotate-half pairing (dim i with i + half) on every q and k
// head, in place. Dims past 2 * half (partial rotary) are left alone.
#include "common.cuh"

namespace mstar::gpu {
namespace {

// One thread per (token, frequency): the angle and its cos/sin are computed once and
// applied to all q and k heads. cosf/sinf (not the fast intrinsics) with the f32 product
// pos * invFreq, as the CPU and torch form it.
template <typename T>
__global__ void ropeKernel(T* qkv, const int32_t* positions, const float* invFreq, int64_t n, int heads, int headDim,
                           int64_t rowWidth, int half) {
  awaitPrior();
  int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (j >= n * half) return;
  int64_t t = j / half;
  int i = int(j % half);
  float angle = float(positions[t]) * invFreq[i];
  float c = cosf(angle), s = sinf(angle);
  T* row = qkv + t * rowWidth;
  for (int h = 0; h < heads; ++h) {
    T* x = row + int64_t(h) * headDim;
    float x1 = toF(x[i]), x2 = toF(x[i + half]);
    x[i] = fromF<T>(x1 * c - x2 * s);
    x[i + half] = fromF<T>(x2 * c + x1 * s);
  }
}

}  // namespace

void rope(DType act, void* qkv, const int32_t* positions, const float* invFreq, int64_t n, HeadLayout l, int half) {
  if (n == 0) return;
  withAct(act, [&](auto t) {
    using T = decltype(t);
    launch("rope kernel", ropeKernel<T>, blocksFor(n * half, 256), 256, 0, static_cast<T*>(qkv), positions, invFreq, n,
        l.numHeads + l.numKvHeads, l.headDim, l.stride(), half);
  });
}

}  // namespace mstar::gpu

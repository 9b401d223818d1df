// Row selection: out[r] = x[idx[r]] (the last token of each sequence before the logits),
// and a decode step's input tokens taken from the previous step's samples.
#include "common.cuh"

namespace mstar::gpu {
namespace {

// One block per output row; an index outside x gives zeros rather than a fault.
template <typename T>
__global__ void gatherKernel(T* out, const T* x, int64_t xRows, const int32_t* idx, int64_t dim) {
  awaitPrior();
  int64_t r = blockIdx.x;
  int32_t i = idx[r];
  bool ok = i >= 0 && i < xRows;
  const T* src = x + (ok ? int64_t(i) : 0) * dim;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) out[r * dim + c] = ok ? src[c] : fromF<T>(0.0f);
}

// One thread per token; an index past the samples leaves the row as it was.
__global__ void feedTokensKernel(int32_t* tokens, int32_t* embedRows, const int32_t* sampled, int64_t numSampled,
                                 const int32_t* from, const int32_t* rowSlots, int vocab, int64_t n) {
  awaitPrior();
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n || from[i] < 0 || from[i] >= numSampled) return;
  const int32_t token = sampled[from[i]];
  tokens[i] = token;
  embedRows[i] = rowSlots[i] * vocab + token;
}

}  // namespace

void feedTokens(int32_t* tokens, int32_t* embedRows, const int32_t* sampled, int64_t numSampled, const int32_t* from,
                const int32_t* rowSlots, int vocab, int64_t n) {
  if (n == 0) return;
  launch("feedTokens kernel", feedTokensKernel, blocksFor(n, 128), 128, 0, tokens, embedRows, sampled, numSampled,
      from, rowSlots, vocab, n);
}

void gatherRows(DType act, void* out, const void* x, int64_t xRows, const int32_t* idx, int64_t m, int64_t dim) {
  if (m == 0 || dim == 0) return;
  withAct(act, [&](auto t) {
    using T = decltype(t);
    launch("gatherRows kernel", gatherKernel<T>, unsigned(m), 256, 0, static_cast<T*>(out), static_cast<const T*>(x),
        xRows, idx, dim);
  });
}

}  // namespace mstar::gpu

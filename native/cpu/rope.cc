// Rotary position embedding with the rotate-half pairing (dim i with dim i + half), as
// transformers' Llama/Qwen apply it; dims past 2 * half (partial rotary) are left as is.
#include <cmath>

#include "cpu/ops.h"
#include "thread_pool.h"

namespace mstar::cpu {

void rope(float* qkv, const int32_t* positions, const float* invFreq, int64_t n, HeadLayout l, int half) {
  int heads = l.numHeads + l.numKvHeads;
  parallelFor(n, 4, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float pos = float(positions[t]);
      for (int i = 0; i < half; ++i) {
        float angle = pos * invFreq[i];  // f32 product, as torch forms freqs
        float c = std::cos(angle), s = std::sin(angle);
        for (int h = 0; h < heads; ++h) {
          float* x = qkv + t * l.stride() + int64_t(h) * l.headDim;
          float x1 = x[i], x2 = x[i + half];
          x[i] = x1 * c - x2 * s;
          x[i + half] = x2 * c + x1 * s;
        }
      }
    }
  });
}

}  // namespace mstar::cpu

// x · Wᵀ with f32 accumulation. Work is split over output features so each thread widens
// a weight row to f32 once and reuses it for every input row (decode and prefill alike).
#include <vector>

#include "cpu/ops.h"
#include "thread_pool.h"

namespace mstar::cpu {
namespace {

// Eight independent partial sums let the compiler vectorise without -ffast-math.
float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float tail = 0;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

}  // namespace

void linear(float* out, const float* x, Weights w, const Weights* bias, int64_t n, int64_t in, int64_t outF,
            bool accumulate) {
  const int64_t ld = w.ld ? w.ld : in;
  parallelFor(outF, 8, [&](int64_t b, int64_t e) {
    std::vector<float> row(w.dtype == DType::F32 ? 0 : size_t(in));
    for (int64_t o = b; o < e; ++o) {
      const float* wr;
      if (w.dtype == DType::F32) {
        wr = static_cast<const float*>(w.data) + o * ld;
      } else {
        convertFloats(row.data(), DType::F32, static_cast<const uint16_t*>(w.data) + o * ld, w.dtype, size_t(in));
        wr = row.data();
      }
      float bo = bias ? loadFloat(bias->data, bias->dtype, size_t(o)) : 0.0f;
      for (int64_t r = 0; r < n; ++r) {
        float v = dot(x + r * in, wr, in) + bo;
        out[r * outF + o] = accumulate ? out[r * outF + o] + v : v;
      }
    }
  });
}

}  // namespace mstar::cpu

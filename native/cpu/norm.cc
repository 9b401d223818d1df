// RMSNorm variants, computed as transformers does: x * rsqrt(mean(x^2) + eps), then * w.
#include <cmath>

#include "cpu/ops.h"
#include "thread_pool.h"

namespace mstar::cpu {
namespace {

void normRow(float* out, const float* x, Weights w, int64_t dim, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < dim; ++i) ss += double(x[i]) * x[i];
  float r = 1.0f / std::sqrt(float(ss / double(dim)) + eps);
  for (int64_t i = 0; i < dim; ++i) out[i] = loadFloat(w.data, w.dtype, size_t(i)) * (x[i] * r);
}

}  // namespace

void rmsNorm(float* out, const float* x, Weights w, int64_t rows, int64_t dim, float eps) {
  parallelFor(rows, 16, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) normRow(out + r * dim, x + r * dim, w, dim, eps);
  });
}

void addRmsNorm(float* residual, const float* x, Weights w, float* out, int64_t rows, int64_t dim, float eps,
                int64_t ldx, const LoraDelta& d) {
  if (!ldx) ldx = dim;
  parallelFor(rows, 16, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      float* res = residual + r * dim;
      for (int64_t i = 0; i < dim; ++i) res[i] += x[r * ldx + i] + (d.t ? loraDelta(d, r, i) : 0.0f);
      normRow(out + r * dim, res, w, dim, eps);
    }
  });
}

void headRmsNorm(float* qkv, Weights qw, Weights kw, int64_t n, HeadLayout l, float eps) {
  int heads = l.numHeads + l.numKvHeads;  // q heads then k heads; v is left alone
  parallelFor(n * heads, 64, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      int64_t row = j / heads;
      int h = int(j % heads);
      float* x = qkv + row * l.stride() + int64_t(h) * l.headDim;
      normRow(x, x, h < l.numHeads ? qw : kw, l.headDim, eps);
    }
  });
}

}  // namespace mstar::cpu

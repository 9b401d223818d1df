// Row gathers and element-wise ops: embedding lookup, SiLU-and-mul, add, row selection.
#include <cmath>
#include <cstring>

#include "cpu/ops.h"
#include "thread_pool.h"

namespace mstar::cpu {

void embedding(float* out, Weights table, const int32_t* ids, int64_t n, int64_t dim) {
  size_t rowBytes = size_t(dim) * dtypeSize(table.dtype);
  parallelFor(n, 16, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const char* src = static_cast<const char*>(table.data) + size_t(ids[r]) * rowBytes;
      convertFloats(out + r * dim, DType::F32, src, table.dtype, size_t(dim));
    }
  });
}

void siluMul(float* out, const float* gateUp, int64_t n, int64_t inter, int64_t ldg, const LoraDelta& d) {
  if (!ldg) ldg = 2 * inter;
  parallelFor(n * inter, 1 << 14, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      int64_t r = j / inter, i = j % inter;
      float g = gateUp[r * ldg + i], u = gateUp[r * ldg + inter + i];
      if (d.t) {
        g += loraDelta(d, r, i);
        u += loraDelta(d, r, inter + i);
      }
      out[j] = g / (1.0f + std::exp(-g)) * u;
    }
  });
}

void add(float* out, const float* a, const float* b, int64_t n) {
  parallelFor(n, 1 << 15, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) out[i] = a[i] + b[i];
  });
}

void gatherRows(float* out, const float* x, const int32_t* idx, int64_t m, int64_t dim) {
  for (int64_t r = 0; r < m; ++r) std::memcpy(out + r * dim, x + int64_t(idx[r]) * dim, size_t(dim) * 4);
}

void feedTokens(int32_t* tokens, int32_t* embedRows, const int32_t* sampled, const int32_t* from, const int32_t* rowSlots,
                int vocab, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (from[i] < 0) continue;
    tokens[i] = sampled[from[i]];
    embedRows[i] = rowSlots[i] * vocab + tokens[i];
  }
}

}  // namespace mstar::cpu

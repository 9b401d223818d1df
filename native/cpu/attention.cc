// Paged KV write and causal attention over a block table. One code path serves prefill,
// a prefill chunk on top of cached blocks, and decode: a query at position p sees cache
// positions 0..p of its own sequence.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/ops.h"
#include "thread_pool.h"

namespace mstar::cpu {

void kvWrite(KvCache c, const float* qkv, const int32_t* slots, int64_t n, HeadLayout l) {
  int64_t kvWidth = int64_t(l.numKvHeads) * l.headDim;
  for (int64_t t = 0; t < n; ++t) {
    if (slots[t] < 0) continue;
    const float* k = qkv + t * l.stride() + int64_t(l.numHeads) * l.headDim;
    std::memcpy(c.k + int64_t(slots[t]) * kvWidth, k, size_t(kvWidth) * 4);
    std::memcpy(c.v + int64_t(slots[t]) * kvWidth, k + kvWidth, size_t(kvWidth) * 4);
  }
}

void pagedAttention(float* out, const float* qkv, KvCache c, const int32_t* blockTables, int64_t maxBlocks,
                    const int32_t* queryStarts, const int32_t* contextLens, int64_t numSeqs, HeadLayout l,
                    float scale) {
  int64_t numTokens = queryStarts[numSeqs];
  int64_t kvWidth = int64_t(l.numKvHeads) * l.headDim;
  int groups = l.numHeads / l.numKvHeads;
  int hd = l.headDim;
  parallelFor(numTokens * l.numHeads, 4, [&](int64_t b, int64_t e) {
    std::vector<float> scores;
    std::vector<double> acc(static_cast<size_t>(hd));
    for (int64_t j = b; j < e; ++j) {
      int64_t t = j / l.numHeads;
      int h = int(j % l.numHeads);
      int64_t s = std::upper_bound(queryStarts, queryStarts + numSeqs + 1, int32_t(t)) - queryStarts - 1;
      int64_t qLen = queryStarts[s + 1] - queryStarts[s];
      int64_t pos = contextLens[s] - qLen + (t - queryStarts[s]);
      const int32_t* table = blockTables + s * maxBlocks;
      const float* q = qkv + t * l.stride() + int64_t(h) * hd;
      int64_t kvOffset = int64_t(h / groups) * hd;

      scores.resize(size_t(pos + 1));
      float maxScore = -INFINITY;
      for (int64_t p = 0; p <= pos; ++p) {
        int64_t slot = int64_t(table[p / c.blockSize]) * c.blockSize + p % c.blockSize;
        const float* k = c.k + slot * kvWidth + kvOffset;
        float dotv = 0;
        for (int d = 0; d < hd; ++d) dotv += q[d] * k[d];
        scores[size_t(p)] = dotv * scale;
        maxScore = std::max(maxScore, scores[size_t(p)]);
      }
      double sum = 0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t p = 0; p <= pos; ++p) {
        double w = std::exp(double(scores[size_t(p)] - maxScore));
        sum += w;
        int64_t slot = int64_t(table[p / c.blockSize]) * c.blockSize + p % c.blockSize;
        const float* v = c.v + slot * kvWidth + kvOffset;
        for (int d = 0; d < hd; ++d) acc[size_t(d)] += w * v[d];
      }
      float* o = out + t * int64_t(l.numHeads) * hd + int64_t(h) * hd;
      for (int d = 0; d < hd; ++d) o[d] = float(acc[size_t(d)] / sum);
    }
  });
}

}  // namespace mstar::cpu

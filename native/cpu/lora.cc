// Segmented LoRA for a batch whose rows each run their own adapter slot (slot 0 = none).
// Shrink: t = x · Aᵀ into rank space, per slice of a fused weight. Expand: out += t · Bᵀ,
// where each output row reads the rank block of the slice it belongs to. The adapter's
// scale is folded into B when the slot is loaded.
#include <algorithm>
#include <vector>

#include "cpu/ops.h"
#include "thread_pool.h"

namespace mstar::cpu {

void loraShrink(float* t, const float* x, Weights a, const int32_t* slotOfRow, int64_t n, int64_t in,
                int64_t rankRows, const int32_t* slotRanks, int64_t slices) {
  const int64_t R = rankRows / slices;
  parallelFor(n * rankRows, 64, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      int64_t r = j / rankRows, k = j % rankRows;
      int32_t slot = slotOfRow[r];
      if (slot == 0 || (slotRanks && k % R >= slotRanks[slot * slices + k / R])) {
        t[j] = 0;
        continue;
      }
      size_t row = (size_t(slot) * size_t(rankRows) + size_t(k)) * size_t(in);
      float acc = 0;
      for (int64_t i = 0; i < in; ++i) acc += x[r * in + i] * loadFloat(a.data, a.dtype, row + size_t(i));
      t[j] = acc;
    }
  });
}

void joinWide(float* wide, const float* x, const float* t, const int32_t* slotOfRow, int64_t numSlots, int64_t n,
              int64_t in, int64_t rankRows, bool everySlot) {
  const int64_t ld = in + numSlots * rankRows;
  for (int64_t r = 0; r < n; ++r) {
    float* row = wide + r * ld;
    const float* own = everySlot ? t + (r * numSlots + slotOfRow[r]) * rankRows : t + r * rankRows;
    std::copy(x + r * in, x + (r + 1) * in, row);
    for (int64_t s = 0; s < numSlots; ++s)
      for (int64_t k = 0; k < rankRows; ++k) row[in + s * rankRows + k] = s == slotOfRow[r] && s > 0 ? own[k] : 0.0f;
  }
}

void loraExpand(float* out, const float* t, Weights b, int64_t numSlots, const int32_t* slotOfRow,
                const SliceStarts& slices, int64_t n, int64_t outF, int64_t rank, const int32_t* slotRanks) {
  const int64_t numSlices = slices.count;
  parallelFor(n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      int32_t slot = slotOfRow[r];
      if (slot == 0) continue;
      for (int64_t s = 0; s < numSlices; ++s) {
        const float* ts = t + (r * numSlices + s) * rank;
        const int64_t used = slotRanks ? slotRanks[slot * numSlices + s] : rank;
        for (int64_t o = slices.at[s]; o < slices.at[s + 1]; ++o) {
          // b: [outF, slots, slices * rank]
          size_t row = ((size_t(o) * size_t(numSlots) + size_t(slot)) * size_t(numSlices) + size_t(s)) * size_t(rank);
          float acc = 0;
          for (int64_t k = 0; k < used; ++k) acc += ts[k] * loadFloat(b.data, b.dtype, row + size_t(k));
          out[r * outF + o] += acc;
        }
      }
    }
  });
}

float loraDelta(const LoraDelta& d, int64_t r, int64_t o) {
  const int32_t slot = d.slotOfRow[r];
  if (slot <= 0 || slot >= d.numSlots) return 0;
  const int64_t s = d.slices.of(o);
  if (s == d.slices.count) return 0;
  const int64_t c = (int64_t(slot) * d.slices.count + s) * d.rank;
  const int64_t used = d.ranks ? std::min<int64_t>(d.rank, d.ranks[slot * d.slices.count + s]) : d.rank;
  const float* t = static_cast<const float*>(d.t) + r * d.ldt + c;
  const float* b = static_cast<const float*>(d.bT) + c * d.ldb + o;
  float acc = 0;
  for (int64_t k = 0; k < used; ++k) acc += t[k] * b[k * d.ldb];
  return acc;
}

void addLoraDelta(float* y, int64_t ldy, int64_t n, int64_t outF, const LoraDelta& d) {
  if (!d.t) return;
  parallelFor(n * outF, 1 << 12, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) y[(j / outF) * ldy + j % outF] += loraDelta(d, j / outF, j % outF);
  });
}

void copyRegion(void* dst, DType dt, int64_t dstCols, const void* src, DType st, int64_t rows, int64_t cols,
                int64_t rowOffset, int64_t colOffset, float scale, bool transpose, int64_t srcLd) {
  // Reads src[rows, cols] (or its transpose) and writes scale * it at (rowOffset, colOffset).
  int64_t outRows = transpose ? cols : rows, outCols = transpose ? rows : cols;
  const int64_t ld = srcLd ? srcLd : cols;
  for (int64_t i = 0; i < outRows; ++i) {
    for (int64_t j = 0; j < outCols; ++j) {
      float v = scale * loadFloat(src, st, size_t(transpose ? j * ld + i : i * ld + j));
      storeFloat(dst, dt, size_t((rowOffset + i) * dstCols + colOffset + j), v);
    }
  }
}

void loraMerge(DType dt, void* w, int64_t ldw, const void* base, const void* b, int64_t ldb, const void* a, int64_t lda,
               int64_t out, int64_t in, int64_t k) {
  parallelFor(out, 16, [&](int64_t first, int64_t last) {
    std::vector<float> acc(static_cast<size_t>(in));
    for (int64_t o = first; o < last; ++o) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t c = 0; c < k; ++c) {
        const float bv = loadFloat(b, dt, size_t(o * ldb + c));
        for (int64_t i = 0; i < in; ++i) acc[size_t(i)] += bv * loadFloat(a, dt, size_t(c * lda + i));
      }
      for (int64_t i = 0; i < in; ++i) {
        storeFloat(w, dt, size_t(o * ldw + i), loadFloat(base, dt, size_t(o * in + i)) + acc[size_t(i)]);
      }
    }
  });
}

}  // namespace mstar::cpu

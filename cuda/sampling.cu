// Token choice and log-probabilities on the GPU; only token ids and the requested
// logprobs leave the device.
//
// sample() must pick the token cpu::sample picks for the same logits. The CPU keeps the
// vocabulary's top k (logit descending, index ascending), then the shortest prefix whose
// probability reaches top-p, and draws among the kept tokens by an exponential race: token
// i gets uniform u_i from a counter-based RNG (seed, step, i), and the largest
// x_i / T - log(-log u_i) wins (Gumbel-max: a draw from softmax(x / T) over the kept set).
// On the GPU:
//  1. many blocks find each row's largest logit over slices of the vocabulary (greedy needs
//     nothing else; a 152K vocabulary is too long for one block to scan quickly), and for a
//     top-k up to 64, or top-p alone, each slice's k (or 64) largest tokens;
//  2. one block per row answers greedy rows and, for top-k / top-p, finds the smallest kept
//     key, over a 64-bit key that orders elements exactly like the CPU's sort (the logit's
//     order-preserving bits, then the inverted index): a small top-k, and a top-p cut above
//     the slices' bar, from the slices' candidates; otherwise by a radix descent over the
//     vocabulary, each pass histogramming the next 8 bits of the elements in play (count,
//     and for top-p the f64 weight e^(x/T - max/T) the CPU uses) and picking the bucket
//     where the running count or weight crosses the target; top-p's cut, where it lies
//     among the 1024 largest kept tokens, by walking them sorted as the CPU does;
//  3. many blocks run the race over slices, and one block per row takes the winner.
// Top-p's weights are summed in another order than the CPU's walk, so a cut landing within
// ~1e-16 of a boundary could go the other way; otherwise the choice is the CPU's.
#include <cstdint>

#include "common.cuh"

namespace mstar::gpu {
namespace {

constexpr int kThreads = 256;  // one histogram bucket per thread in the merge step
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// native/cpu/sampling.cc's raceScore: x / T - log(-log u), u uniform in (0, 1) from element
// i of the draw's stream splitmix64(base + i).
__device__ __forceinline__ double raceScore(float x, double temperature, uint64_t base, int64_t i) {
  double u = (double(splitmix64(base + uint64_t(i)) >> 11) + 0.5) * 0x1.0p-53;
  return double(x) / temperature - log(-log(u));
}
__device__ __forceinline__ uint64_t streamBase(uint64_t seed, uint64_t step) { return splitmix64(seed ^ splitmix64(step)); }

// Race leader of two: the larger score, ties to the lower index.
__device__ __forceinline__ bool leads(double s, int64_t i, double bestS, int64_t bestI) {
  return s > bestS || (s == bestS && i < bestI);
}

// A key whose descending order is the CPU's sort order: larger logit first, then lower
// index. -0 counts as +0 (they compare equal on the CPU, so the index decides).
__device__ __forceinline__ uint64_t keyOf(float x, int64_t i) {
  uint32_t b = __float_as_uint(x == 0.0f ? 0.0f : x);
  uint32_t ordered = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return (uint64_t(ordered) << 32) | uint64_t(0xffffffffu - uint32_t(i));
}
__device__ __forceinline__ int32_t indexOf(uint64_t key) { return int32_t(0xffffffffu - uint32_t(key)); }

__device__ uint64_t blockMax(uint64_t v, uint64_t* shared) {
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  uint64_t r = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) r = max(r, shared[w]);
  return r;
}

// Exclusive prefix sum in thread order; the block must reach it together.
__device__ double blockExclusiveSum(double v, double* shared) {
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  double incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    double n = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += n;
  }
  double excl = __shfl_up_sync(0xffffffffu, incl, 1);
  if (lane == 0) excl = 0;
  __syncthreads();
  if (lane == 31) shared[warp] = incl;
  __syncthreads();
  double offset = 0;
  for (int w = 0; w < warp; ++w) offset += shared[w];
  return offset + excl;
}

struct SelectShared {
  unsigned count[kWarps][256];
  double mass[kWarps][256];
  double scan[kWarps];
  int crossing, lastNonEmpty;
  double before;
  unsigned chosenCount;
  uint64_t found;
};

enum Mode { kCount, kMassAtLeast };

// The logits of one row and the weight the CPU gives a kept token.
template <typename T>
struct Row {
  const T* x;
  int64_t vocab;
  double temperature, maxScaled;  // weight(x) = e^(x / T - maxScaled)
  __device__ double weight(float v) const { return exp(double(v) / temperature - maxScaled); }
};

// Among the elements with key >= minKey, walked in descending key order, the first one
// whose running count (kCount) or weight (kMassAtLeast) reaches `target`. If rounding
// leaves the target unreached, the last element. Returns its key.
template <typename T>
__device__ uint64_t selectKey(const Row<T>& row, uint64_t minKey, Mode mode, double target, SelectShared& sh) {
  const int warp = threadIdx.x / 32;
  uint64_t prefix = 0;
  double acc = 0;  // count or weight of the elements before the current prefix
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < kWarps * 256; i += kThreads) {
      (&sh.count[0][0])[i] = 0;
      (&sh.mass[0][0])[i] = 0;
    }
    __syncthreads();
    for (int64_t i = threadIdx.x; i < row.vocab; i += kThreads) {
      float v = toF(row.x[i]);
      uint64_t key = keyOf(v, i);
      if (key < minKey) continue;
      if (shift < 56 && (key >> (shift + 8)) != (prefix >> (shift + 8))) continue;
      unsigned b = unsigned(key >> shift) & 0xffu;
      atomicAdd(&sh.count[warp][b], 1u);
      if (mode != kCount) atomicAdd(&sh.mass[warp][b], row.weight(v));
    }
    if (threadIdx.x == 0) {
      sh.crossing = kThreads;
      sh.lastNonEmpty = -1;
    }
    __syncthreads();
    // Thread r merges bucket 255 - r: thread order is the descending walk.
    const int b = 255 - int(threadIdx.x);
    unsigned c = 0;
    double m = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      c += sh.count[w][b];
      m += sh.mass[w][b];
    }
    double mine = mode == kCount ? double(c) : m;
    double before = acc + blockExclusiveSum(mine, sh.scan);
    bool crosses = c > 0 && before + mine >= target;
    if (crosses) atomicMin(&sh.crossing, int(threadIdx.x));
    if (c > 0) atomicMax(&sh.lastNonEmpty, int(threadIdx.x));
    __syncthreads();
    int chosen = sh.crossing < kThreads ? sh.crossing : sh.lastNonEmpty;
    if (chosen < 0) return minKey;  // nothing in play: cannot happen for a kept set
    if (int(threadIdx.x) == chosen) {
      sh.before = before;
      sh.chosenCount = c;
    }
    __syncthreads();
    acc = sh.before;
    prefix |= uint64_t(255 - chosen) << shift;
    if (sh.chosenCount == 1 && shift > 0) {
      // One element left under this prefix: find it instead of descending further.
      for (int64_t i = threadIdx.x; i < row.vocab; i += kThreads) {
        uint64_t key = keyOf(toF(row.x[i]), i);
        if (key >= minKey && (key >> shift) == (prefix >> shift)) sh.found = key;
      }
      __syncthreads();
      uint64_t found = sh.found;
      __syncthreads();  // sh is reused by the caller's next select
      return found;
    }
    __syncthreads();
  }
  return prefix;
}

// Sum of the weights of the elements with key >= minKey.
template <typename T>
__device__ double keptWeight(const Row<T>& row, uint64_t minKey, double* shared) {
  double s = 0;
  for (int64_t i = threadIdx.x; i < row.vocab; i += kThreads) {
    float v = toF(row.x[i]);
    if (keyOf(v, i) >= minKey) s += row.weight(v);
  }
  return blockSum(s, shared);
}

template <typename T>
__device__ uint64_t rowMaxKey(const T* x, int64_t vocab, uint64_t below, uint64_t* shared) {
  uint64_t best = 0;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
    uint64_t key = keyOf(toF(x[i]), i);
    if (key < below) best = max(best, key);
  }
  return blockMax(best, shared);
}

// A small top-k (the usual 20-50) is served from candidates: each slice block also keeps
// its own k largest keys, so the row's block selects among at most slices * kSliceTopK
// keys instead of scanning the whole vocabulary eight times.
constexpr int kSliceTopK = 64;     // the largest k served this way
constexpr int kSliceElems = 4096;  // the largest slice a block holds in shared memory

__host__ __device__ inline bool slicedTopK(int32_t topK, int64_t vocab, int slices) {
  return topK > 1 && topK <= kSliceTopK && (vocab + slices - 1) / slices <= kSliceElems;
}
// Top-p with no top-k below the vocabulary: the slices keep their kSliceTopK largest too, and
// every token above the largest of their kSliceTopK-th keys is among those candidates — where
// the nucleus ends above it (a language model's nucleus is usually small), the cut is found
// there; otherwise the row falls back to the search over the vocabulary.
__host__ __device__ inline bool slicedTopP(int32_t topK, float topP, int64_t vocab, int slices) {
  return topP < 1 && (topK <= 0 || topK >= vocab) && (vocab + slices - 1) / slices <= kSliceElems;
}

// The k-th largest of keys[0, count) (distinct, apart from 0s that stand for nothing), by
// the whole block: a radix descent over 8-bit digits with a shared histogram.
struct KthShared {
  unsigned hist[256];
  uint64_t prefix;
  int remaining;
};
__device__ uint64_t blockKth(const uint64_t* keys, int count, int k, KthShared& sh) {
  uint64_t prefix = 0;
  int remaining = k;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) sh.hist[b] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < count; i += blockDim.x) {
      uint64_t key = keys[i];
      if (shift == 56 || (key >> (shift + 8)) == (prefix >> (shift + 8))) atomicAdd(&sh.hist[(key >> shift) & 255], 1u);
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      // Walk the buckets from the top: lane j holds buckets 255 - 8j .. 248 - 8j; a scan over
      // the lanes finds the one whose buckets hold the remaining-th key, and it looks inside.
      const int lane = threadIdx.x;
      int c[8], mine = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) mine += c[j] = int(sh.hist[255 - (lane * 8 + j)]);
      int inclusive = mine;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        int v = __shfl_up_sync(0xffffffffu, inclusive, o);
        if (lane >= o) inclusive += v;
      }
      const unsigned crossing = __ballot_sync(0xffffffffu, inclusive - mine < remaining && remaining <= inclusive);
      if (lane == (crossing ? __ffs(crossing) - 1 : 31)) {
        int before = inclusive - mine, b = 0;  // keys in play above bucket b
        for (int j = 0; j < 8; ++j) {
          b = 255 - (lane * 8 + j);
          if (j == 7 || before + c[j] >= remaining) break;
          before += c[j];
        }
        sh.prefix = prefix | (uint64_t(b) << shift);
        sh.remaining = remaining - before;
      }
    }
    __syncthreads();
    prefix = sh.prefix;
    remaining = sh.remaining;
    __syncthreads();  // everyone has read them before thread 0 writes the next
  }
  return prefix;
}

// For each (row, slice) at [row * gridDim.y + slice]: partMax, the slice's largest key; and
// for a row served from candidates, cands[... * kSliceTopK ...]: the slice's k largest keys,
// then 0s; partLeast: the k-th of them (0 where the slice holds no more than k); and for
// top-p alone partSum: the slice's sum of e^(x/T - its max/T), in f64.
template <typename T>
__global__ __launch_bounds__(kThreads) void sliceKernel(uint64_t* partMax, uint64_t* cands, uint64_t* partLeast,
                                                        double* partSum, const T* logits, int64_t vocab,
                                                        SamplingRows p) {
  awaitPrior();
  __shared__ uint64_t maxShared[kWarps];
  __shared__ double sumShared[32];
  __shared__ uint64_t keys[kSliceElems];
  __shared__ KthShared kth;
  __shared__ int written;
  const int64_t r = blockIdx.x;
  const int64_t at = r * gridDim.y + blockIdx.y;
  const int64_t per = (vocab + gridDim.y - 1) / gridDim.y;
  const int64_t begin = blockIdx.y * per, end = min(vocab, begin + per);
  const T* x = logits + r * vocab;
  uint64_t best = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) best = max(best, keyOf(toF(x[i]), i));
  best = blockMax(best, maxShared);
  if (threadIdx.x == 0) partMax[at] = best;
  const int32_t topK = p.topK[r];
  const bool topPOnly = slicedTopP(topK, p.topP[r], vocab, gridDim.y);
  if (!(p.temperature[r] > 0 && (slicedTopK(topK, vocab, gridDim.y) || topPOnly))) return;  // uniform over the block
  const int k = topPOnly ? kSliceTopK : topK;
  const int count = int(max(int64_t(0), end - begin));
  if (topPOnly) {
    const double temperature = p.temperature[r];
    const double top = count > 0 ? double(toF(x[indexOf(best)])) / temperature : -INFINITY;
    double sum = 0;
    if (top != -INFINITY)  // a slice of nothing but -inf weighs nothing
      for (int i = threadIdx.x; i < count; i += kThreads) sum += exp(double(toF(x[begin + i])) / temperature - top);
    sum = blockSum(sum, sumShared);
    if (threadIdx.x == 0) partSum[at] = sum;
  }
  uint64_t* out = cands + at * kSliceTopK;
  for (int i = threadIdx.x; i < kSliceTopK; i += kThreads) out[i] = 0;
  for (int i = threadIdx.x; i < count; i += kThreads) keys[i] = keyOf(toF(x[begin + i]), begin + i);
  if (threadIdx.x == 0) written = 0;
  __syncthreads();
  const uint64_t least = count <= k ? 0 : blockKth(keys, count, k, kth);
  if (threadIdx.x == 0) partLeast[at] = least;
  for (int i = threadIdx.x; i < count; i += kThreads)
    if (keys[i] >= least) out[atomicAdd(&written, 1)] = keys[i];
}

// Top-p's cut, found among candidates: the kept tokens with key >= candMin, which must be
// all of the kept set's descending order down to candMin (gathered from cands, nc keys with
// 0s standing for nothing, or from the vocabulary). They are sorted in shared memory and
// walked by one thread summing weight / total in f64 exactly as the CPU's loop does.
// Returns the crossing token's key; or, where the candidates are the whole kept set
// (complete) and rounding leaves the sum short, a key that keeps them all; or 0 when the cut
// is not among them (their mass is short of topP, or there are more than kCandidates).
constexpr int kCandidates = 1024;

struct NucleusShared {
  uint64_t key[kCandidates];
  double weight[kCandidates];
  int count;
  uint64_t cut;
};

template <typename T>
__device__ uint64_t nucleusCut(const Row<T>& row, uint64_t minKey, uint64_t candMin, bool complete, double topP,
                               double total, const uint64_t* cands, int nc, NucleusShared& nu) {
  for (int i = threadIdx.x; i < kCandidates; i += kThreads) nu.key[i] = 0;  // padding sorts last
  if (threadIdx.x == 0) {
    nu.count = 0;
    nu.cut = 0;
  }
  __syncthreads();
  auto gather = [&](uint64_t key) {
    if (key == 0 || key < candMin) return;
    int at = atomicAdd(&nu.count, 1);
    if (at < kCandidates) nu.key[at] = key;
  };
  if (cands) {
    for (int i = threadIdx.x; i < nc; i += kThreads) gather(cands[i]);
  } else {
    for (int64_t i = threadIdx.x; i < row.vocab; i += kThreads) gather(keyOf(toF(row.x[i]), i));
  }
  __syncthreads();
  if (nu.count > kCandidates) return 0;  // uniform: too many to sort here
  // Bitonic sort, descending (keys are distinct: each holds its index).
  for (int k = 2; k <= kCandidates; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < kCandidates; i += kThreads) {
        int l = i ^ j;
        if (l <= i) continue;
        uint64_t a = nu.key[i], b = nu.key[l];
        if ((i & k) == 0 ? a < b : a > b) {
          nu.key[i] = b;
          nu.key[l] = a;
        }
      }
      __syncthreads();
    }
  }
  const int count = nu.count;
  for (int i = threadIdx.x; i < count; i += kThreads) nu.weight[i] = row.weight(toF(row.x[indexOf(nu.key[i])]));
  __syncthreads();
  if (threadIdx.x == 0) {
    double cum = 0;
    for (int i = 0; i < count; ++i) {
      cum += nu.weight[i] / total;
      if (cum >= topP) {
        nu.cut = nu.key[i];
        break;
      }
    }
    if (nu.cut == 0 && complete) nu.cut = minKey == 0 ? 1 : minKey;  // the CPU keeps them all
  }
  __syncthreads();
  return nu.cut;
}

// A row whose token is already chosen (greedy): the race skips it.
constexpr uint64_t kDecided = UINT64_MAX;

// Step 2: greedy rows get their token; the others get the smallest key they keep
// (minKey[r]: 0 keeps every token).
template <typename T>
__global__ __launch_bounds__(kThreads) void keepKernel(int32_t* outIds, uint64_t* minKeys, const T* logits,
                                                       int64_t vocab, SamplingRows p, const uint64_t* partMax,
                                                       const uint64_t* cands, const uint64_t* partLeast,
                                                       const double* partSum, int slices) {
  awaitPrior();
  __shared__ SelectShared sh;
  __shared__ NucleusShared nu;
  __shared__ KthShared kth;
  __shared__ uint64_t maxShared[kWarps];
  __shared__ double sumShared[32];
  const int64_t r = blockIdx.x;
  const T* x = logits + r * vocab;
  const float temperature = p.temperature[r], topP = p.topP[r];
  const int32_t topK = p.topK[r];
  uint64_t best = 0;
  for (int i = threadIdx.x; i < slices; i += kThreads) best = max(best, partMax[r * slices + i]);
  best = blockMax(best, maxShared);
  if (temperature <= 0 || topK == 1) {  // greedy: the first of tied maxima
    if (threadIdx.x == 0) {
      outIds[r] = indexOf(best);
      minKeys[r] = kDecided;
    }
    return;
  }
  Row<T> row{x, vocab, double(temperature), 0};
  row.maxScaled = double(toF(x[indexOf(best)])) / row.temperature;
  uint64_t minKey = 0;  // the kept tokens are those with key >= minKey
  int64_t keep = topK > 0 ? min(int64_t(topK), vocab) : vocab;
  // A small top-k selects among the slices' candidates, which hold every kept token.
  const bool sliced = slicedTopK(topK, vocab, slices);
  const uint64_t* rowCands = sliced ? cands + r * slices * kSliceTopK : nullptr;
  const int nc = slices * kSliceTopK;
  if (keep < vocab) minKey = sliced ? blockKth(rowCands, nc, int(keep), kth) : selectKey(row, 0, kCount, double(keep), sh);
  if (topP < 1) {
    uint64_t cut = 0;
    double total;
    if (sliced) {  // every kept token is a candidate
      double s = 0;
      for (int i = threadIdx.x; i < nc; i += kThreads)
        if (rowCands[i] != 0 && rowCands[i] >= minKey) s += row.weight(toF(x[indexOf(rowCands[i])]));
      total = blockSum(s, sumShared);
      cut = nucleusCut(row, minKey, minKey, true, double(topP), total, rowCands, nc, nu);
    } else if (slicedTopP(topK, topP, vocab, slices)) {
      // The slices' sums, rescaled to the row's max; the candidates are complete above the
      // largest of the slices' least kept keys.
      const uint64_t* least = partLeast + r * slices;
      const double* sums = partSum + r * slices;
      double s = 0;
      uint64_t above = 0;
      for (int i = threadIdx.x; i < slices; i += kThreads) {
        const uint64_t top = partMax[r * slices + i];
        if (top != 0) s += exp(double(toF(x[indexOf(top)])) / row.temperature - row.maxScaled) * sums[i];
        above = max(above, least[i]);
      }
      total = blockSum(s, sumShared);
      above = blockMax(above, maxShared);
      // At most kCandidates of them are walked: the largest, which start the kept order too.
      const uint64_t* rowAll = cands + r * nc;
      int many = 0;
      for (int i = threadIdx.x; i < nc; i += kThreads) many += rowAll[i] != 0 && rowAll[i] >= above;
      many = blockSum(many, reinterpret_cast<int*>(sumShared));
      const uint64_t candMin = many > kCandidates ? blockKth(rowAll, nc, kCandidates, kth) : above;
      cut = nucleusCut(row, minKey, candMin, candMin == 0, double(topP), total, rowAll, nc, nu);
    }
    if (cut == 0) {  // among the largest kCandidates of the whole kept set, else a radix descent
      total = keptWeight(row, minKey, sumShared);
      const uint64_t candMin = keep <= kCandidates ? minKey : selectKey(row, minKey, kCount, double(kCandidates), sh);
      cut = nucleusCut(row, minKey, candMin, keep <= kCandidates, double(topP), total, nullptr, 0, nu);
    }
    minKey = cut != 0 ? cut : selectKey(row, minKey, kMassAtLeast, double(topP) * total, sh);
  }
  if (threadIdx.x == 0) minKeys[r] = minKey;
}

// Step 3a: each slice's race leader among the kept tokens.
template <typename T>
__global__ __launch_bounds__(kThreads) void raceKernel(double* leadScore, int32_t* leadId, const uint64_t* minKeys,
                                                       const T* logits, int64_t vocab, SamplingRows p) {
  awaitPrior();
  __shared__ double sScore[kWarps];
  __shared__ int64_t sId[kWarps];
  const int64_t r = blockIdx.x;
  const uint64_t minKey = minKeys[r];
  if (minKey == kDecided) return;  // uniform over the block
  const int64_t per = (vocab + gridDim.y - 1) / gridDim.y;
  const int64_t begin = blockIdx.y * per, end = min(vocab, begin + per);
  const T* x = logits + r * vocab;
  const double temperature = p.temperature[r];
  const uint64_t base = streamBase(uint64_t(p.seeds[r]), uint64_t(p.steps[r]));
  double bestS = -INFINITY;
  int64_t bestI = INT64_MAX;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const float v = toF(x[i]);
    if (keyOf(v, i) < minKey) continue;
    const double score = raceScore(v, temperature, base, i);
    if (leads(score, i, bestS, bestI)) {
      bestS = score;
      bestI = i;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    double s2 = __shfl_xor_sync(0xffffffffu, bestS, o);
    int64_t i2 = __shfl_xor_sync(0xffffffffu, bestI, o);
    if (leads(s2, i2, bestS, bestI)) {
      bestS = s2;
      bestI = i2;
    }
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    sScore[warp] = bestS;
    sId[warp] = bestI;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < kWarps; ++w) {
    if (leads(sScore[w], sId[w], bestS, bestI)) {
      bestS = sScore[w];
      bestI = sId[w];
    }
  }
  leadScore[r * gridDim.y + blockIdx.y] = bestS;
  leadId[r * gridDim.y + blockIdx.y] = bestI == INT64_MAX ? -1 : int32_t(bestI);
}

// Step 3b: the row's winner over its slices' leaders (a slice with no kept token has none).
__global__ void pickKernel(int32_t* outIds, const uint64_t* minKeys, const double* leadScore, const int32_t* leadId,
                           int slices, int64_t n) {
  awaitPrior();
  const int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (r >= n || minKeys[r] == kDecided) return;
  double bestS = -INFINITY;
  int64_t bestI = INT64_MAX;
  for (int s = 0; s < slices; ++s) {
    const int32_t id = leadId[r * slices + s];
    if (id >= 0 && leads(leadScore[r * slices + s], id, bestS, bestI)) {
      bestS = leadScore[r * slices + s];
      bestI = id;
    }
  }
  outIds[r] = bestI == INT64_MAX ? 0 : int32_t(bestI);
}

// Log-softmax of the raw logits in f64 (as the CPU): the chosen token's logprob, then the
// k most likely tokens in order, one max pass each (k is small: OpenAI allows 20).
template <typename T>
__global__ __launch_bounds__(kThreads) void logprobsKernel(float* chosenLp, int32_t* topIds, float* topLp, int64_t k,
                                                           const T* logits, const int32_t* chosen, int64_t vocab) {
  awaitPrior();
  __shared__ uint64_t maxShared[kWarps];
  __shared__ double sumShared[32];
  const int64_t r = blockIdx.x;
  const T* x = logits + r * vocab;
  const uint64_t best = rowMaxKey(x, vocab, UINT64_MAX, maxShared);
  const double maxv = toF(x[indexOf(best)]);
  double s = 0;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) s += exp(double(toF(x[i])) - maxv);
  const double lse = maxv + log(blockSum(s, sumShared));
  if (threadIdx.x == 0) {
    int32_t c = chosen[r];
    chosenLp[r] = c >= 0 && c < vocab ? float(double(toF(x[c])) - lse) : NAN;
  }
  uint64_t below = UINT64_MAX;
  for (int64_t i = 0; i < k; ++i) {
    uint64_t key = i == 0 ? best : rowMaxKey(x, vocab, below, maxShared);
    if (threadIdx.x == 0) {
      topIds[r * k + i] = indexOf(key);
      topLp[r * k + i] = float(double(toF(x[indexOf(key)])) - lse);
    }
    below = key;
  }
}

}  // namespace

void sample(DType act, int32_t* outIds, const void* logits, int64_t n, int64_t vocab, SamplingRows p) {
  if (n == 0) return;
  const int slices = int(std::max<int64_t>(1, std::min<int64_t>(64, (vocab + 4095) / 4096)));
  const size_t parts = size_t(n) * slices;
  Scratch scratch(parts * (sizeof(uint64_t) * (2 + kSliceTopK) + 2 * sizeof(double) + sizeof(int32_t)) +
                      size_t(n) * sizeof(uint64_t),
                  "sample scratch");
  uint64_t* partMax = scratch.as<uint64_t>();
  uint64_t* partLeast = partMax + parts;
  uint64_t* cands = partLeast + parts;
  double* partSum = reinterpret_cast<double*>(cands + parts * kSliceTopK);
  double* leadScore = partSum + parts;
  uint64_t* minKeys = reinterpret_cast<uint64_t*>(leadScore + parts);
  int32_t* leadId = reinterpret_cast<int32_t*>(minKeys + n);
  withAct(act, [&](auto t) {
    using T = decltype(t);
    const T* x = static_cast<const T*>(logits);
    const dim3 sliced{unsigned(n), unsigned(slices)};
    launch("sample slice kernel", sliceKernel<T>, sliced, kThreads, 0, partMax, cands, partLeast, partSum, x, vocab, p);
    launch("sample keep kernel", keepKernel<T>, unsigned(n), kThreads, 0, outIds, minKeys, x, vocab, p, partMax, cands,
        partLeast, partSum, slices);
    launch("sample race kernel", raceKernel<T>, sliced, kThreads, 0, leadScore, leadId, minKeys, x, vocab, p);
  });
  launch("sample pick kernel", pickKernel, blocksFor(n, 128), 128, 0, outIds, minKeys, leadScore, leadId, slices, n);
}

void logprobs(DType act, float* chosenLp, int32_t* topIds, float* topLp, int64_t k, const void* logits,
              const int32_t* chosen, int64_t n, int64_t vocab) {
  if (n == 0) return;
  withAct(act, [&](auto t) {
    using T = decltype(t);
    launch("logprobs kernel", logprobsKernel<T>, unsigned(n), kThreads, 0, chosenLp, topIds, topLp, k,
        static_cast<const T*>(logits), chosen, vocab);
  });
}

}  // namespace mstar::gpu

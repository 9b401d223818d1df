// How decode attention shares a token's keys out over blocks (its splits), and how the
// splits' partial outputs merge: one rule for attention.cu, which splits and, where it merges
// itself, merges, and for the o projection's tensor-core GEMV (gemv_mma.cu), which can merge
// them as it loads its input (attention_linear.cu). The rule reads step inputs only (query
// starts, context lengths), which no op of a step writes, so either kernel knows a token's
// splits before its wait.
#pragma once
#include "common.cuh"

namespace mstar::gpu {

// Token t's sequence (the last s with queryStarts[s] <= t, as the CPU's upper_bound), its
// query rows and its context length. In a decode step token t is sequence t's one query:
// that guess and its context length load together, one round trip, and only a miss (prefill
// chunks) binary-searches.
struct TokenSpan {
  int seq;
  int64_t qStart, qEnd, ctx;
};
__device__ __forceinline__ TokenSpan tokenSpan(const int32_t* queryStarts, const int32_t* contextLens, int numSeqs,
                                               int64_t t) {
  int lo = int(min(t, int64_t(numSeqs - 1)));
  int64_t qStart = queryStarts[lo], qEnd = queryStarts[lo + 1];
  int64_t ctx = contextLens[lo];
  if (!(qStart <= t && t < qEnd)) {
    int hi = numSeqs - 1;
    lo = 0;
    while (lo < hi) {
      int mid = (lo + hi + 1) / 2;
      if (queryStarts[mid] <= t) lo = mid;
      else hi = mid - 1;
    }
    qStart = queryStarts[lo];
    qEnd = queryStarts[lo + 1];
    ctx = contextLens[lo];
  }
  return {lo, qStart, qEnd, ctx};
}

// The keys token t sees: cache positions 0 .. its own, at most maxKeys (its table's width,
// below 2^31: pagedAttention refuses wider).
__device__ __forceinline__ int keyCount(const TokenSpan& s, int64_t t, int64_t maxKeys) {
  const int64_t pos = s.ctx - (s.qEnd - s.qStart) + (t - s.qStart);
  return int(max(int64_t(0), min(pos + 1, maxKeys)));
}

// streamKernel's split of a token's keys: even shares of its own count over numSplits, none
// shorter than minShare; or all of them in one split where the shares would take fewer than
// mergeRounds rounds (roundKeys keys each) off a block's loop (their merge would cost more).
// In 32 bits: a count is below 2^31 (keyCount).
struct SplitRule {
  int numSplits;
  int minShare;
  int roundKeys;
  int mergeRounds;

  __device__ __forceinline__ int share(int count) const {
    const int s = max(minShare, (count + numSplits - 1) / numSplits);
    const int k = roundKeys;
    if ((count + k - 1) / k - (s + k - 1) / k < mergeRounds) return max(count, 1);
    return s;
  }
  // The splits that hold keys (at least 1: split 0 always runs).
  __device__ __forceinline__ int used(int count) const {
    const int s = share(count);
    return max(1, min(numSplits, (count + s - 1) / s));
  }
};

// The projection's GEMV merges a token's splits with all of their loads in flight at once, one
// round trip: each of its kMergeThreads threads takes at most kMaxRunSplits splits' loads, of one
// run of 8 outputs or of two runs (a step of twice as many outputs) with half as many splits
// each. A token of more splits (a long context) merges in attention as ever, which writes its
// row of the output. (The projection's merge of more splits in batches, a round trip each, lost
// to attention's own: Qwen3-0.6B at one sequence of 1024 keys, 16 splits in 4 batches, 0.750 ms
// a step against 0.699; bench/RESULTS.md, fifty-first session.)
constexpr int kMergeThreads = 256, kMaxRunSplits = 8, kMaxMergeRuns = 2;
// The runs of 8 of attention's output [rows, in] (in % 8 == 0) each of the projection's threads
// merges.
constexpr int64_t mergeRuns(int64_t rows, int64_t in) { return (rows * in / 8 + kMergeThreads - 1) / kMergeThreads; }
// The most splits of a token that the projection merges, for a step of `rows` rows of `in`
// outputs: 0 where a thread would take more than kMaxMergeRuns runs.
constexpr int deferredSplits(int64_t rows, int64_t in) {
  const int64_t runs = mergeRuns(rows, in);
  return runs <= 1 ? kMaxRunSplits : runs <= kMaxMergeRuns ? int(kMaxRunSplits / runs) : 0;
}

// A decode attention's output left as its splits' partials for the projection after it to
// merge: each split's normalised output and its running max (of scores in log2 units) and sum
// of weights; for tokens of more than maxDeferred splits, the merged output.
struct SplitPartials {
  const float* o;   // [tokens, numHeads, numSplits, headDim]
  const float* ml;  // [tokens, numHeads, numSplits, 2]
  const bf16* out;  // [tokens, numHeads · headDim]: the rows of tokens attention merged itself
  const int32_t* queryStarts;
  const int32_t* contextLens;
  int numSeqs;
  int64_t maxKeys;
  int numHeads, headDim;
  SplitRule rule;
  int maxDeferred;  // deferredSplits of the step

  __device__ __forceinline__ int splitsOf(int t) const {
    return rule.used(keyCount(tokenSpan(queryStarts, contextLens, numSeqs, t), t, maxKeys));
  }
};

// One run of a row of attention's output (8 columns from col, a multiple of 8; a head's dims
// are too, so the run is one head's): its splits' loads (load), then their merge (merged).
// Several runs' loads go out before any is used. Every block of the projection merges all of x,
// so this is kept short: 32-bit indices, no work for splits past `used` (the same for a warp's
// lanes, which share a row). A first version (64-bit indices and split counts, batches of 8
// masked) took ~3.5k instructions a warp and made Qwen3-0.6B's o projection at 4 rows 3 times
// as long.
// S: the most splits it holds (at least s.maxDeferred).
template <int S>
struct PendingRun {
  int used;  // the token's splits; 0: past s.maxDeferred, `row` holds the run attention merged
  float2 ml[S];
  float4 lo[S], hi[S];
  uint4 row;

  // __ldcg: the partials were just written by other blocks.
  __device__ __forceinline__ void load(const SplitPartials& s, int t, int splits, int col) {
    used = splits <= s.maxDeferred ? splits : 0;
    if (used == 0) {
      row = __ldcg(reinterpret_cast<const uint4*>(s.out + t * s.numHeads * s.headDim + col));
      return;
    }
    const int h = col / s.headDim, d = col - h * s.headDim;
    const int base = (t * s.numHeads + h) * s.rule.numSplits;
#pragma unroll
    for (int j = 0; j < S; ++j) {
      if (j >= used) break;
      const float4* o = reinterpret_cast<const float4*>(s.o + (base + j) * s.headDim + d);
      ml[j] = __ldcg(reinterpret_cast<const float2*>(s.ml) + base + j);
      lo[j] = __ldcg(o);
      hi[j] = __ldcg(o + 1);
    }
  }

  // The run as 8 bf16: weights 2^(m_s - M) · l_s, the sums in split order (attention's own
  // merge, mergeSplits, term for term but for one reciprocal).
  __device__ __forceinline__ uint4 merged() const {
    if (used == 0) return row;
    float M = -INFINITY;
#pragma unroll
    for (int j = 0; j < S; ++j)
      if (j < used) M = fmaxf(M, ml[j].x);
    float L = 0, O[8] = {};
    if (M != -INFINITY)  // else no split saw a key (a token with none): zeros
#pragma unroll
      for (int j = 0; j < S; ++j) {
        if (j >= used) break;
        const float w = exp2f(ml[j].x - M) * ml[j].y;  // a split without keys: 2^-inf · 0
        L += w;
        O[0] += w * lo[j].x, O[1] += w * lo[j].y, O[2] += w * lo[j].z, O[3] += w * lo[j].w;
        O[4] += w * hi[j].x, O[5] += w * hi[j].y, O[6] += w * hi[j].z, O[7] += w * hi[j].w;
      }
    const float inv = L > 0 ? 1.0f / L : 0.0f;
    uint4 run;
    __nv_bfloat162* out = reinterpret_cast<__nv_bfloat162*>(&run);
#pragma unroll
    for (int i = 0; i < 4; ++i) out[i] = __floats2bfloat162_rn(O[2 * i] * inv, O[2 * i + 1] * inv);
    return run;
  }
};

// pagedAttention (gpu_ops.h), but where its step takes wide blocks (a decode step of few
// sequences), bf16, and the partials fit attention's kept buffer, it splits each token's keys
// wherever that saves a round of a block's loop, leaves the splits of tokens of at most
// deferredSplits(numTokens, numHeads · headDim) splits as partials (their rows of out
// unwritten), describes them in *to and returns true; else it runs as pagedAttention and
// returns false. The partials stay valid until the next attention launch.
bool pagedAttentionSplits(DType act, void* out, const void* qkv, KvCache c, const int32_t* blockTables,
                          int64_t maxBlocks, const int32_t* queryStarts, const int32_t* contextLens, int64_t numSeqs,
                          int64_t numTokens, HeadLayout l, float scale, SplitPartials* to);

}  // namespace mstar::gpu

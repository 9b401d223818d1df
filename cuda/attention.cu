// Paged causal attention over a block table: one kernel serves prefill, a prefill chunk
// on top of cached blocks, and decode, all sequences of a step in one launch. A query at
// position p of its sequence sees cache positions 0..p.
//
// Grid: (query token, kv head x q-head group, split). A block handles GT query heads
// that share one kv head (GQA: each K/V row is read once for all of them) over one
// split of the keys; 4 warps take 32-key chunks in turn. In a chunk every lane owns one
// key's score (computed by the whole warp, lanes splitting the head dims), so the online
// softmax costs one exp per key, not per key and dim. Long contexts with few query
// tokens (decode) are split across blocks (flash-decoding) and merged by a second
// kernel. The grid depends only on shapes (tokens, heads, block-table width), never on
// the lengths in device memory, so a captured graph replays for any mix of lengths.
#include <cmath>

#include "common.cuh"

namespace mstar::gpu {
namespace {

constexpr int kWarps = 4;
constexpr int kMinSplitKeys = 256;  // no split is shorter than this (its merge would cost more)
constexpr int kMaxSplits = 64;

struct Args {
  void* out;
  const void* qkv;
  const void* k;
  const void* v;
  const int32_t* tables;
  const int32_t* queryStarts;
  const int32_t* contextLens;
  int numSeqs;
  int64_t maxBlocks, numBlocks;
  int blockSize;
  int numHeads, numKvHeads, headDim;
  int64_t rowWidth;
  float scale;
  int numSplits;
  int64_t splitKeys;
  float* partO;   // [tokens, numHeads, numSplits, headDim], each split's normalised output
  float* partML;  // [tokens, numHeads, numSplits, 2]: its running max and sum of weights
};

// Lane `lane`'s DPL dims (lane * DPL + i) of one head row; vec: the head has exactly
// 32 * DPL dims and rows are aligned, so one or two wide loads do.
template <typename C, int DPL>
__device__ __forceinline__ void loadDims(float (&dst)[DPL], const C* head, int lane, int headDim, bool vec) {
  int d0 = lane * DPL;
  if (vec) {
    loadVec<C, DPL>(dst, head + d0);
  } else {
#pragma unroll
    for (int i = 0; i < DPL; ++i) dst[i] = d0 + i < headDim ? toF(head[d0 + i]) : 0.0f;
  }
}

template <typename T, typename C, int DPL, int GT>
__global__ __launch_bounds__(kWarps * 32) void attentionKernel(Args p, bool vec) {
  __shared__ float sM[kWarps][GT], sL[kWarps][GT];
  __shared__ float sAcc[kWarps][GT][32 * DPL];
  const int64_t t = blockIdx.x;
  const int groups = p.numHeads / p.numKvHeads, blocksPerKv = groups / GT;
  const int kvh = blockIdx.y / blocksPerKv;
  const int h0 = kvh * groups + (blockIdx.y % blocksPerKv) * GT;
  const int split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int hd = p.headDim;

  // The sequence of token t: the last s with queryStarts[s] <= t (as the CPU's upper_bound).
  int lo = 0, hi = p.numSeqs - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (p.queryStarts[mid] <= t) lo = mid;
    else hi = mid - 1;
  }
  const int64_t qStart = p.queryStarts[lo], qLen = p.queryStarts[lo + 1] - qStart;
  const int64_t pos = int64_t(p.contextLens[lo]) - qLen + (t - qStart);  // the last key it sees
  const int64_t nKeys = max(int64_t(0), min(pos + 1, p.maxBlocks * p.blockSize));
  const int64_t kBegin = split * p.splitKeys, kEnd = min(nKeys, kBegin + p.splitKeys);
  const int32_t* table = p.tables + int64_t(lo) * p.maxBlocks;

  const T* qRow = static_cast<const T*>(p.qkv) + t * p.rowWidth;
  float q[GT][DPL];
#pragma unroll
  for (int g = 0; g < GT; ++g) loadDims<T, DPL>(q[g], qRow + int64_t(h0 + g) * hd, lane, hd, vec);

  float m[GT], l[GT], acc[GT][DPL];
#pragma unroll
  for (int g = 0; g < GT; ++g) {
    m[g] = -INFINITY;
    l[g] = 0;
#pragma unroll
    for (int i = 0; i < DPL; ++i) acc[g][i] = 0;
  }
  const int64_t kvWidth = int64_t(p.numKvHeads) * hd;
  const C* kBase = static_cast<const C*>(p.k) + int64_t(kvh) * hd;
  const C* vBase = static_cast<const C*>(p.v) + int64_t(kvh) * hd;

  for (int64_t c0 = kBegin + warp * 32; c0 < kEnd; c0 += kWarps * 32) {
    // Lane j finds the cache row of key c0 + j; a table entry outside the cache masks it.
    int64_t key = c0 + lane;
    long long slot = -1;
    if (key < kEnd) {
      int32_t b = table[key / p.blockSize];
      if (b >= 0 && b < p.numBlocks) slot = int64_t(b) * p.blockSize + key % p.blockSize;
    }
    const int cn = int(min(int64_t(32), kEnd - c0));
    float s[GT];
#pragma unroll
    for (int g = 0; g < GT; ++g) s[g] = -INFINITY;
    for (int j = 0; j < cn; ++j) {
      long long sj = __shfl_sync(0xffffffffu, slot, j);
      if (sj < 0) continue;  // the same for the whole warp
      float kv[DPL];
      loadDims<C, DPL>(kv, kBase + sj * kvWidth, lane, hd, vec);
#pragma unroll
      for (int g = 0; g < GT; ++g) {
        float dot = 0;
#pragma unroll
        for (int i = 0; i < DPL; ++i) dot += q[g][i] * kv[i];
        dot = warpSum(dot);
        if (lane == j) s[g] = dot * p.scale;
      }
    }
    float w[GT];
#pragma unroll
    for (int g = 0; g < GT; ++g) {
      float mNew = fmaxf(m[g], warpMax(s[g]));
      if (mNew == -INFINITY) {  // nothing visible yet
        w[g] = 0;
        continue;
      }
      float corr = expf(m[g] - mNew);
      w[g] = expf(s[g] - mNew);
      l[g] = l[g] * corr + warpSum(w[g]);
#pragma unroll
      for (int i = 0; i < DPL; ++i) acc[g][i] *= corr;
      m[g] = mNew;
    }
    for (int j = 0; j < cn; ++j) {
      long long sj = __shfl_sync(0xffffffffu, slot, j);
      if (sj < 0) continue;
      float vv[DPL];
      loadDims<C, DPL>(vv, vBase + sj * kvWidth, lane, hd, vec);
#pragma unroll
      for (int g = 0; g < GT; ++g) {
        float wj = __shfl_sync(0xffffffffu, w[g], j);
#pragma unroll
        for (int i = 0; i < DPL; ++i) acc[g][i] += wj * vv[i];
      }
    }
  }

  // Merge the warps' partial softmaxes.
#pragma unroll
  for (int g = 0; g < GT; ++g) {
    if (lane == 0) {
      sM[warp][g] = m[g];
      sL[warp][g] = l[g];
    }
#pragma unroll
    for (int i = 0; i < DPL; ++i) sAcc[warp][g][lane * DPL + i] = acc[g][i];
  }
  __syncthreads();
  for (int e = threadIdx.x; e < GT * hd; e += blockDim.x) {
    int g = e / hd, d = e % hd;
    float M = -INFINITY;
#pragma unroll
    for (int wi = 0; wi < kWarps; ++wi) M = fmaxf(M, sM[wi][g]);
    float L = 0, O = 0;
    if (M != -INFINITY) {
#pragma unroll
      for (int wi = 0; wi < kWarps; ++wi) {
        float f = expf(sM[wi][g] - M);
        L += sL[wi][g] * f;
        O += sAcc[wi][g][d] * f;
      }
    }
    int h = h0 + g;
    float o = L > 0 ? O / L : 0.0f;
    if (p.numSplits == 1) {
      static_cast<T*>(p.out)[(t * p.numHeads + h) * hd + d] = fromF<T>(o);
    } else {
      int64_t at = (t * p.numHeads + h) * p.numSplits + split;
      p.partO[at * hd + d] = o;
      if (d == 0) {
        p.partML[at * 2] = M;
        p.partML[at * 2 + 1] = L;
      }
    }
  }
}

// One block per (token, head): weights e^(m_s - M) * l_s over the splits.
template <typename T>
__global__ void combineKernel(T* out, const float* partO, const float* partML, int numHeads, int headDim, int numSplits) {
  int64_t t = blockIdx.x;
  int h = blockIdx.y;
  int64_t base = (t * numHeads + h) * numSplits;
  float M = -INFINITY;
  for (int s = 0; s < numSplits; ++s) M = fmaxf(M, partML[(base + s) * 2]);
  for (int d = threadIdx.x; d < headDim; d += blockDim.x) {
    float L = 0, O = 0;
    if (M != -INFINITY) {
      for (int s = 0; s < numSplits; ++s) {
        float f = expf(partML[(base + s) * 2] - M) * partML[(base + s) * 2 + 1];
        L += f;
        O += partO[(base + s) * headDim + d] * f;
      }
    }
    out[(t * numHeads + h) * headDim + d] = fromF<T>(L > 0 ? O / L : 0.0f);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename T, typename C, int DPL>
void launchWithGroups(int gt, dim3 grid, const Args& a, bool vec) {
  switch (gt) {
    case 8: attentionKernel<T, C, DPL, 8><<<grid, kWarps * 32, 0, stream()>>>(a, vec); break;
    case 4: attentionKernel<T, C, DPL, 4><<<grid, kWarps * 32, 0, stream()>>>(a, vec); break;
    case 2: attentionKernel<T, C, DPL, 2><<<grid, kWarps * 32, 0, stream()>>>(a, vec); break;
    default: attentionKernel<T, C, DPL, 1><<<grid, kWarps * 32, 0, stream()>>>(a, vec); break;
  }
}

}  // namespace

void pagedAttention(DType act, void* out, const void* qkv, KvCache c, const int32_t* blockTables, int64_t maxBlocks,
                    const int32_t* queryStarts, const int32_t* contextLens, int64_t numSeqs, int64_t numTokens,
                    HeadLayout l, float scale) {
  if (numTokens == 0 || numSeqs == 0) return;
  if (l.headDim > 256) throw Error("pagedAttention: headDim above 256 is not supported on cuda");
  const int groups = l.numHeads / l.numKvHeads;
  const int gt = groups % 8 == 0 ? 8 : groups % 4 == 0 ? 4 : groups % 2 == 0 ? 2 : 1;
  const int dpl = l.headDim <= 64 ? 2 : l.headDim <= 128 ? 4 : 8;
  const bool vec = l.headDim == 32 * dpl && aligned16(qkv) && aligned16(c.k) && aligned16(c.v);

  // Split the keys only when there are too few blocks to fill the GPU (decode), and
  // only as far as each split keeps kMinSplitKeys keys. All of it from shapes.
  const int64_t maxKeys = maxBlocks * c.blockSize;
  const int64_t blocks = numTokens * l.numKvHeads * (groups / gt);
  int64_t splits = 1;
  if (maxKeys > kMinSplitKeys) {
    int64_t want = (int64_t(smCount()) * 4 + blocks - 1) / blocks;
    int64_t most = std::min<int64_t>(kMaxSplits, (maxKeys + kMinSplitKeys - 1) / kMinSplitKeys);
    splits = std::max<int64_t>(1, std::min(want, most));
  }
  int64_t splitKeys = std::max<int64_t>(32, ((maxKeys + splits - 1) / splits + 31) / 32 * 32);
  splits = std::max<int64_t>(1, (maxKeys + splitKeys - 1) / splitKeys);

  Args a{out, qkv, c.k, c.v, blockTables, queryStarts, contextLens, int(numSeqs), maxBlocks, c.numBlocks,
         int(c.blockSize), l.numHeads, l.numKvHeads, l.headDim, l.rowWidth(), scale, int(splits), splitKeys,
         nullptr, nullptr};
  const size_t parts = size_t(numTokens) * l.numHeads * size_t(splits);
  Scratch partials(splits > 1 ? parts * (l.headDim + 2) * sizeof(float) : 0, "pagedAttention scratch");
  if (splits > 1) {
    a.partO = partials.as<float>();
    a.partML = a.partO + parts * l.headDim;
  }
  dim3 grid(unsigned(numTokens), unsigned(l.numKvHeads * (groups / gt)), unsigned(splits));
  withAct(act, [&](auto tt) {
    withAct(c.dtype, [&](auto ct) {
      using T = decltype(tt);
      using C = decltype(ct);
      if (dpl == 2) launchWithGroups<T, C, 2>(gt, grid, a, vec);
      else if (dpl == 4) launchWithGroups<T, C, 4>(gt, grid, a, vec);
      else launchWithGroups<T, C, 8>(gt, grid, a, vec);
      checkLaunch("pagedAttention kernel");
      if (splits > 1) {
        dim3 cgrid(unsigned(numTokens), unsigned(l.numHeads));
        int threads = std::min(256, (l.headDim + 31) / 32 * 32);
        combineKernel<T><<<cgrid, threads, 0, stream()>>>(static_cast<T*>(out), a.partO, a.partML, l.numHeads,
                                                          l.headDim, int(splits));
        checkLaunch("pagedAttention combine kernel");
      }
    });
  });
}

}  // namespace mstar::gpu

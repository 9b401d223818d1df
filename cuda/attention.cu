// Paged causal attention over a block table: one launch serves prefill, a prefill chunk
// on top of cached blocks, and decode, all sequences of a step together. A query at
// position p of its sequence sees cache positions 0..p.
//
// Grid: (query token, kv head x q-head group, split). A block handles GT query heads
// that share one kv head (GQA: each K/V row is read once for all of them) over one
// split of the keys. Two kernels:
//  - streamKernel (head dims 64/128/256 with 16-byte rows; 4, 8 or 16 warps a block, see
//    kNarrowWarps): a key row is read by a group of lanes with one 16-byte load each, so a
//    warp holds several keys; the next round's K and V rows load while this round's are
//    used, and the table entries of the round after that: rows always in flight, as
//    bandwidth needs. Each lane group keeps its own softmax max and sums; they merge at the
//    end.
//  - generalKernel (any head dim): 4 warps take 32-key chunks in turn; in a chunk every
//    lane owns one key's score (the warp splits the head dims), so the online softmax
//    costs one exp per key, not per key and dim.
// Decode has few query tokens, so the keys are split across blocks (flash-decoding). The
// grid depends only on shapes (tokens, heads, block-table width), never on the lengths in
// device memory, so a captured graph replays for any mix of lengths; streamKernel divides
// each token's actual keys evenly over the splits (a short context in a wide table still
// spreads over blocks, and splits past its keys exit), and the last of a token's splits to
// finish merges them. generalKernel's splits are fixed ranges, merged by combineKernel.
// There are never more blocks than the GPU holds at once (a partial second wave would
// double a launch whose blocks all take about as long).
// Prefill steps in bf16 go to the tensor-core kernel (attention_prefill.cu).
#include <cmath>
#include <mutex>
#include <unordered_map>

#include "attention_prefill.cuh"
#include "attention_split.cuh"
#include "common.cuh"

namespace mstar::gpu {
namespace {

constexpr int kWarps = 4;  // generalKernel's
constexpr int kMinSplitKeys = 256;  // generalKernel: no split is shorter (its merge would cost more)
// streamKernel's blocks and splits by the step's size. A step of no more (token, kv head)
// blocks than SMs (decode of a few sequences) takes wide blocks (wideWarps: 16 warps, 8 where
// a block has more than 2 query heads, whose registers spill under the 128 a thread of 16
// warps), and a token's keys split only where that saves at least kMergeRounds rounds of the
// block's loop (SplitRule::share): short contexts then take one block a kv head, which writes its
// output itself (no partials, no ticket, no merge: each a round trip after the keys), and a
// long one spreads over splits of 64 keys and more. Larger steps keep blocks of 4 warps and
// splits of 32 keys: wide blocks hold one an SM (their registers), and at Qwen3-0.6B's 64
// sequences (512 blocks) took 1.77 ms a step against 1.56. bench/decode_step.mjs, GPU ms a
// step at 1 and 8 sequences, 4 warps and 32 keys / wide: context 192, Qwen3-0.6B 0.884, 0.971
// / 0.808, 0.883 (one adapter 1.010, 1.107 / 0.931, 0.994); Qwen3-8B 4.48, 5.06 / 4.44, 4.92;
// context 2048, Qwen3-8B 4.90, 5.77 / 4.63, 5.81.
constexpr int kNarrowWarps = 4, kMinNarrowSplitKeys = 32, kMinWideSplitKeys = 64;
// Merging a token's splits (partials out, a ticket, the last block's re-read) costs about 3
// rounds of a wide block's loop (Qwen3-0.6B at one sequence: a round ~0.93 µs a layer, the
// merge ~2.8; more at 4 sequences), so splits must take at least 4 off. Against the former
// rule (no split under 256 keys, none shorter): Qwen3-0.6B 1 to 8 sequences at 288-384 keys
// 3-10% faster a step, 1 sequence at 512-1024 keys 7-10%; Qwen3-8B 1 to 4 sequences at 256-576
// keys 0.4-4.3% (bench/decode_step.mjs; bench/RESULTS.md, forty-ninth session). With the
// merge's ticket taken by one thread (fiftieth session), 2 rounds would gain at one sequence
// (256 keys: 0.679 -> 0.664 ms) but lose 3.5-5% at 4 and 8: still 4.
constexpr int kMergeRounds = 4;
// Where the o projection merges the splits (pagedAttentionSplits), they cost attention no merge:
// a token splits wherever that takes a round off its loop.
constexpr int kDeferredMergeRounds = 1;
// A wide block's warps for gt query heads of hd dims; 0 (none: narrow blocks) where its
// warps' partial sums (warps × heads × dims floats) would pass 32 KB of shared memory.
constexpr int wideWarps(int gt, int hd) { return gt <= 2 ? 16 : gt * hd <= 1024 ? 8 : 0; }
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
  int blockShift;  // log2(blockSize) where it is a power of two, else -1
  int numHeads, numKvHeads, headDim;
  int64_t rowWidth;
  float scale;
  SplitRule rule;  // numSplits: the grid's; the rest streamKernel's (a share of each token's keys)
  int64_t splitKeys;
  float* partO;   // [tokens, numHeads, numSplits, headDim], each split's normalised output
  float* partML;  // [tokens, numHeads, numSplits, 2]: its running max (of scores in log2 units) and sum of weights
  int* tickets;   // streamKernel: [tokens, gridDim.y], zero between launches; null: combineKernel merges
  int deferredSplits;  // streamKernel: tokens of at most this many splits write partials only (pagedAttentionSplits)
  bool vec;       // generalKernel: the head is exactly 32 * DPL dims and rows are aligned
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

// Where token t's keys are (attention_split.cuh's tokenSpan): its sequence's block table, how
// many keys it sees, and its sequence's first key written in this step (by the kernel before).
struct TokenKeys {
  const int32_t* table;
  int count;
  int64_t fresh;
};
__device__ __forceinline__ TokenKeys keysOf(const Args& p, int64_t t) {
  const TokenSpan s = tokenSpan(p.queryStarts, p.contextLens, p.numSeqs, t);
  return {p.tables + int64_t(s.seq) * p.maxBlocks, keyCount(s, t, p.maxBlocks * p.blockSize),
          max(int64_t(0), s.ctx - (s.qEnd - s.qStart))};
}

// Keys a streamKernel block of `warps` warps and gt query heads takes a round of its loop
// (its stride: a key row is 16-byte loads by lanes of a warp, keyBytes / 16 of them).
__host__ __device__ constexpr int roundKeys(int keyBytes, int warps, int gt) {
  return warps * (32 / (keyBytes / 16)) * (gt > 4 ? 1 : 2);
}

// The cache row of `key`, or -1 where its table entry is outside the cache.
__device__ __forceinline__ int32_t slotOf(const Args& p, const int32_t* table, int key) {
  return cacheRow(table, key, p.blockSize, p.blockShift, p.numBlocks);
}

// The end of both kernels: each warp left its running max, sum of weights and weighted
// values (W >= headDim per head) in shared memory; merge them and write the output
// (direct: this block saw all of the token's keys), or this split's partial.
template <typename T, int GT, int W, int NW>
__device__ void finishBlock(const Args& p, int64_t t, int h0, int split, bool direct, const float (&sM)[NW][GT],
                            const float (&sL)[NW][GT], const float (&sAcc)[NW][GT][W]) {
  const int hd = p.headDim;
  for (int e = threadIdx.x; e < GT * hd; e += blockDim.x) {
    int g = e / hd, d = e % hd;
    float M = -INFINITY;
#pragma unroll
    for (int wi = 0; wi < NW; ++wi) M = fmaxf(M, sM[wi][g]);
    float L = 0, O = 0;
    if (M != -INFINITY) {
#pragma unroll
      for (int wi = 0; wi < NW; ++wi) {
        float f = exp2f(sM[wi][g] - M);
        L += sL[wi][g] * f;
        O += sAcc[wi][g][d] * f;
      }
    }
    int h = h0 + g;
    float o = L > 0 ? O / L : 0.0f;
    if (direct) {
      static_cast<T*>(p.out)[(t * p.numHeads + h) * hd + d] = fromF<T>(o);
    } else {
      int64_t at = (t * p.numHeads + h) * p.rule.numSplits + split;
      p.partO[at * hd + d] = o;
      if (d == 0) {
        p.partML[at * 2] = M;
        p.partML[at * 2 + 1] = L;
      }
    }
  }
}

// Heads h0 .. h0 + G - 1 of token t from their first `used` splits' partials (the others
// hold no keys): weights 2^(m_s - M) * l_s. Every load of a phase is issued together, the
// split statistics by one thread each, then each output's partials eight at a time: this
// merge is the last of a decode step's attention and its time is round trips through L2.
// Loads go through L2 (__ldcg): the partials may have been written by other blocks just before.
template <typename T, int G>
__device__ void mergeSplits(const Args& p, int64_t t, int h0, int used) {
  __shared__ float sM[G][kMaxSplits], sL[G][kMaxSplits], sW[G][kMaxSplits];
  const int hd = p.headDim;
  const int64_t base = (t * p.numHeads + h0) * p.rule.numSplits;  // head h0 + g, split s: base + g * numSplits + s
  for (int e = threadIdx.x; e < G * used; e += blockDim.x) {
    const int g = e / used, s = e % used;
    const float2 ml = __ldcg(reinterpret_cast<const float2*>(p.partML) + base + g * p.rule.numSplits + s);
    sM[g][s] = ml.x;
    sL[g][s] = ml.y;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < G * used; e += blockDim.x) {
    const int g = e / used, s = e % used;
    float M = -INFINITY;
    for (int i = 0; i < used; ++i) M = fmaxf(M, sM[g][i]);
    sW[g][s] = M == -INFINITY ? 0.0f : exp2f(sM[g][s] - M) * sL[g][s];
  }
  __syncthreads();
  for (int e = threadIdx.x; e < G * hd; e += blockDim.x) {
    const int g = e / hd, d = e % hd;
    const float* o = p.partO + (base + g * p.rule.numSplits) * hd + d;
    float L = 0, O = 0;
    int s = 0;
    for (; s + 8 <= used; s += 8) {  // eight loads in flight, then their sums
      float v[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = __ldcg(o + int64_t(s + j) * hd);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        L += sW[g][s + j];
        O += sW[g][s + j] * v[j];
      }
    }
    if (s < used) {  // the last (or only) few splits, their loads in flight together too
      float v[7];
#pragma unroll
      for (int j = 0; j < 7; ++j) v[j] = s + j < used ? __ldcg(o + int64_t(s + j) * hd) : 0.0f;
#pragma unroll
      for (int j = 0; j < 7; ++j) {
        const float w = s + j < used ? sW[g][s + j] : 0.0f;
        L += w;
        O += w * v[j];
      }
    }
    static_cast<T*>(p.out)[(t * p.numHeads + h0 + g) * hd + d] = fromF<T>(L > 0 ? O / L : 0.0f);
  }
}

// *ticket + 1, returning the old value, as an acquire-release atomic at GPU scope.
__device__ __forceinline__ int ticketAcqRel(int* ticket) {
  int prior;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;" : "=r"(prior) : "l"(ticket) : "memory");
  return prior;
}

// Sum over the lanes of one group of G consecutive lanes (G a power of two).
template <int G>
__device__ __forceinline__ float groupSum(float v) {
#pragma unroll
  for (int o = G / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The least blocks an SM should hold, which bounds registers: narrow blocks 5, 4 or 2 (by their
// query heads), a wide one 1.
constexpr int streamBlocksPerSm(int gt, int nw) { return nw != kNarrowWarps ? 1 : gt <= 2 ? 5 : gt <= 4 ? 4 : 2; }

// Head dim HD with rows of C aligned to 16 bytes: lanes sub = lane % LPK of group
// lane / LPK hold elements [sub * EPL, sub * EPL + EPL) of one key row.
template <typename T, typename C, int HD, int GT, int NW>
__global__ __launch_bounds__(NW * 32, streamBlocksPerSm(GT, NW)) void streamKernel(Args p) {
  constexpr int EPL = 16 / int(sizeof(C));  // elements per 16-byte load
  constexpr int LPK = HD / EPL;             // lanes per key row
  constexpr int KPW = 32 / LPK;             // keys per warp per load round
  constexpr int U = GT > 4 ? 1 : 2;         // keys a lane group holds in a round (two rounds in flight)
  static_assert(LPK <= 32 && 32 % LPK == 0, "a key row must fit one warp");
  __shared__ float sM[NW][GT], sL[NW][GT];
  __shared__ float sAcc[NW][GT][HD];
  const int64_t t = blockIdx.x;
  const int groups = p.numHeads / p.numKvHeads, blocksPerKv = groups / GT;
  const int kvh = blockIdx.y / blocksPerKv;
  const int h0 = kvh * groups + (blockIdx.y % blocksPerKv) * GT;
  const int split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, sub = lane % LPK, grp = lane / LPK;

  // The token's key count comes from step inputs, which no op of a step writes: read before
  // the wait. Splits past its keys have nothing to do and leave at once, their SMs free for the
  // kernels after this one while the one before still runs (a short context in the engine's
  // tables, as wide as max_model_len, left 15 of a kv head's 16 wide blocks waiting for the
  // kernel before only to leave; see partialsFor for what it cost). Split 0 always stays and
  // waits (a token with no keys gets zeros), so the launch still completes only after the
  // kernel before it (awaitPrior's rule).
  const TokenKeys keys = keysOf(p, t);
  const int share = p.rule.share(keys.count);
  const int used = p.rule.used(keys.count);
  if ((p.tickets || p.deferredSplits) && split >= used) return;
  const int kBegin = int(min(int64_t(keys.count), int64_t(split) * share)), kEnd = min(keys.count, kBegin + share);
  const int64_t kvWidth = int64_t(p.numKvHeads) * HD;
  const C* kBase = static_cast<const C*>(p.k) + int64_t(kvh) * HD + sub * EPL;
  const C* vBase = static_cast<const C*>(p.v) + int64_t(kvh) * HD + sub * EPL;

  // A round is U keys per lane group. Its keys' cache rows are looked up two rounds before
  // their use and their K and V rows loaded one round before, so a warp always has a round
  // of loads in flight and the table's round trip is off the path.
  constexpr int stride = NW * KPW * U;
  static_assert(stride == roundKeys(HD * int(sizeof(C)), NW, GT), "SplitRule's rounds are this loop's");
  auto lookup = [&](int c0, int32_t (&slot)[U]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int key = c0 + u * KPW + grp;
      slot[u] = key < kEnd ? slotOf(p, keys.table, key) : -1;
    }
  };
  auto load = [&](int32_t row, uint4& kr, uint4& vr) {
    kr = *reinterpret_cast<const uint4*>(kBase + int64_t(row) * kvWidth);
    vr = *reinterpret_cast<const uint4*>(vBase + int64_t(row) * kvWidth);
  };
  // Masked keys load nothing (unwritten rows may be NaN).
  auto fetch = [&](const int32_t (&slot)[U], uint4 (&kr)[U], uint4 (&vr)[U]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
      if (slot[u] >= 0) load(slot[u], kr[u], vr[u]);
    }
  };
  // The first round loads before the wait (what earlier steps wrote: no op of this one
  // writes it), but for this step's keys (from `fresh` on), which the kernel before writes:
  // theirs after it. Wide blocks are few, each a chain of rounds: Qwen3-0.6B's decode step
  // took 0.779 ms against 0.803 at 1 sequence (one adapter, whose kernel before is longer:
  // 0.866 against 0.889), 0.867 against 0.872 at 8 (0.927 against 0.947); Qwen3-8B's the same
  // as before (bench/decode_step.mjs, context 192; 2048 to 16384: the same or up to 1%
  // faster). Narrow blocks are many, each a round or two, and gain less: 0.6B at 32 and 64
  // sequences 1.452 -> 1.443 and 1.573 -> 1.567 ms (LoRA off; one adapter and 8B at 32 the
  // same). Two rounds early, which the loop then had to keep in flight from one to the next,
  // lost where the kernel before is short (LoRA off: 0.6B 0.795 at 1 sequence, 0.878 at 8).
  const int safe = int(min(int64_t(kEnd), keys.fresh));
  int c0 = kBegin + warp * (KPW * U);
  int32_t slot[U], next[U], now[U];  // now: round 0's rows that load before the wait (-1: none)
  uint4 kr[U], vr[U];
  lookup(c0, slot);
#pragma unroll
  for (int u = 0; u < U; ++u) now[u] = c0 + u * KPW + grp < safe ? slot[u] : -1;
  fetch(now, kr, vr);
  lookup(c0 + stride, next);
  awaitPrior();
#pragma unroll
  for (int u = 0; u < U; ++u)
    if (now[u] < 0 && slot[u] >= 0) load(slot[u], kr[u], vr[u]);

  const T* qRow = static_cast<const T*>(p.qkv) + t * p.rowWidth + sub * EPL;
  float q[GT][EPL];
#pragma unroll
  for (int g = 0; g < GT; ++g) {
    loadVec<T, EPL>(q[g], qRow + int64_t(h0 + g) * HD);
#pragma unroll
    for (int i = 0; i < EPL; ++i) q[g][i] *= p.scale * kLog2e;
  }
  float m[GT], l[GT], acc[GT][EPL];
#pragma unroll
  for (int g = 0; g < GT; ++g) {
    m[g] = -INFINITY;
    l[g] = 0;
#pragma unroll
    for (int i = 0; i < EPL; ++i) acc[g][i] = 0;
  }
  for (; c0 < kEnd; c0 += stride) {
    uint4 nk[U], nv[U];
    int32_t after[U];
    fetch(next, nk, nv);
    lookup(c0 + 2 * stride, after);
    bool ok[U];
#pragma unroll
    for (int u = 0; u < U; ++u) ok[u] = slot[u] >= 0;
    float s[U][GT];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const C* e = reinterpret_cast<const C*>(&kr[u]);
#pragma unroll
      for (int g = 0; g < GT; ++g) {
        float d = 0;
#pragma unroll
        for (int i = 0; i < EPL; ++i) d += q[g][i] * toF(e[i]);
        d = groupSum<LPK>(d);
        s[u][g] = ok[u] ? d : -INFINITY;
      }
    }
    // Each lane group keeps its own running max (its lanes hold the same sums: no shuffle)
    // and rescales only when it grows, which after the first keys is rare. Then every
    // head's weights, and V converted once per element for all of them (converted inside
    // a branch per head, each element was converted GT times).
    float w[U][GT];
#pragma unroll
    for (int g = 0; g < GT; ++g) {
      float top = -INFINITY;
#pragma unroll
      for (int u = 0; u < U; ++u) top = fmaxf(top, s[u][g]);
      if (top > m[g]) {
        const float corr = exp2Approx(m[g] - top);
        l[g] *= corr;
#pragma unroll
        for (int i = 0; i < EPL; ++i) acc[g][i] *= corr;
        m[g] = top;
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        w[u][g] = s[u][g] == -INFINITY ? 0.0f : exp2Approx(s[u][g] - m[g]);  // masked: 0, never -inf - -inf
        l[g] += w[u][g];
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const C* e = reinterpret_cast<const C*>(&vr[u]);
#pragma unroll
      for (int i = 0; i < EPL; ++i) {
        const float v = toF(e[i]);
#pragma unroll
        for (int g = 0; g < GT; ++g) acc[g][i] += w[u][g] * v;
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      slot[u] = next[u];
      next[u] = after[u];
      kr[u] = nk[u];
      vr[u] = nv[u];
    }
  }

  // Sum the lane groups' shares, each first brought to the larger of the two maxima.
#pragma unroll
  for (int g = 0; g < GT; ++g) {
#pragma unroll
    for (int o = LPK; o < 32; o <<= 1) {
      const float M = fmaxf(m[g], __shfl_xor_sync(0xffffffffu, m[g], o));
      const float f = M == -INFINITY ? 0.0f : exp2f(m[g] - M);
      m[g] = M;
      l[g] *= f;
      l[g] += __shfl_xor_sync(0xffffffffu, l[g], o);
#pragma unroll
      for (int i = 0; i < EPL; ++i) {
        acc[g][i] *= f;
        acc[g][i] += __shfl_xor_sync(0xffffffffu, acc[g][i], o);
      }
    }
    if (lane == 0) {
      sM[warp][g] = m[g];
      sL[warp][g] = l[g];
    }
    if (grp == 0) {
#pragma unroll
      for (int i = 0; i < EPL; ++i) sAcc[warp][g][sub * EPL + i] = acc[g][i];
    }
  }
  __syncthreads();
  const bool deferred = used <= p.deferredSplits;  // the projection after merges
  const bool direct = !deferred && (p.rule.numSplits == 1 || (p.tickets && used == 1));
  finishBlock<T, GT, HD, NW>(p, t, h0, split, direct, sM, sL, sAcc);
  if (direct || deferred || !p.tickets) return;
  // The last of the token's splits to finish merges them (no second launch): each block
  // takes a ticket once its threads' partials are written. One thread's acquire-release
  // atomic after the barrier publishes them all (a release covers what the barrier showed its
  // thread), and in the last block takes in the other splits' (the barrier after passes that
  // on), where every thread had fenced before the ticket and again after it: Qwen3-0.6B's
  // decode step at contexts that split (384-4096 keys, 1-8 sequences) 0.5-1.4% faster,
  // Qwen3-8B's up to 0.5% (bench/decode_step.mjs; bench/RESULTS.md, fiftieth session).
  __shared__ bool last;
  __syncthreads();
  int* ticket = p.tickets + t * gridDim.y + blockIdx.y;
  if (threadIdx.x == 0) last = ticketAcqRel(ticket) == used - 1;
  __syncthreads();
  if (!last) return;
  mergeSplits<T, GT>(p, t, h0, used);
  if (threadIdx.x == 0) *ticket = 0;  // ready for the next launch
}

template <typename T, typename C, int DPL, int GT>
__global__ __launch_bounds__(kWarps * 32) void generalKernel(Args p) {
  const bool vec = p.vec;
  awaitPrior();
  __shared__ float sM[kWarps][GT], sL[kWarps][GT];
  __shared__ float sAcc[kWarps][GT][32 * DPL];
  const int64_t t = blockIdx.x;
  const int groups = p.numHeads / p.numKvHeads, blocksPerKv = groups / GT;
  const int kvh = blockIdx.y / blocksPerKv;
  const int h0 = kvh * groups + (blockIdx.y % blocksPerKv) * GT;
  const int split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int hd = p.headDim;

  const TokenKeys keys = keysOf(p, t);
  const int64_t kBegin = split * p.splitKeys, kEnd = min(int64_t(keys.count), kBegin + p.splitKeys);
  const int32_t* table = keys.table;

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
    long long slot = key < kEnd ? slotOf(p, table, int(key)) : -1;
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
        if (lane == j) s[g] = dot * (p.scale * kLog2e);
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
      float corr = exp2f(m[g] - mNew);
      w[g] = exp2f(s[g] - mNew);
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
  finishBlock<T, GT, 32 * DPL, kWarps>(p, t, h0, split, p.rule.numSplits == 1, sM, sL, sAcc);
}

// One block per (token, head): the merge, where streamKernel's blocks do not do it
// themselves (generalKernel, or no tickets). Only the splits that hold keys count (a short
// context in a wide table fills only the first few).
template <typename T>
__global__ void combineKernel(Args p, bool streamed) {
  awaitPrior();
  const int64_t t = blockIdx.x;
  const int count = keysOf(p, t).count;
  const int used = streamed ? p.rule.used(count) : int(min(int64_t(p.rule.numSplits), (count + p.splitKeys - 1) / p.splitKeys));
  mergeSplits<T, 1>(p, t, blockIdx.y, used);
}

// A zeroed device buffer of Bytes for one use (Tag), allocated at the first call outside any
// capture and kept (a captured graph keeps its address); null until then.
template <typename Tag, size_t Bytes>
void* keptBuffer() {
  static std::mutex mutex;
  static void* buffer = nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  if (!buffer && !capturing()) {
    buffer = alloc(Bytes);
    memsetAsync(buffer, 0, Bytes);
  }
  return buffer;
}

// streamKernel's tickets: one int per (token, block row) of a launch, zero between
// launches (each merging block puts its ticket back), in a kept buffer; a launch needing
// more, or the first one if it comes inside a capture, merges with combineKernel instead.
constexpr size_t kTickets = size_t(1) << 20;
int* tickets(size_t needed) {
  int* buffer = static_cast<int*>(keptBuffer<struct Tickets, kTickets * sizeof(int)>());
  return needed <= kTickets ? buffer : nullptr;
}

// The splits' partials: a kept buffer of kPartialBytes, as the tickets are. A Scratch per
// launch, captured, put a graph allocation before each decode step's attention kernel and a
// free after it: nodes between kernels, where the next kernel cannot start early. With both
// (these nodes, and streamKernel's splits past a short context waiting to leave) gone,
// Qwen3-0.6B's decode step in tables as wide as max_model_len, which always split, took
// 0.807 ms at 1 sequence against 0.851 (0.800 in tables as wide as the context, which do not
// split); either alone left it at 0.85 (bench/decode_step.mjs, WIDTH=40960). A decode step
// holds at most a wave of blocks, each its query heads' partials: 2112 blocks of 8 heads of
// 256 dims need 17.5 MB. Partials past the buffer (a prefill
// chunk's many splits) take a Scratch.
constexpr size_t kPartialBytes = size_t(32) << 20;
float* partialsFor(size_t bytes) {
  float* buffer = static_cast<float*>(keptBuffer<struct Partials, kPartialBytes>());
  return bytes <= kPartialBytes ? buffer : nullptr;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

using Kernel = void (*)(Args);

template <typename T, typename C, int DPL>
Kernel generalKernelFor(int gt) {
  return gt == 8 ? generalKernel<T, C, DPL, 8> : gt == 4 ? generalKernel<T, C, DPL, 4>
       : gt == 2 ? generalKernel<T, C, DPL, 2> : generalKernel<T, C, DPL, 1>;
}

template <typename T, typename C, int HD, int GT>
Kernel streamKernelOf(bool wide) {
  constexpr int warps = wideWarps(GT, HD);
  if constexpr (warps != 0)
    if (wide) return streamKernel<T, C, HD, GT, warps>;
  return streamKernel<T, C, HD, GT, kNarrowWarps>;
}

template <typename T, typename C, int HD>
Kernel streamKernelFor(int gt, bool wide) {
  switch (gt) {
    case 8: return streamKernelOf<T, C, HD, 8>(wide);
    case 7: return streamKernelOf<T, C, HD, 7>(wide);
    case 6: return streamKernelOf<T, C, HD, 6>(wide);
    case 5: return streamKernelOf<T, C, HD, 5>(wide);
    case 4: return streamKernelOf<T, C, HD, 4>(wide);
    case 3: return streamKernelOf<T, C, HD, 3>(wide);
    case 2: return streamKernelOf<T, C, HD, 2>(wide);
    default: return streamKernelOf<T, C, HD, 1>(wide);
  }
}

// The query heads a block takes, of the `groups` that share a kv head: streamKernel all of
// them up to 8 (every K/V row read once for the group: Llama-3.2-3B's 3 a kv head read the
// cache three times as 3 blocks of 1), else the largest divisor up to 8; generalKernel the
// largest power of two up to 8 that divides.
int headsPerBlock(int groups, bool streamed) {
  for (int g = 8; g > 1; --g)
    if (groups % g == 0 && (streamed || (g & (g - 1)) == 0)) return g;
  return 1;
}

// headsPerBlock for a step of `pairs` (token, kv head) pairs, but for streamKernel's wide
// blocks of 4 query heads (8 warps: 16 spill): in a step of few such blocks (an eighth of the
// SMs once doubled: Qwen3-8B's 8 kv heads at 1 sequence), blocks of 2 heads (16 warps), each kv
// head's rows then read by two blocks together (the second read mostly from L2). Qwen3-8B (12
// layers), GPU ms a step by context 192 / 1024 / 4096 / 16384, 4 heads / 2: 1 sequence 1.658 /
// 1.727 / 1.740 / 1.964 against 1.628 / 1.684 / 1.715 / 1.950. With more sequences short
// contexts gained too (2: 1.809 -> 1.752 at 192; 4: 1.940 -> 1.890; 8: 1% at 192 and 1024) but
// long ones lost, their re-reads no longer in L2: 4 sequences at 16384 3.293 -> 3.405, 8 4.074
// -> 4.183 (bench/decode_step.mjs).
int blockHeads(int groups, bool streamed, int64_t pairs) {
  const int gt = headsPerBlock(groups, streamed);
  return streamed && gt == 4 && pairs * 2 <= smCount() / 8 ? 2 : gt;
}

// How many blocks of `kernel`, of `threads` each, the GPU holds at once, asked once.
int64_t residentBlocks(Kernel kernel, int threads) {
  static std::mutex mutex;
  static std::unordered_map<Kernel, int64_t> known;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = known.find(kernel);
  if (it != known.end()) return it->second;
  int perSm = 0;
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, kernel, threads, 0), "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  return known[kernel] = int64_t(smCount()) * std::max(1, perSm);
}

// streamKernel takes head dims whose row is 4 to 32 16-byte loads (not f32 rows of 256).
bool streams(int headDim, DType cache) {
  const int bytes = headDim * int(dtypeSize(cache));
  return (headDim == 64 || headDim == 128 || headDim == 256) && bytes <= 32 * 16;
}

// pagedAttention, or with `to` pagedAttentionSplits.
bool attend(DType act, void* out, const void* qkv, KvCache c, const int32_t* blockTables, int64_t maxBlocks,
            const int32_t* queryStarts, const int32_t* contextLens, int64_t numSeqs, int64_t numTokens, HeadLayout l,
            float scale, SplitPartials* to) {
  if (numTokens == 0 || numSeqs == 0) return false;
  if (l.headDim > 256) throw Error("pagedAttention: headDim above 256 is not supported on cuda");
  // The kernels count keys and cache rows in 32 bits (2^31 tokens: far past any GPU's memory).
  if (std::max(c.numBlocks, maxBlocks) * c.blockSize > INT32_MAX)
    throw Error("pagedAttention: a KV cache or block table of more than 2^31 tokens is not supported on cuda");
  if (prefillOnTensorCores(act, c.dtype, l.headDim, numTokens, numSeqs, out, qkv, c.k, c.v)) {
    prefillAttention(out, qkv, c, blockTables, maxBlocks, queryStarts, contextLens, numSeqs, numTokens, l, scale);
    return false;
  }
  const int groups = l.numHeads / l.numKvHeads;
  const int dpl = l.headDim <= 64 ? 2 : l.headDim <= 128 ? 4 : 8;
  const bool aligned = aligned16(qkv) && aligned16(c.k) && aligned16(c.v);
  const bool streamed = aligned && streams(l.headDim, c.dtype);
  const bool vec = l.headDim == 32 * dpl && aligned;
  const int gt = blockHeads(groups, streamed, numTokens * l.numKvHeads);
  const int64_t blocks = numTokens * l.numKvHeads * (groups / gt);
  const bool wide = streamed && blocks <= smCount() && wideWarps(gt, l.headDim) != 0;
  const int threads = (!streamed ? kWarps : wide ? wideWarps(gt, l.headDim) : kNarrowWarps) * 32;
  Kernel kernel = nullptr;
  withAct(act, [&](auto tt) {
    withAct(c.dtype, [&](auto ct) {
      using T = decltype(tt);
      using C = decltype(ct);
      if (streamed && l.headDim == 64) kernel = streamKernelFor<T, C, 64>(gt, wide);
      else if (streamed && l.headDim == 128) kernel = streamKernelFor<T, C, 128>(gt, wide);
      else if (streamed && l.headDim == 256) {
        if constexpr (sizeof(C) == 2) kernel = streamKernelFor<T, C, 256>(gt, wide);
      } else if (dpl == 2) kernel = generalKernelFor<T, C, 2>(gt);
      else if (dpl == 4) kernel = generalKernelFor<T, C, 4>(gt);
      else kernel = generalKernelFor<T, C, 8>(gt);
    });
  });

  // Split the keys only when there are too few blocks to fill the GPU (decode), and only
  // as far as each split keeps its minimum of keys. All of it from shapes, and at most as
  // many blocks as the GPU holds at once.
  const int64_t maxKeys = maxBlocks * c.blockSize;
  const int64_t minKeys = !streamed ? kMinSplitKeys : wide ? kMinWideSplitKeys : kMinNarrowSplitKeys;
  int64_t splits = 1;
  if (maxKeys > minKeys) {
    int64_t want = residentBlocks(kernel, threads) / blocks;
    int64_t most = std::min<int64_t>(kMaxSplits, (maxKeys + minKeys - 1) / minKeys);
    splits = std::max<int64_t>(1, std::min(want, most));
  }
  // generalKernel's splits are fixed ranges of splitKeys keys; streamKernel shares out
  // each token's own keys.
  int64_t splitKeys = std::max<int64_t>(32, ((maxKeys + splits - 1) / splits + 31) / 32 * 32);
  if (!streamed) splits = std::max<int64_t>(1, (maxKeys + splitKeys - 1) / splitKeys);

  const size_t parts = size_t(numTokens) * l.numHeads * size_t(splits);
  // partML after partO, at an even float (its pairs load as float2).
  const size_t oFloats = (parts * l.headDim + 1) / 2 * 2, bothBytes = (oFloats + parts * 2) * sizeof(float);
  // streamKernel's splits merge in their last block, by tickets (or, without, in combineKernel).
  int* const ticketed = streamed && splits > 1 ? tickets(size_t(numTokens) * l.numKvHeads * (groups / gt)) : nullptr;
  // Deferred: the projection after merges a short context's splits, so splitting them costs
  // attention no merge of its own (a longer one still merges here, by its tickets).
  const int most = deferredSplits(numTokens, int64_t(l.numHeads) * l.headDim);
  const bool deferred = to && wide && act == DType::BF16 && most && partialsFor(bothBytes) && (splits == 1 || ticketed);
  const size_t partialBytes = splits > 1 || deferred ? bothBytes : 0;
  const int mergeRounds = deferred ? kDeferredMergeRounds : wide ? kMergeRounds : 0;
  Args a{out, qkv, c.k, c.v, blockTables, queryStarts, contextLens, int(numSeqs), maxBlocks, c.numBlocks,
         int(c.blockSize), blockShift(c.blockSize), l.numHeads, l.numKvHeads, l.headDim, l.stride(), scale,
         {int(splits), int(minKeys), wide ? roundKeys(l.headDim * int(dtypeSize(c.dtype)), threads / 32, gt) : 1, mergeRounds},
         splitKeys, nullptr, nullptr, nullptr, deferred ? most : 0, vec};
  float* kept = partialBytes ? partialsFor(partialBytes) : nullptr;
  Scratch partials(kept ? 0 : partialBytes, "pagedAttention scratch");
  if (partialBytes) {
    a.partO = kept ? kept : partials.as<float>();
    a.partML = a.partO + oFloats;
    a.tickets = ticketed;
  }
  dim3 grid(unsigned(numTokens), unsigned(l.numKvHeads * (groups / gt)), unsigned(splits));
  launch("pagedAttention kernel", kernel, grid, threads, 0, a);
  if (deferred) {
    *to = {a.partO, a.partML, static_cast<const bf16*>(out), queryStarts, contextLens, int(numSeqs), maxKeys, l.numHeads,
           l.headDim, a.rule, most};
    return true;
  }
  if (splits > 1 && !a.tickets) {
    dim3 cgrid(unsigned(numTokens), unsigned(l.numHeads));
    const int combineThreads = std::min(256, (l.headDim + 31) / 32 * 32);
    withAct(act, [&](auto tt) {
      launch("pagedAttention combine kernel", combineKernel<decltype(tt)>, cgrid, combineThreads, 0, a, streamed);
    });
  }
  return false;
}

}  // namespace

void pagedAttention(DType act, void* out, const void* qkv, KvCache c, const int32_t* blockTables, int64_t maxBlocks,
                    const int32_t* queryStarts, const int32_t* contextLens, int64_t numSeqs, int64_t numTokens,
                    HeadLayout l, float scale) {
  attend(act, out, qkv, c, blockTables, maxBlocks, queryStarts, contextLens, numSeqs, numTokens, l, scale, nullptr);
}

bool pagedAttentionSplits(DType act, void* out, const void* qkv, KvCache c, const int32_t* blockTables,
                          int64_t maxBlocks, const int32_t* queryStarts, const int32_t* contextLens, int64_t numSeqs,
                          int64_t numTokens, HeadLayout l, float scale, SplitPartials* to) {
  return attend(act, out, qkv, c, blockTables, maxBlocks, queryStarts, contextLens, numSeqs, numTokens, l, scale, to);
}

}  // namespace mstar::gpu

// What both tensor-core prefill kernels share (attention_prefill.cu on mma.sync,
// attention_prefill_sm90.cu on wgmma): a block's tile of query tokens of one sequence and one
// q head, Q's fragments, the cache rows of a tile of keys, the masked row maxima of its
// scores, O's rescale, and the output rows.
#pragma once
#include "attention_prefill.cuh"

namespace mstar::gpu::prefill {

constexpr int kRows = 64;     // query tokens a block of prefillKernel, a warpgroup of prefillSm90Kernel
constexpr int kKeys = 64;     // keys per tile
constexpr int kThreads = 128;  // 4 warps of 16 rows (on sm_90a, one warpgroup)

struct PrefillArgs {
  bf16* out;
  const bf16* qkv;
  const bf16* k;
  const bf16* v;
  const int32_t* tables;
  const int32_t* queryStarts;
  const int32_t* contextLens;
  int numSeqs;
  int64_t maxBlocks, numBlocks;
  int blockSize;
  int blockShift;  // log2(blockSize) where it is a power of two, else -1
  int numHeads, numKvHeads;
  int64_t rowWidth;
  float scaleLog2;  // the softmax scale times log2(e): exp2 of scaled scores is e^(scale · q·k)
};

__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// The block's (sequence, first query token) for blocks of tileRows query tokens, or false
// past the last tile. The grid's rows (blockIdx.y) count the step's tiles sequence by
// sequence from the last: a sequence's later tiles see more keys, so the longest blocks
// start first and the short ones fill the last wave (in tile order, the last wave was a
// few long blocks running alone). The grid has enough rows for any split of the tokens
// into numSeqs sequences (gridRows).
__device__ __forceinline__ bool tileOf(const PrefillArgs& p, int tileRows, int& seq, int64_t& q0) {
  int64_t b = int64_t(gridDim.y) - 1 - blockIdx.y;
  for (int s = 0; s < p.numSeqs; ++s) {
    const int64_t n = p.queryStarts[s + 1] - p.queryStarts[s], tiles = (n + tileRows - 1) / tileRows;
    if (b < tiles) {
      seq = s;
      q0 = p.queryStarts[s] + b * tileRows;
      return true;
    }
    b -= tiles;
  }
  return false;
}

// Grid rows for tiles of tileRows query tokens, whatever the split of the tokens over the sequences.
inline unsigned gridRows(int64_t numTokens, int64_t numSeqs, int tileRows) {
  return unsigned((numTokens + tileRows - 1) / tileRows + numSeqs);
}

// Where the tile's keys sit in the cache, a row each: the cache row, or -1 (past the keys
// the tile may see, or a table entry outside the cache). One thread a key, a tile ahead of
// the loads that read it (head dim / 8 loader threads share a key: each found it on its own
// before).
__device__ __forceinline__ int32_t cacheRowOf(const PrefillArgs& p, const int32_t* table, int key, int keyEnd) {
  return key < keyEnd ? cacheRow(table, key, p.blockSize, p.blockShift, p.numBlocks) : -1;
}

// This lane's query rows, row and row + 8 (as the fragments hold them; row counts from the
// step's first token), as A fragments, one per 16 dims, straight from the qkv rows (rows past
// the tile's tokens are zeros).
template <int HD>
__device__ __forceinline__ void loadQ(const PrefillArgs& p, int64_t row, int h, int pair, bool live0, bool live1,
                                      uint32_t (&qa)[HD / 16][4]) {
  const bf16* q = p.qkv + row * p.rowWidth + int64_t(h) * HD + pair;
#pragma unroll
  for (int s = 0; s < HD / 16; ++s) {
    const bf16* c = q + s * 16;
    qa[s][0] = live0 ? *reinterpret_cast<const uint32_t*>(c) : 0;
    qa[s][1] = live1 ? *reinterpret_cast<const uint32_t*>(c + 8 * p.rowWidth) : 0;
    qa[s][2] = live0 ? *reinterpret_cast<const uint32_t*>(c + 8) : 0;
    qa[s][3] = live1 ? *reinterpret_cast<const uint32_t*>(c + 8 * p.rowWidth + 8) : 0;
  }
}

// A tile of scores (keys n0.. as 8-key column tiles, this lane's rows at positions pos0 and
// pos1): -inf where a row may not see the key (after its position, or from keyEnd on) or the
// row is past the tile's tokens, unless every row sees every key of the tile; then t0, t1
// (coming in as the rows' maxima so far) take the tile's (the 4 lanes of a quad share rows).
template <int N8>  // the tile's keys / 8
__device__ __forceinline__ void maskedRowMax(float (&s)[N8][4], int n0, int firstPos, int keyEnd, int pair, int pos0,
                                             int pos1, bool live0, bool live1, float& t0, float& t1) {
  if (n0 + N8 * 8 - 1 > firstPos || n0 + N8 * 8 > keyEnd) {
#pragma unroll
    for (int nt = 0; nt < N8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = n0 + nt * 8 + pair + (e & 1);
        if (!(e < 2 ? live0 : live1) || key > (e < 2 ? pos0 : pos1) || key >= keyEnd) s[nt][e] = -INFINITY;
      }
  }
#pragma unroll
  for (int nt = 0; nt < N8; ++nt) {
    t0 = fmaxf(t0, fmaxf(s[nt][0], s[nt][1]));
    t1 = fmaxf(t1, fmaxf(s[nt][2], s[nt][3]));
  }
  t0 = fmaxf(t0, __shfl_xor_sync(0xffffffffu, t0, 1));
  t0 = fmaxf(t0, __shfl_xor_sync(0xffffffffu, t0, 2));
  t1 = fmaxf(t1, __shfl_xor_sync(0xffffffffu, t1, 1));
  t1 = fmaxf(t1, __shfl_xor_sync(0xffffffffu, t1, 2));
}

// O's rows (this lane's two, in the accumulator layout) times keep0 and keep1: a row's output
// rescaled when its running max grew.
template <int HD>
__device__ __forceinline__ void scaleRows(float (&o)[HD / 8][4], float keep0, float keep1) {
#pragma unroll
  for (int dt = 0; dt < HD / 8; ++dt) {
    o[dt][0] *= keep0;
    o[dt][1] *= keep0;
    o[dt][2] *= keep1;
    o[dt][3] *= keep1;
  }
}

// The tile's output: this lane's row sums added over its quad, then O / l into the rows
// `row` and row + 8 (counted from the step's first token) of head h, live ones only. O / l as
// the other kernels and the CPU (the weights come from exp2 of scores scaled by scale ·
// log2(e), which differs from their expf of scale · q·k by float rounding only).
template <int HD>
__device__ __forceinline__ void storeRows(const PrefillArgs& p, const float (&o)[HD / 8][4], float l0, float l1, int64_t row,
                                          int h, int pair, bool live0, bool live1) {
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  auto div = [](float x, float l) { return l > 0 ? x / l : 0.0f; };
  const int64_t outWidth = int64_t(p.numHeads) * HD;
  bf16* out = p.out + row * outWidth + int64_t(h) * HD + pair;
#pragma unroll
  for (int dt = 0; dt < HD / 8; ++dt) {
    if (live0) *reinterpret_cast<uint32_t*>(out + dt * 8) = pack(div(o[dt][0], l0), div(o[dt][1], l0));
    if (live1) *reinterpret_cast<uint32_t*>(out + 8 * outWidth + dt * 8) = pack(div(o[dt][2], l1), div(o[dt][3], l1));
  }
}

// Launches the step on prefillSm90Kernel (attention_prefill_sm90.cu) where the device runs
// this library's sm_90a code (wgmmaKernels()); false, launching nothing, elsewhere.
bool onWgmma(int headDim, int64_t numTokens, const PrefillArgs& a);

}  // namespace mstar::gpu::prefill

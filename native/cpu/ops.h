// The CPU backend: exact fp32 reference kernels. Activations are f32; weights may be
// bf16, f16 or f32 and are widened to f32 as they are read. Shapes are checked by the
// bindings (native/ops.cc) before these run.
#pragma once
#include <cstdint>

#include "dtype.h"

namespace mstar::cpu {

// A weight-like operand: raw pointer plus its element type.
struct Weights {
  const void* data;
  DType dtype;
  // Row stride in elements, where a linear's weight is the first columns of a wider one
  // (0: rows as long as the op's input). Only linear reads it.
  int64_t ld = 0;
};

// Fused qkv rows: [n, (numHeads + 2 * numKvHeads) * headDim], q heads first, then k, then v;
// rows ld apart where they are wider (an adapted projection's rows carry its shrink after them).
struct HeadLayout {
  int numHeads, numKvHeads, headDim;
  int64_t ld = 0;  // row stride; 0: rowWidth()
  int64_t rowWidth() const { return int64_t(numHeads + 2 * numKvHeads) * headDim; }
  int64_t stride() const { return ld ? ld : rowWidth(); }
};

#ifdef __CUDACC__
#define MSTAR_HOST_DEVICE __host__ __device__
#else
#define MSTAR_HOST_DEVICE
#endif

// The slices of a fused weight's outputs (q, k, v or gate, up; one for the others): slice s
// holds outputs [at[s], at[s + 1]), from at[0] = 0 to at[count], the weight's width. Held by
// value: the addon checks them for every backend (a device tensor of them went unchecked on
// CUDA), and a kernel reads them from its parameters, not memory (the reads this saves cost
// nothing measurable end to end: they came before awaitPrior, beside the kernel before).
struct SliceStarts {
  static constexpr int kMax = 8;
  int32_t at[kMax + 1] = {};
  int count = 0;
  // The slice holding output o (count: none, o past the end): the last s <= count with
  // at[s] <= o, an empty slice giving way to the next. A fixed trip count: unrolled, a
  // kernel's reads of `at` are at fixed places of its parameters.
  MSTAR_HOST_DEVICE int of(int64_t o) const {
    int s = 0;
    for (int i = 1; i <= kMax; ++i) s = i <= count && o >= at[i] ? i : s;
    return s;
  }
};

// An adapted projection's delta, added by the op that takes the projection's output y. The
// projection's GEMM ran by its weight with every slot's A beneath W (lib/lora/slot_weights.ts),
// so each row of y carries, after its own columns, the row's input shrunk by every slot: t.
// Output o of row r gains the sum over k of t[r, c + k] * bT[c + k, o], c = (slot * numSlices +
// s) * rank, for the row's slot (0 or out of range: nothing), s the slice holding o
// (slices), k below the slot's rank in s. bT is every slot's b transposed, [slots *
// numSlices * rank, outputs] (a row of outputs is one run of memory, read whole by the op's
// threads). t and bT are activations: f32 on the CPU, the activation type on CUDA.
struct LoraDelta {
  const void* t = nullptr;  // row r at t + r * ldt elements; null: no delta
  int64_t ldt = 0;
  const void* bT = nullptr;  // row k at bT + k * ldb
  int64_t ldb = 0;
  const int32_t* slotOfRow = nullptr;
  SliceStarts slices;
  int64_t numSlots = 0, rank = 0;
  const int32_t* ranks = nullptr;  // [numSlots, slices.count], each slot's rank per slice
};
// Row r's delta at output o (f32, k in order).
float loraDelta(const LoraDelta& d, int64_t r, int64_t o);

void embedding(float* out, Weights table, const int32_t* ids, int64_t n, int64_t dim);
void rmsNorm(float* out, const float* x, Weights w, int64_t rows, int64_t dim, float eps);
// residual += x (+ d's delta), then out = rmsNorm(residual); x's rows ldx apart (0: dim).
void addRmsNorm(float* residual, const float* x, Weights w, float* out, int64_t rows, int64_t dim, float eps,
                int64_t ldx = 0, const LoraDelta& d = {});
void headRmsNorm(float* qkv, Weights qw, Weights kw, int64_t n, HeadLayout l, float eps);
// out[n, outF] = x[n, in] · W[outF, in]^T (+ bias[outF]); accumulate: out += that.
void linear(float* out, const float* x, Weights w, const Weights* bias, int64_t n, int64_t in, int64_t outF,
            bool accumulate = false);
// Rotates the first 2 * half dims of every q and k head (rotate-half / NeoX pairing).
void rope(float* qkv, const int32_t* positions, const float* invFreq, int64_t n, HeadLayout l, int half);
// gate and up (+ d's delta) of rows ldg apart (0: 2 * inter).
void siluMul(float* out, const float* gateUp, int64_t n, int64_t inter, int64_t ldg = 0, const LoraDelta& d = {});
// y[r, o] += d's delta for o < outF, rows ldy apart.
void addLoraDelta(float* y, int64_t ldy, int64_t n, int64_t outF, const LoraDelta& d);
void add(float* out, const float* a, const float* b, int64_t n);
void gatherRows(float* out, const float* x, const int32_t* idx, int64_t m, int64_t dim);
// Where from[i] >= 0: tokens[i] = sampled[from[i]], embedRows[i] = rowSlots[i] * vocab + tokens[i].
void feedTokens(int32_t* tokens, int32_t* embedRows, const int32_t* sampled, const int32_t* from, const int32_t* rowSlots,
                int vocab, int64_t n);

// Paged KV cache: [numBlocks, blockSize, numKvHeads, headDim] for k and for v.
struct KvCache {
  float* k;
  float* v;
  int64_t numBlocks, blockSize;
};
// Stores token i's k and v at slot slots[i] (= block * blockSize + offset); slot < 0 skips.
void kvWrite(KvCache c, const float* qkv, const int32_t* slots, int64_t n, HeadLayout l);
// Causal attention of each sequence's new tokens over its whole cached context.
// Sequence s owns query rows [queryStarts[s], queryStarts[s+1]) and has contextLens[s]
// tokens in the cache (its new tokens included, written by kvWrite first).
void pagedAttention(float* out, const float* qkv, KvCache c, const int32_t* blockTables, int64_t maxBlocks,
                    const int32_t* queryStarts, const int32_t* contextLens, int64_t numSeqs, HeadLayout l,
                    float scale);

struct SamplingRows {
  const float* temperature;  // <= 0: greedy
  const int32_t* topK;       // <= 0: no limit
  const float* topP;         // >= 1: no limit
  const int64_t* seeds;
  const int32_t* steps;      // which draw of the request this is: same seed + step, same token
};
void sample(int32_t* outIds, const float* logits, int64_t n, int64_t vocab, SamplingRows p);
// Log-softmax of the raw logits: the chosen token's logprob and the k most likely tokens.
void logprobs(float* chosenLp, int32_t* topIds, float* topLp, int64_t k, const float* logits,
              const int32_t* chosen, int64_t n, int64_t vocab);

// LoRA with one adapter slot per row; a is [slots, numSlices * rank, in] and b is
// [slots, outF, rank] with the scale folded in. Rows of slot 0 get no delta. slotRanks
// [slots, slices] (optional): each slot's rank per slice; rank rows past it are padding,
// neither read nor multiplied.
void loraShrink(float* t, const float* x, Weights a, const int32_t* slotOfRow, int64_t n, int64_t in,
                int64_t rankRows, const int32_t* slotRanks = nullptr, int64_t slices = 1);
// wide [n, in + numSlots * rankRows] = x, then the row's t at its slot's columns and zeros at
// every other slot's (slot 0 or out of range: all zeros): the input of a projection whose
// weight carries every slot's b beside W. t is [n, rankRows] (the row's own slot), or with
// everySlot [n, numSlots * rankRows] (a shrink by every slot at once; the row's part kept).
void joinWide(float* wide, const float* x, const float* t, const int32_t* slotOfRow, int64_t numSlots, int64_t n,
              int64_t in, int64_t rankRows, bool everySlot = false);
// b: [outF, numSlots, numSlices * rank].
void loraExpand(float* out, const float* t, Weights b, int64_t numSlots, const int32_t* slotOfRow,
                const SliceStarts& slices, int64_t n, int64_t outF, int64_t rank, const int32_t* slotRanks = nullptr);
// Writes scale * src (or its transpose) into a 2-D dst at (rowOffset, colOffset).
void copyRegion(void* dst, DType dt, int64_t dstCols, const void* src, DType st, int64_t rows, int64_t cols,
                int64_t rowOffset, int64_t colOffset, float scale, bool transpose, int64_t srcLd = 0);
// As gpu::loraMerge: w[o, i] = base[o, i] + sum over c < k of b[o, c] · a[c, i], in f32 (c in
// order), rounded once to dt.
void loraMerge(DType dt, void* w, int64_t ldw, const void* base, const void* b, int64_t ldb, const void* a, int64_t lda,
               int64_t out, int64_t in, int64_t k);

}  // namespace mstar::cpu

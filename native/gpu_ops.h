// The CUDA backend: the same ops as cpu/ops.h, enqueued on the process's stream and
// implemented in cuda/*.cu. Activations (x, out, residual, qkv, gateUp, logits, LoRA t)
// are f32 or bf16, named by `act`; every activation operand of one call shares it.
// Weights are f32, bf16 or f16 as on the CPU, accumulation is f32 everywhere. Shapes are
// checked by the bindings; values living in device memory (ids, slots, block tables) are
// not, so kernels guard them: an out-of-range id reads as zeros instead of faulting.
// Every launcher throws gpu::Error naming the CUDA error.
#pragma once
#include <cstdint>

#include "cpu/ops.h"
#include "dtype.h"

namespace mstar::gpu {

using cpu::HeadLayout;
using cpu::LoraDelta;
using cpu::SliceStarts;
using cpu::SamplingRows;
using cpu::Weights;

// Paged KV cache [numBlocks, blockSize, numKvHeads, headDim] for k and v; f32 or bf16.
struct KvCache {
  void* k;
  void* v;
  DType dtype;
  int64_t numBlocks, blockSize;
};

// Each slot's rank in each slice of a target, ranks[slot * slices + s] in device memory (the
// pool pads every adapter to its largest rank R): rank rows past it are zeros, which the
// kernels neither read nor multiply. ranks null: every slot uses all R.
struct SlotRanks {
  const int32_t* ranks;
  int64_t slices;
};

void embedding(DType act, void* out, Weights table, int64_t tableRows, const int32_t* ids, int64_t n, int64_t dim);
// next: the output width of the projection that reads out (0: none, or not known), so that a
// tensor-core GEMV there can launch early (norm.cu).
void rmsNorm(DType act, void* out, const void* x, Weights w, int64_t rows, int64_t dim, float eps, int64_t next = 0);
// residual += x (+ d's delta, the two rounded first), then out = rmsNorm(residual); x's rows ldx apart (0: dim).
void addRmsNorm(DType act, void* residual, const void* x, Weights w, void* out, int64_t rows, int64_t dim, float eps,
                int64_t ldx = 0, const LoraDelta& d = {}, int64_t next = 0);
void headRmsNorm(DType act, void* qkv, Weights qw, Weights kw, int64_t n, HeadLayout l, float eps);
// A wide row's layout (see loraShrink): its first `in` columns, then slotCols columns for each of
// numSlots slots, a row's columns outside its own slot's all zero; so the decode GEMV reads only
// its rows' slots' (a pool's other slots' b costs nothing at c <= 4). slotOfRow null: no layout.
struct WideRows {
  const int32_t* slotOfRow = nullptr;
  int64_t in = 0, slotCols = 0, numSlots = 0;
};
// An extended projection's output rows from `from` on: perSlot rows a slot (slot s's at from +
// s * perSlot). Those of slots no row of slotOfRow holds (slot 0, the zero adapter, among them)
// may be left unwritten: no op reads a row's shrink but in its own slot's. slotOfRow null: none.
struct UnusedSlots {
  const int32_t* slotOfRow = nullptr;
  int64_t from = 0, perSlot = 0;

  // Whether a GEMV of blocks of blockRows output rows can skip slots: W's rows come first and
  // fill whole blocks, and so does each slot's share of the outF rows.
  bool wholeBlocks(int64_t outF, int64_t blockRows) const {
    return slotOfRow && from > 0 && from % blockRows == 0 && perSlot % blockRows == 0 && (outF - from) % perSlot == 0;
  }
  // Whether a row of `slot` has shrink rows among the outF: not slot 0 (no adapter), nor a slot
  // past the table (a value in device memory, which the kernels guard against).
  MSTAR_HOST_DEVICE bool holds(int64_t slot, int64_t outF) const { return slot > 0 && from + (slot + 1) * perSlot <= outF; }
};
// accumulate: out += x · wᵀ (+ bias), one rounding (how the residual stream takes a projection).
void linear(DType act, void* out, const void* x, Weights w, const Weights* bias, int64_t n, int64_t in, int64_t outF,
            bool accumulate = false, const WideRows& wide = {}, const UnusedSlots& unused = {});
// out [n, inter] = SiLU(gate) · up of x · wᵀ (+ bias), w being [gate; up] (2 · inter rows, its
// first in columns): one kernel at decode sizes, else linear into gateUp [n, 2 · inter], then siluMul.
void linearSiluMul(DType act, void* out, const void* x, Weights w, const Weights* bias, int64_t n, int64_t in,
                   int64_t inter, void* gateUp);
// out = rmsNorm(residual) · wᵀ (+ bias), or with gateUp SiLU(gate) · up of it (as linearSiluMul,
// outF = inter): one kernel at decode sizes, else rmsNorm into x [n, in], then linear or
// linearSiluMul (gateUp [n, 2 · inter] their scratch).
void rmsNormLinear(DType act, void* out, const void* residual, Weights normW, float eps, Weights w, const Weights* bias,
                   int64_t n, int64_t in, int64_t outF, void* x, void* gateUp);
void rope(DType act, void* qkv, const int32_t* positions, const float* invFreq, int64_t n, HeadLayout l, int half);
// gateUp's rows ldg apart (0: 2 * inter); d's delta joins gate and up first, each rounded.
void siluMul(DType act, void* out, const void* gateUp, int64_t n, int64_t inter, int64_t ldg = 0,
             const LoraDelta& d = {});
void add(DType act, void* out, const void* a, const void* b, int64_t n);
void gatherRows(DType act, void* out, const void* x, int64_t xRows, const int32_t* idx, int64_t m, int64_t dim);
// Where 0 <= from[i] < numSampled: tokens[i] = sampled[from[i]], embedRows[i] = rowSlots[i] * vocab + tokens[i].
void feedTokens(int32_t* tokens, int32_t* embedRows, const int32_t* sampled, int64_t numSampled, const int32_t* from,
                const int32_t* rowSlots, int vocab, int64_t n);

void kvWrite(DType act, KvCache c, const void* qkv, const int32_t* slots, int64_t n, HeadLayout l);
// d's delta into qkv (in place, rounded), headRmsNorm (when qNorm and kNorm are given), rope,
// then kvWrite, in one launch.
void ropeKvWrite(DType act, void* qkv, const int32_t* positions, const float* invFreq, int half, const Weights* qNorm,
                 const Weights* kNorm, float eps, KvCache c, const int32_t* slots, int64_t n, HeadLayout l,
                 const LoraDelta& d = {});
// numTokens = rows of qkv; queryStarts has numSeqs + 1 entries (in device memory).
void pagedAttention(DType act, void* out, const void* qkv, KvCache c, const int32_t* blockTables, int64_t maxBlocks,
                    const int32_t* queryStarts, const int32_t* contextLens, int64_t numSeqs, int64_t numTokens,
                    HeadLayout l, float scale);
// pagedAttention into attn, then linear(out, attn, w, ...) (x = attn, in = numHeads · headDim):
// at decode sizes the o projection's GEMV merges attention's key splits itself (attn then left
// unwritten: scratch); else the two ops one by one.
void pagedAttentionLinear(DType act, void* attn, const void* qkv, KvCache c, const int32_t* blockTables,
                          int64_t maxBlocks, const int32_t* queryStarts, const int32_t* contextLens, int64_t numSeqs,
                          int64_t numTokens, HeadLayout l, float scale, void* out, Weights w, const Weights* bias,
                          int64_t outF, bool accumulate, const UnusedSlots& unused = {});

// Same RNG, same order (top-k, then top-p, then the draw) as cpu::sample.
void sample(DType act, int32_t* outIds, const void* logits, int64_t n, int64_t vocab, SamplingRows p);
void logprobs(DType act, float* chosenLp, int32_t* topIds, float* topLp, int64_t k, const void* logits,
              const int32_t* chosen, int64_t n, int64_t vocab);

// a: [numSlots, rankRows, in]; b: [outF, numSlots, rankRows]. Grids depend on n and the sizes only.
// wide: t is a wide row [n, in + numSlots * rankRows], x then every slot's rank rows (the row's
// own slot's t, zeros in the others'); x is copied there, or read there when x == t.
void loraShrink(DType act, void* t, const void* x, Weights a, int64_t numSlots, const int32_t* slotOfRow, int64_t n,
                int64_t in, int64_t rankRows, SlotRanks ranks = {}, bool wide = false);
void loraExpand(DType act, void* out, const void* t, Weights b, int64_t numSlots, const int32_t* slotOfRow,
                const SliceStarts& slices, int64_t n, int64_t outF, int64_t rank, SlotRanks ranks = {});
// wide [n, in + numSlots * width] = x [n, in], then s [n, numSlots * width] keeping only the row's
// slot's width columns (slot 0 or out of range: none): a shrink by every slot at once made a wide row.
void loraJoin(DType act, void* wide, const void* x, const void* s, const int32_t* slotOfRow, int64_t numSlots,
              int64_t n, int64_t in, int64_t width);
// out += (delta + the expand), the inner sum rounded first, every row (slot 0: out += delta).
void loraExpandAdd(DType act, void* out, const void* delta, const void* t, Weights b, int64_t numSlots,
                   const int32_t* slotOfRow, const SliceStarts& slices, int64_t n, int64_t outF, int64_t rank,
                   SlotRanks ranks = {});
// Elements in a wide row (see loraShrink): x's `in`, then rankRows for each slot.
inline int64_t wideRowWidth(int64_t in, int64_t numSlots, int64_t rankRows) { return in + numSlots * rankRows; }

// linearExpand's LoRA operands: each row uses its slotOfRow slot (0 or out of range: none);
// out += t[slice of the column] · b[slot]ᵀ.
struct LoraExpandArgs {
  const void* t;
  Weights b;  // [numSlots, outF, rank]
  int64_t numSlots;
  const int32_t* slotOfRow;
  SliceStarts slices;
  int64_t rank;
  SlotRanks ranks;
};
// linear with the expand added before the output is stored (decode GEMV), or linear then
// loraExpand (larger batches). accumulate: out += instead of out =.
void linearExpand(DType act, void* out, const void* x, Weights w, const Weights* bias, int64_t n, int64_t in,
                  int64_t outF, LoraExpandArgs lora, bool accumulate);
void copyRegion(void* dst, DType dt, int64_t dstCols, const void* src, DType st, int64_t rows, int64_t cols,
                int64_t rowOffset, int64_t colOffset, float scale, bool transpose, int64_t srcLd = 0);
void fill(void* t, DType dt, int64_t n, float value);
// w[o, i] = base[o, i] + sum over c < k of b[o, c] · a[c, i] (o < out, i < in), in f32, rounded
// once: an adapter merged into its weight (lora_merge.cu). Row strides ldw, ldb, lda; base is
// [out, in]; every tensor of dtype dt.
void loraMerge(DType dt, void* w, int64_t ldw, const void* base, const void* b, int64_t ldb, const void* a, int64_t lda,
               int64_t out, int64_t in, int64_t k);
// Waits for the stream: the result comes back to the host.
double maxAbsDiff(const void* a, DType at, const void* b, DType bt, int64_t n);

}  // namespace mstar::gpu

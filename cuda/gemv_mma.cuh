// The decode GEMM on tensor cores (gemv_mma.cu), for linear's few-row steps.
#pragma once
#include "attention_split.cuh"
#include "common.cuh"

namespace mstar::gpu {

// Whether gemvMma takes x[n, in] · w[outF, in]ᵀ by its shape (bf16 and aligned rows aside),
// and from which weight: a small one (under 32 MiB: 1 to 16 rows, 32 where out <= in) or a
// large one (2 to 4 rows). A decode norm asks it of the projection after it (norm.cu).
enum class GemvMmaFit { None, Small, Large };
GemvMmaFit gemvMmaFit(int64_t n, int64_t in, int64_t outF);

// out[n, outF] = x[n, in] · w[outF, in]ᵀ (+ bias; accumulate: out += it, rounded as linear
// rounds), bf16 activations and weights, on tensor cores; false (nothing launched) where it
// does not apply: other dtypes, rows outside its range, in not a multiple of 256,
// misaligned rows.
// unused: the grid takes only the slots the rows use (the rows of the others are not written),
// where each slot's rows are whole blocks of 16, W has rows before them (from > 0) and n <= 32.
// gated: w is [gate; up] (2 · outF rows) and out takes SiLU(gate) · up, rounded as siluMul
// rounds them (linearSiluMul); only where 2 · outF > in, without bias, accumulate or unused.
// norm: x is a residual stream that the GEMV norms itself (rmsNormLinear): each x element times
// its norm weight on its way into the mma, the row's 1 / sqrt(mean(x²) + eps) on the outputs;
// only with a bf16 weight of at most kMaxNormIn, without accumulate or unused, and where the
// grid's blocks are all on the SMs at once (gemv_mma.cu's normFits).
struct RowNorm {
  const void* w = nullptr;  // [in] bf16; null: x is the input as it is
  float eps = 0;
};
constexpr int64_t kMaxNormIn = 8192;
// merge: x is attention's output [n, in] left as its splits' partials (attention_split.cuh),
// which the block merges into shared memory after its wait (x is not read); only without gated
// or norm, and where gemvMmaMerges.
bool gemvMma(DType act, void* out, const void* x, Weights w, const Weights* bias, int64_t n, int64_t in, int64_t outF,
             bool accumulate, const UnusedSlots& unused = {}, bool gated = false, const RowNorm& norm = {},
             const SplitPartials* merge = nullptr);
// Whether gemvMma takes x [n, in] · w[outF, in]ᵀ with merge: where it would take x itself and
// n · in <= 4096 (a block merges all of x, at most 2 runs of 8 a thread).
bool gemvMmaMerges(DType act, Weights w, int64_t n, int64_t in, int64_t outF);

}  // namespace mstar::gpu

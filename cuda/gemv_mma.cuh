// The decode GEMM on tensor cores (gemv_mma.cu), for linear's few-row steps.
#pragma once
#include "common.cuh"

namespace mstar::gpu {

// The rows gemvMma takes of a weight under 32 MiB whose out > in (qkv, gate_up): from
// kGemvMmaMinRows to kGemvMmaMaxRowsSmall (gemv_mma.cu has the rest of its rule).
constexpr int kGemvMmaMinRows = 2, kGemvMmaMaxRowsSmall = 16;

// out[n, outF] = x[n, in] · w[outF, in]ᵀ (+ bias; accumulate: out += it, rounded as linear
// rounds), bf16 activations and weights, on tensor cores; false (nothing launched) where it
// does not apply: other dtypes, rows outside its range, in not a multiple of 256,
// misaligned rows.
bool gemvMma(DType act, void* out, const void* x, Weights w, const Weights* bias, int64_t n, int64_t in, int64_t outF,
             bool accumulate);

}  // namespace mstar::gpu

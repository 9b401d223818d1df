// Compiled, never run, by test/gpu/cublaslt.test.ts against the installed cublasLt.h:
// every value and layout that native/cublaslt_abi.h declares by hand must be NVIDIA's.
#include <cublasLt.h>

#include <cstddef>

#include "cublaslt_abi.h"

namespace abi = mstar::cublaslt::abi;

static_assert(abi::kSuccess == CUBLAS_STATUS_SUCCESS, "CUBLAS_STATUS_SUCCESS");
static_assert(abi::kComputeF32 == CUBLAS_COMPUTE_32F, "CUBLAS_COMPUTE_32F");
static_assert(abi::kDataF32 == CUDA_R_32F, "CUDA_R_32F");
static_assert(abi::kDataBf16 == CUDA_R_16BF, "CUDA_R_16BF");
static_assert(abi::kOpN == CUBLAS_OP_N && abi::kOpT == CUBLAS_OP_T, "cublasOperation_t");
static_assert(abi::kDescTransA == CUBLASLT_MATMUL_DESC_TRANSA, "CUBLASLT_MATMUL_DESC_TRANSA");
static_assert(abi::kDescTransB == CUBLASLT_MATMUL_DESC_TRANSB, "CUBLASLT_MATMUL_DESC_TRANSB");
static_assert(abi::kPrefMaxWorkspace == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, "MAX_WORKSPACE_BYTES");
static_assert(abi::kPrefMinAlignA == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, "MIN_ALIGNMENT_A_BYTES");
static_assert(abi::kPrefMinAlignA + 1 == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, "MIN_ALIGNMENT_B_BYTES");
static_assert(abi::kPrefMinAlignA + 2 == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, "MIN_ALIGNMENT_C_BYTES");
static_assert(abi::kPrefMinAlignA + 3 == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, "MIN_ALIGNMENT_D_BYTES");
static_assert(abi::kLayoutCols == CUBLASLT_MATRIX_LAYOUT_COLS, "CUBLASLT_MATRIX_LAYOUT_COLS");

// The enums travel as int.
static_assert(sizeof(cublasStatus_t) == sizeof(int) && sizeof(cublasComputeType_t) == sizeof(int) &&
                  sizeof(cudaDataType_t) == sizeof(int) && sizeof(cublasLtMatmulDescAttributes_t) == sizeof(int) &&
                  sizeof(cublasLtMatmulPreferenceAttributes_t) == sizeof(int) &&
                  sizeof(cublasLtMatrixLayoutAttribute_t) == sizeof(int),
              "enum sizes");

static_assert(sizeof(abi::Algo) == sizeof(cublasLtMatmulAlgo_t), "cublasLtMatmulAlgo_t");
using Result = cublasLtMatmulHeuristicResult_t;
static_assert(sizeof(abi::HeuristicResult) == sizeof(Result), "cublasLtMatmulHeuristicResult_t size");
static_assert(offsetof(abi::HeuristicResult, workspaceSize) == offsetof(Result, workspaceSize), "workspaceSize");
static_assert(offsetof(abi::HeuristicResult, state) == offsetof(Result, state), "state");
static_assert(offsetof(abi::HeuristicResult, wavesCount) == offsetof(Result, wavesCount), "wavesCount");

// The part of cuBLASLt's C ABI that native/cublaslt.cc uses, declared by hand: there is no
// cublasLt.h on the build machine. Values and layouts are NVIDIA's (cublasLt.h,
// cublas_api.h, library_types.h of CUDA 12 and 13); test/gpu/cublaslt_abi.cc checks each
// against the real header where one is installed.
#pragma once
#include <cstddef>
#include <cstdint>

namespace mstar::cublaslt::abi {

// cublasStatus_t, cudaDataType_t, cublasComputeType_t and the attribute enums are C enums: int.
constexpr int kSuccess = 0;           // CUBLAS_STATUS_SUCCESS
constexpr int kComputeF32 = 68;       // CUBLAS_COMPUTE_32F
constexpr int kDataF32 = 0;           // CUDA_R_32F
constexpr int kDataBf16 = 14;         // CUDA_R_16BF
constexpr int kOpN = 0, kOpT = 1;     // CUBLAS_OP_N, CUBLAS_OP_T
constexpr int kDescTransA = 3;        // CUBLASLT_MATMUL_DESC_TRANSA (int32_t)
constexpr int kDescTransB = 4;        // CUBLASLT_MATMUL_DESC_TRANSB (int32_t)
constexpr int kPrefMaxWorkspace = 1;  // CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES (uint64_t)
constexpr int kPrefMinAlignA = 5;     // CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES (uint32_t); B, C, D are 6, 7, 8
constexpr int kLayoutCols = 3;        // CUBLASLT_MATRIX_LAYOUT_COLS (uint64_t)

struct Algo {  // cublasLtMatmulAlgo_t
  uint64_t data[8];
};
struct HeuristicResult {  // cublasLtMatmulHeuristicResult_t
  Algo algo;
  size_t workspaceSize;
  int state;
  float wavesCount;
  int reserved[4];
};
static_assert(sizeof(HeuristicResult) == 96, "cublasLtMatmulHeuristicResult_t is 96 bytes");

}  // namespace mstar::cublaslt::abi

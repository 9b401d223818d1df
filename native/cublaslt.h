// cuBLASLt, loaded at run time with dlopen so the same binary loads (and runs its own
// kernels) on a machine without it, and says exactly what is missing.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mstar::cublaslt {

struct Status {
  bool loaded = false;
  std::string path;   // the library that was loaded
  std::string error;  // why it was not (file not found, missing symbol, ...)
  size_t version = 0; // cublasLtGetVersion(), e.g. 130100
};

// Tries to load the library on the first call (never at module load); later calls
// return the same answer. Thread-safe.
const Status& status();

// out[n, outF] = x[n, in] · w[outF, in]ᵀ, all bf16 and row-major, f32 accumulation, on
// `stream` (a cudaStream_t); accumulate: out += that (beta = 1; the H200's kernels add C in
// bf16, to the product rounded first). Returns false, having enqueued nothing, when cuBLASLt
// is not loaded or offers no algorithm for this case, so the caller runs its own kernel;
// throws gpu::Error when a cuBLASLt call fails. ldw: w's row stride (0: in), for the first
// in columns of a wider weight.
bool gemmBf16(void* out, const void* x, const void* w, int64_t n, int64_t in, int64_t outF, void* stream,
              bool accumulate = false, int64_t ldw = 0);

// Up to this many rows every row count makes a GEMM plan of its own (decode steps; above it,
// rowBuckets), which tuning picks by timing (setTuning).
constexpr int64_t kTunedRows = 64;

// While on, a GEMM shape of up to kTunedRows rows met for the first time outside a capture takes
// the fastest of cuBLASLt's candidates, timed; off (the default) the heuristic's first pick. The
// engine turns it on for its warm-up steps only: a shape first met while serving (a short
// prompt's row count) would stall the stream for its timing. MSTAR_GEMM_TUNE=0 keeps it off.
void setTuning(bool on);

// The row counts above kTunedRows whose GEMMs make a shape's plans (a step of n rows runs the
// plan of the least of them >= n), up to the one that serves maxRows. A shape's first GEMM at
// one of them, or at any count up to kTunedRows, picks its algorithm and may run that kernel
// for the first time: milliseconds of host time, which the engine's warm-up spends before
// serving.
std::vector<int64_t> rowBuckets(int64_t maxRows);

}  // namespace mstar::cublaslt
